"""stream_collect.py's rules applied to a piece of events read as columns by the compiled reader
(trace/fastread.py), with numpy over the whole piece instead of Python per event. Torch-free.

    events = read(text)          # a Columns, or (no compiled reader; text it leaves to msgspec) decode(text)
    collector.add(events)        # Collector.add takes either

Only what is certain to come out as the per-event rules make it is done here: a piece with anything those
rules refuse or treat specially (a value of an unusual JSON type, a time out of range or missing where one is
needed, a step that is no complete event, a ``[memory]`` event without numeric args) is decoded again with
msgspec and collected event by event, which gives the same events or the same error, naming the event.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import repeat

import numpy as np
from stepscope.analysis.events import (
    DATA_ANNOTATIONS,
    DEVICE_KIND_CODES,
    LONG_FRAME_US,
    MODEL_FRAME_PREFIXES,
    MODULE_FRAME_PREFIX,
    PROFILER_STEP,
    HostEvent,
    MemoryColumns,
    MemorySample,
    Step,
)
from stepscope.analysis.validate import MAX_TIME_US, STEP_NAME
from stepscope.trace.fastread import (
    T_INT,
    T_MISSING,
    T_NULL,
    T_OBJECT,
    T_REAL,
    T_STR,
    Columns,
    as_list,
    plan_rows,
)
from stepscope.trace.vocabulary import DATALOADER_PREFIX, MEMORY_EVENT, STEP_PREFIX

_EXACT = float(2**53)  # integers up to this are exact as float64: beyond it, msgspec's own path compares them

MEMORY_FIELDS = MemorySample._fields[1:-1]  # stream_collect.MEMORY_ARGS, as the columns' field names


def find_base(c, cols: Columns, decode) -> bool:
    """Collector.find_base over a piece of columns."""
    t = cols.type("ts")
    timed = np.flatnonzero((t != T_MISSING) & (t != T_NULL) & (t != T_STR))
    if len(timed) == 0:
        return False
    first = timed[0]
    if t[first] not in (T_INT, T_REAL):  # true/false/an integer beyond int64: as the per-event rule says
        return c.find_base(decode(cols.text))
    c.base = float(math.floor(cols.real("ts")[first]))
    return True


def add(c, cols: Columns, decode) -> None:
    """Collector.add of a piece of columns; ``decode(text)``: the msgspec decoder, for a piece this path
    leaves to the per-event rules."""
    plan = _plan(c, cols)
    if plan is None:
        c.add(decode(cols.text))
    else:
        _collect(c, plan)


def encoded(c, cols: Columns) -> dict | None:
    """What ``stream_ranges.encode`` makes of a collector that took this piece alone, made from the columns
    without an event tuple; None when the piece must be collected event by event. ``c``: an empty collector
    with the file's base."""
    plan = _plan(c, cols)
    return None if plan is None else _encode(plan)


class _Plan:
    """A piece's events sorted into the collector's lists, as rows of its columns (``_plan``)."""

    __slots__ = ("cols", "base", "name", "cat", "infos", "s_all", "t_all", "steps", "memory", "memory_tid",
                 "calls", "builtins", "long_rows", "model", "module_rows", "module_tid", "dev_rows", "device",
                 "stream", "dev_corr", "rt_rows", "rt_tid", "rt_corr", "host", "shapes")

    def names(self, rows: np.ndarray) -> list:
        """The names of ``rows``: the piece's own string objects, gathered from an array of them."""
        return self.cols.string_array()[self.name[rows]].tolist()


def _plan(c, cols: Columns) -> _Plan | None:
    """The piece's events as Collector.add would sort them; None when it must be done event by event. The
    checks, times, codes and rows of each kind come from one compiled pass over the piece (fastread.plan_rows);
    what each distinct string is, as a category and as a name, is asked here once per string."""
    strings = cols.strings
    m = len(strings)
    # what each distinct string is as a category (index m: no category) and its bits as a name (index m: none)
    infos: list = [c._kinds.get(s) or c._kind(s) for s in strings]
    infos.append(c._kind(c_unset()))
    bits = np.zeros(m + 1, dtype=np.int16)
    if m:
        bits[:m] = np.fromiter(map(_name_bits, strings), dtype=np.int16, count=m)
    planned = plan_rows(cols, np.array([i[1] for i in infos], dtype=np.int8),
                        np.array([i[2] for i in infos], dtype=bool), bits, _code_of(strings, "X"),
                        _code_of(strings, "i"), c.base, LONG_FRAME_US, MAX_TIME_US)
    if planned is None:
        return None
    s_all, t_all, name, cat, rows = planned
    p = _Plan()
    (p.steps, p.memory, p.calls, p.builtins, p.long_rows, p.model, p.module_rows, p.dev_rows, p.rt_rows, data_rows,
     op_rows, ann_rows) = rows
    p.cols, p.base, p.name, p.cat, p.infos, p.s_all, p.t_all = cols, c.base, name, cat, infos, s_all, t_all
    return _read_values(p, data_rows, op_rows, ann_rows)


def _read_values(p: _Plan, data_rows: np.ndarray, op_rows: np.ndarray, ann_rows: np.ndarray) -> _Plan | None:
    """The plan's values read at its rows: the memory samples' fields and threads, the device activity's devices,
    streams and ids, the runtime calls' ids, each list's threads, whether ops recorded shapes; None where one is
    of a type whose conversion the per-event rules make."""
    cols = p.cols
    p.memory_tid = None
    if len(p.memory):
        rows = p.memory
        if not all(np.all((t == T_INT) | (t == T_MISSING)) for t in (cols.type(k)[rows] for k in MEMORY_FIELDS)):
            return None  # every MEMORY_ARGS field an int or missing (0), as the per-event rules read them
        # the threads as int64 where each is an integer (as MemoryColumns keeps them), else their values
        p.memory_tid = cols.int("tid")[rows] if np.all(cols.type("tid")[rows] == T_INT) else cols.values("tid", rows)
        if p.memory_tid is None:
            return None
    # values that are Python objects in the events: rebuilt only where this path can be exact
    p.device = p.stream = p.dev_corr = p.rt_corr = p.rt_tid = None
    dev_rows, rt_rows = p.dev_rows, p.rt_rows
    if len(dev_rows):
        p.device = _device_numbers(cols, dev_rows, "device", "pid", 0)
        p.stream = _device_numbers(cols, dev_rows, "stream", "tid", None)
        p.dev_corr = cols.ints_or_values("correlation", dev_rows)  # int64 where all are integers
        if (p.device is None or p.stream is None or p.dev_corr is None
                or not _no_strings(cols, dev_rows, "correlation")):
            return None
    if len(rt_rows):
        p.rt_corr = cols.ints_or_values("correlation", rt_rows)
        p.rt_tid = cols.ints_or_values("tid", rt_rows)
        if p.rt_corr is None or p.rt_tid is None or not _no_strings(cols, rt_rows, "correlation"):
            return None
    p.host = {}  # collector list -> (rows, tids), in file order
    for rows, out in ((data_rows, "data_spans"), (op_rows, "ops"), (ann_rows, "annotations")):
        tids = cols.ints_or_values("tid", rows) if len(rows) else []
        if tids is None:
            return None
        p.host[out] = (rows, tids)
    p.module_tid = cols.ints_or_values("tid", p.module_rows) if len(p.module_rows) else []
    if p.module_tid is None:
        return None
    args_object = cols.type("args") == T_OBJECT
    p.shapes = bool(len(op_rows) and np.any(args_object[op_rows] & (cols.type("input_dims")[op_rows] != T_MISSING)))
    return p


@lru_cache(maxsize=1 << 16)  # a piece's few hundred distinct strings are mostly those of the piece before
def _name_bits(s: str) -> int:
    """What a string is as an event's name, as the bits of one integer: flag k of _plan's ``flags`` in bit
    k."""
    flags = (s.startswith(STEP_PREFIX) and STEP_NAME.match(s) is not None, s.startswith("<built-in"),
             s.startswith(DATALOADER_PREFIX), s.startswith(MODEL_FRAME_PREFIXES), s in DATA_ANNOTATIONS,
             s == MEMORY_EVENT, s.startswith(MODULE_FRAME_PREFIX))
    return sum(1 << k for k, flag in enumerate(flags) if flag)


def _code_of(strings: list, s: str) -> int:
    """The index of ``s`` among a piece's distinct strings; -2 (no code) where it is not one of them."""
    try:
        return strings.index(s)
    except ValueError:
        return -2


def _steps(p: _Plan) -> list:
    """The piece's steps; a step's end is its start plus its duration, as t_all holds it (its duration is > 0)."""
    strings = p.cols.strings
    return [Step(int(PROFILER_STEP.match(strings[p.name[r]]).group(1)), s, t)
            for r, s, t in zip(p.steps.tolist(), p.s_all[p.steps].tolist(), p.t_all[p.steps].tolist())]


def _memory_columns(p: _Plan) -> list:
    """The piece's [memory] samples as MemorySample's columns: ts (float64), the MEMORY_ARGS (int64), the tid."""
    cols, rows = p.cols, p.memory
    return [p.s_all[rows],
            *(np.where(cols.type(k)[rows] == T_INT, cols.int(k)[rows], 0) for k in MEMORY_FIELDS),
            p.memory_tid]


def _device_kind_codes(p: _Plan) -> np.ndarray:
    """Each device event's kind (DEVICE_KINDS of its lower-cased category) as its code in DEVICE_KIND_NAMES
    (events.DeviceEvents' ``kind_codes``), looked up once per category."""
    code = np.array([DEVICE_KIND_CODES.get(i[0], -1) for i in p.infos], dtype=np.int8)
    return code[p.cat[p.dev_rows]]


def _collect(c, p: _Plan) -> None:
    """The planned piece appended to the collector's lists as event tuples, in file order within each list."""
    s_all, t_all, names, strings = p.s_all, p.t_all, p.names, p.cols.strings
    c.steps.extend(_steps(p))
    if len(p.memory):
        c.memory.add_columns(_memory_columns(p))
    c.python_calls.extend_array(s_all[p.calls])
    c.python_builtins.extend_array(s_all[p.builtins])
    c.long_frames.update(strings[k] for k in set(p.name[p.long_rows].tolist()))
    c.model_spans.extend(zip(s_all[p.model].tolist(), t_all[p.model].tolist()))
    rows = p.module_rows
    c.module_frames.extend(rows_of(HostEvent, names(rows), as_list(p.module_tid), s_all[rows].tolist(),
                                   t_all[rows].tolist(), repeat(None)))
    table = c.name_table.codes_of(strings)  # the piece's strings' codes in the collector's table of names
    rows = p.dev_rows  # names and kinds as codes (events.DeviceEvents)
    if len(rows):
        c.device.extend_columns(None, None, p.device, p.stream, s_all[rows], t_all[rows], p.dev_corr,
                                table[p.name[rows]], c.name_table.names, _device_kind_codes(p))
    rows = p.rt_rows  # the names as codes, the threads as int64 where all are integers (events.HostEvents)
    if len(rows):
        c.runtime.extend_columns(None, p.rt_tid, s_all[rows], t_all[rows], p.rt_corr, table[p.name[rows]],
                                 c.name_table.names)
    rows, tids = p.host["ops"]
    c.ops.extend_columns(None, tids, s_all[rows], t_all[rows], None, table[p.name[rows]], c.name_table.names)
    for out in ("data_spans", "annotations"):
        rows, tids = p.host[out]
        if len(rows):
            getattr(c, out).extend(rows_of(HostEvent, names(rows), as_list(tids), s_all[rows].tolist(),
                                           t_all[rows].tolist(), repeat(None)))
    c.shapes = c.shapes or p.shapes
    c.count += p.cols.n


def _encode(p: _Plan) -> dict:
    """The planned piece in stream_ranges.encode's form; its names' codes index the piece's own strings."""
    s_all, t_all, strings = p.s_all, p.t_all, p.cols.strings

    def host(rows, tids, corr=None) -> tuple:  # corr None: every row's correlation is None
        return (p.name[rows], tids, s_all[rows], t_all[rows], corr)

    out: dict = {"steps": _steps(p), "shapes": p.shapes, "header": {},
                 "python_calls": s_all[p.calls], "python_builtins": s_all[p.builtins],
                 "long_frames": list({strings[k] for k in set(p.name[p.long_rows].tolist())}),
                 "model_spans": np.column_stack((s_all[p.model], t_all[p.model])).reshape(-1, 2),
                 "memory": tuple(_memory_columns(p)) if len(p.memory) else MemoryColumns().columns,
                 "module_frames": host(p.module_rows, p.module_tid),
                 "runtime": host(p.rt_rows, p.rt_tid if p.rt_tid is not None else [], p.rt_corr),
                 "names": strings}
    for name in ("data_spans", "ops", "annotations"):
        out[name] = host(*p.host[name])
    rows = p.dev_rows
    or_empty = lambda column: [] if column is None else column  # noqa: E731  (int64, a list, or none read)
    out["device"] = (p.name[rows], _device_kind_codes(p), or_empty(p.device), or_empty(p.stream), s_all[rows],
                     t_all[rows], or_empty(p.dev_corr))
    return out


def rows_of(cls: type, *columns):
    """``map(cls, *columns)`` for a named tuple ``cls`` given every field: the tuples made in C, without a
    call of the class's Python ``__new__`` per event (half the cost, for millions of events)."""
    return map(tuple.__new__, repeat(cls), zip(*columns))


def _no_strings(cols: Columns, rows: np.ndarray, field: str) -> bool:
    return not np.any(cols.type(field)[rows] == T_STR)


def _device_numbers(cols: Columns, rows: np.ndarray, field: str, fallback: str, missing) -> np.ndarray | None:
    """``int(args.<field> or 0)``, with the event's ``fallback`` field where args has none (whose own default is
    ``missing``), as int64; None where a value is not an integer or null."""
    t, v = cols.type(field)[rows], cols.int(field)[rows]
    ft, fv = cols.type(fallback)[rows], cols.int(fallback)[rows]
    use = t == T_MISSING
    t = np.where(use, np.where(ft == T_MISSING, T_INT if missing == 0 else T_NULL, ft), t)
    v = np.where(use, np.where(ft == T_MISSING, 0, fv), v)
    if not np.all((t == T_INT) | (t == T_NULL)):
        return None
    return np.where(t == T_NULL, 0, v)


def c_unset():
    from stepscope.analysis.stream_collect import UNSET
    return UNSET

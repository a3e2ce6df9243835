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
from itertools import repeat

import numpy as np
from stepscope.analysis.events import (
    DATA_ANNOTATIONS,
    LONG_FRAME_US,
    MODEL_FRAME_PREFIXES,
    MODULE_FRAME_PREFIX,
    PROFILER_STEP,
    DeviceEvent,
    HostEvent,
    MemorySample,
    Step,
)
from stepscope.analysis.validate import MAX_TIME_US, STEP_NAME
from stepscope.trace.fastread import T_INT, T_MISSING, T_NULL, T_OBJECT, T_REAL, T_STR, Columns
from stepscope.trace.vocabulary import DATALOADER_PREFIX, DEVICE_KINDS, MEMORY_EVENT, STEP_PREFIX

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


def _timed(t: np.ndarray) -> np.ndarray:
    return (t == T_INT) | (t == T_REAL)


def _in_range(t: np.ndarray, reals: np.ndarray, ints: np.ndarray) -> bool:
    """Every number of the column within validate.py's time bounds (exactly, as Python compares them)."""
    num = _timed(t)
    lo, hi = -MAX_TIME_US, MAX_TIME_US
    if not np.all((reals[num] >= lo) & (reals[num] <= hi)):
        return False
    ints_ = ints[t == T_INT]
    return bool(np.all((ints_ >= -(2**53)) & (ints_ <= 2**53)))


def _objects(cols: Columns, rows: np.ndarray, field: str, default):
    """The Python values of a column's rows as msgspec gives them (missing: ``default``); None when a row holds
    a type this path does not rebuild."""
    t, ints = cols.type(field)[rows], cols.int(field)[rows]
    if np.all(t == T_INT):
        return ints.tolist()
    if not np.all((t == T_INT) | (t == T_STR) | (t == T_MISSING) | (t == T_NULL)):
        return None
    strings = cols.strings
    return [v if k == T_INT else strings[v] if k == T_STR else None if k == T_NULL else default
            for k, v in zip(t.tolist(), ints.tolist())]


def add(c, cols: Columns, decode) -> None:
    """Collector.add of a piece of columns; ``decode(text)``: the msgspec decoder, for a piece this path
    leaves to the per-event rules."""
    if not _add(c, cols):
        c.add(decode(cols.text))


def _add(c, cols: Columns) -> bool:
    """Collect the piece as Collector.add would; False (and nothing collected) when it must be done event by
    event."""
    n = cols.n
    strings = cols.strings
    m = len(strings)
    name_t, cat_t, ph_t = cols.type("name"), cols.type("cat"), cols.type("ph")
    ts_t, dur_t = cols.type("ts"), cols.type("dur")
    if not (np.all((name_t == T_MISSING) | (name_t == T_STR)) and np.all((cat_t == T_MISSING) | (cat_t == T_STR))
            and np.all((ph_t == T_MISSING) | (ph_t == T_NULL) | (ph_t == T_STR))
            and np.all(_timed(ts_t) | (ts_t == T_MISSING) | (ts_t == T_NULL))
            and np.all(_timed(dur_t) | (dur_t == T_MISSING) | (dur_t == T_NULL))):
        return False
    ts, dur = cols.real("ts"), cols.real("dur")
    if not (_in_range(ts_t, ts, cols.int("ts")) and _in_range(dur_t, dur, cols.int("dur"))):
        return False
    # what each distinct string is, as a category and as a name; index m: missing
    cat = np.where(cat_t == T_STR, cols.int("cat"), m)
    infos: list = [None] * (m + 1)
    for k in np.unique(cat).tolist():
        infos[k] = c._kind(c_unset()) if k == m else c._kinds.get(strings[k]) or c._kind(strings[k])
    kind_of = np.array([-1 if i is None else i[1] for i in infos], dtype=np.int8)
    step_cat = np.array([i is not None and i[2] for i in infos], dtype=bool)
    flags = np.zeros((7, m + 1), dtype=bool)
    for k, s in enumerate(strings):
        flags[0, k] = s.startswith(STEP_PREFIX) and STEP_NAME.match(s) is not None
        flags[1, k] = s.startswith("<built-in")
        flags[2, k] = s.startswith(DATALOADER_PREFIX)
        flags[3, k] = s.startswith(MODEL_FRAME_PREFIXES)
        flags[4, k] = s in DATA_ANNOTATIONS
        flags[5, k] = s == MEMORY_EVENT
        flags[6, k] = s.startswith(MODULE_FRAME_PREFIX)
    named = name_t == T_STR
    name = np.where(named, cols.int("name"), m)
    kind = kind_of[cat]
    code = {s: k for k, s in enumerate(strings) if s in ("X", "i")}
    ph_code = np.where(ph_t == T_STR, cols.int("ph"), -1)
    is_x = ph_code == code.get("X", -2)
    is_i = ph_code == code.get("i", -2)
    has_time = _timed(ts_t) & _timed(dur_t)

    from stepscope.analysis.stream_collect import (
        _K_ANNOTATION,
        _K_DEVICE,
        _K_OP,
        _K_OTHER,
        _K_PYTHON,
        _K_RUNTIME,
    )

    unnamed_calls = ~named & is_x & (kind == _K_PYTHON)
    steps = named & step_cat[cat] & flags[0, name]
    memory = named & ~steps & ~is_x & is_i & flags[5, name]
    kept = named & ~steps & is_x & ((kind != _K_OTHER) | flags[2, name])
    if not (np.all(has_time[unnamed_calls]) and np.all(has_time[kept])):
        return False  # no numeric ts/dur where one is needed
    if not np.all(is_x[steps] & has_time[steps] & (dur[steps] > 0)):
        return False  # a ProfilerStep#N that is no complete event
    args_object = cols.type("args") == T_OBJECT
    if np.any(memory):
        rows = np.flatnonzero(memory)
        if not np.all(_timed(ts_t[rows])):
            return False
        if not all(np.all((t == T_INT) | (t == T_MISSING)) for t in (cols.type(k)[rows] for k in MEMORY_FIELDS)):
            return False  # every MEMORY_ARGS field an int or missing (0), as the per-event rules read them
        memory_tid = _objects(cols, rows, "tid", None)
        if memory_tid is None:
            return False
    base = c.base
    s_all = ts - base
    t_all = np.where(dur > 0, s_all + dur, s_all)
    py = kept & (kind == _K_PYTHON)
    dev_rows = np.flatnonzero(kept & (kind == _K_DEVICE))
    rt_rows = np.flatnonzero(kept & (kind == _K_RUNTIME))
    rest = kept & (kind != _K_PYTHON) & (kind != _K_DEVICE) & (kind != _K_RUNTIME)
    data_rows = np.flatnonzero(rest & (flags[2, name] | ((kind == _K_ANNOTATION) & flags[4, name])))
    op_rows = np.flatnonzero(rest & ~flags[2, name] & (kind == _K_OP))
    ann_rows = np.flatnonzero(rest & ~flags[2, name] & (kind == _K_ANNOTATION))

    # values that are Python objects in the events: rebuilt only where this path can be exact
    device = stream = dev_corr = rt_corr = rt_tid = op_tid = ann_tid = data_tid = None
    if len(dev_rows):
        device = _device_numbers(cols, dev_rows, "device", "pid", 0)
        stream = _device_numbers(cols, dev_rows, "stream", "tid", None)
        dev_corr = _objects(cols, dev_rows, "correlation", None)
        if device is None or stream is None or dev_corr is None or not _no_strings(cols, dev_rows, "correlation"):
            return False
    if len(rt_rows):
        rt_corr = _objects(cols, rt_rows, "correlation", None)
        rt_tid = _objects(cols, rt_rows, "tid", None)
        if rt_corr is None or rt_tid is None or not _no_strings(cols, rt_rows, "correlation"):
            return False
    for rows, out in ((op_rows, "op"), (ann_rows, "ann"), (data_rows, "data")):
        if len(rows):
            tids = _objects(cols, rows, "tid", None)
            if tids is None:
                return False
            op_tid, ann_tid, data_tid = ((tids, ann_tid, data_tid) if out == "op" else
                                         (op_tid, tids, data_tid) if out == "ann" else (op_tid, ann_tid, tids))

    module_rows = np.flatnonzero(py & flags[6, name])
    module_tid = _objects(cols, module_rows, "tid", None) if len(module_rows) else []
    if module_tid is None:
        return False

    # all checks passed: collect, in file order within each list
    def names(rows):
        return list(map(strings.__getitem__, name[rows].tolist()))

    for r in np.flatnonzero(steps).tolist():
        s = float(ts[r]) - base
        c.steps.append(Step(int(PROFILER_STEP.match(strings[name[r]]).group(1)), s, s + float(dur[r])))
    if np.any(memory):
        rows = np.flatnonzero(memory)
        c.memory.add_columns([(ts[rows] - base).tolist(),
                              *(np.where(cols.type(k)[rows] == T_INT, cols.int(k)[rows], 0).tolist()
                                for k in MEMORY_FIELDS), memory_tid])
    calls = np.flatnonzero(unnamed_calls | (py & ~flags[1, name]))
    c.python_calls.extend(s_all[calls].tolist())
    c.python_builtins.extend(s_all[py & flags[1, name]].tolist())
    long_rows = np.flatnonzero(py & ~flags[1, name] & (dur >= LONG_FRAME_US))
    c.long_frames.update(strings[k] for k in set(name[long_rows].tolist()))
    model = np.flatnonzero(py & flags[3, name])
    c.model_spans.extend(zip(s_all[model].tolist(), t_all[model].tolist()))
    c.module_frames.extend(map(HostEvent, names(module_rows), module_tid, s_all[module_rows].tolist(),
                               t_all[module_rows].tolist()))
    if len(dev_rows):
        kinds = [DEVICE_KINDS[infos[k][0]] for k in cat[dev_rows].tolist()]
        c.device.extend(rows_of(DeviceEvent, names(dev_rows), kinds, device, stream, s_all[dev_rows].tolist(),
                                t_all[dev_rows].tolist(), dev_corr))
    if len(rt_rows):
        c.runtime.extend(rows_of(HostEvent, names(rt_rows), rt_tid, s_all[rt_rows].tolist(),
                                 t_all[rt_rows].tolist(), rt_corr))
    for rows, tids, out in ((data_rows, data_tid, c.data_spans), (op_rows, op_tid, c.ops),
                            (ann_rows, ann_tid, c.annotations)):
        if len(rows):
            out.extend(rows_of(HostEvent, names(rows), tids, s_all[rows].tolist(), t_all[rows].tolist(),
                               repeat(None)))
    if len(op_rows) and not c.shapes:
        c.shapes = bool(np.any(args_object[op_rows] & (cols.type("input_dims")[op_rows] != T_MISSING)))
    c.count += n
    return True


def rows_of(cls: type, *columns):
    """``map(cls, *columns)`` for a named tuple ``cls`` given every field: the tuples made in C, without a
    call of the class's Python ``__new__`` per event (half the cost, for millions of events)."""
    return map(tuple.__new__, repeat(cls), zip(*columns))


def _no_strings(cols: Columns, rows: np.ndarray, field: str) -> bool:
    return not np.any(cols.type(field)[rows] == T_STR)


def _device_numbers(cols: Columns, rows: np.ndarray, field: str, fallback: str, missing):
    """``int(args.<field> or 0)``, with the event's ``fallback`` field where args has none (whose own default is
    ``missing``); None where a value is not an integer or null."""
    t, v = cols.type(field)[rows], cols.int(field)[rows]
    ft, fv = cols.type(fallback)[rows], cols.int(fallback)[rows]
    use = t == T_MISSING
    t = np.where(use, np.where(ft == T_MISSING, T_INT if missing == 0 else T_NULL, ft), t)
    v = np.where(use, np.where(ft == T_MISSING, 0, fv), v)
    if not np.all((t == T_INT) | (t == T_NULL)):
        return None
    return np.where(t == T_NULL, 0, v).tolist()


def c_unset():
    from stepscope.analysis.stream_collect import UNSET
    return UNSET

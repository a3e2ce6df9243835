"""The compiled trace reader, where it was built: a piece of ``traceEvents`` as numpy columns, with no Python
object per event. Torch-free.

    reader = ColumnReader(Event)             # the fields of a msgspec schema: the one table of what is read
    cols = reader.read(text)                 # None: the extension is off, or the text needs msgspec's verdict
    cols.type("ts"), cols.real("ts")         # per event: the value's JSON type (T_*), a number as float64 (else 0)
    cols.int("tid"), cols.strings            # ... an integer as int64, a string as its index in the strings
    p = plan_rows(cols, kind_of, ...)        # a piece's checks, times, codes and rows of each kind, in one pass
    starts, ends = spans(text)               # where each entry of the array lies, none decoded
    new = splice(text, starts, ends, values, codes)   # some entries with members set, where they lie
    chain, parent, name = open_frames(...)   # the Python frames open at each operator (plugin_copy's stacks)
    out = joined(text, seg_start, seg_end, news, lead)  # stretches of a text and new texts, joined by ",\n"
    release()                                # this thread's parsers freed, once a trace has been read

The extension (csrc/fastread.cpp, parsing with the vendored simdjson) is built by ``pip install -e .``
(setup.py); where it is missing, or ``STEPSCOPE_PURE_PYTHON=1`` is set, ``available()`` is False,
``why_not()`` says why, and the callers read with msgspec alone (the same results, slower). The fields read
are those of the msgspec structs the slow path decodes into (``Event`` and the struct of its ``args``), by
their JSON names: a field added to the schema is read by both readers.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import msgspec
import numpy as np

PURE_ENV = "STEPSCOPE_PURE_PYTHON"

# the value types of csrc/fastread.cpp
T_MISSING, T_NULL, T_INT, T_REAL, T_STR, T_TRUE, T_FALSE, T_ARRAY, T_OBJECT, T_OTHER = range(10)

try:
    from stepscope.trace import _fastread
    _IMPORT_ERROR: str | None = None
except ImportError as e:  # not built: no compiler, an unusual platform, a source tree without the build
    _fastread = None
    _IMPORT_ERROR = f"{type(e).__name__}: {e}"


def available() -> bool:
    return _fastread is not None and not os.environ.get(PURE_ENV)


def why_not() -> str | None:
    """None when the compiled reader is used; else one line saying why not."""
    if _fastread is None:
        return f"the compiled trace reader is not built ({_IMPORT_ERROR}); traces are read with msgspec"
    if os.environ.get(PURE_ENV):
        return f"{PURE_ENV} is set: traces are read with msgspec"
    return None


def describe() -> str:
    """One line: which reader reads traces."""
    return why_not() or f"traces are read by the compiled reader (simdjson {_fastread.SIMDJSON_VERSION})"


class Columns:
    """One piece's events as columns (the module docstring); ``n`` events."""

    __slots__ = ("strings", "n", "text", "_slot", "_types", "_ints", "_reals", "_string_array")

    def __init__(self, raw: tuple, slot: dict[str, int]) -> None:
        strings, types, ints, n = raw
        rows = len(slot)
        self.strings, self.n, self._slot = strings, n, slot
        self.text = b""  # the JSON it was read from, for a reader that must go back to it
        self._types = np.frombuffer(types, dtype=np.uint8).reshape(rows, n)
        self._ints = np.frombuffer(ints, dtype=np.int64).reshape(rows, n)  # a T_REAL's slot: its float64's bits
        self._reals: dict[int, np.ndarray] = {}  # real(): made per field when first asked for
        self._string_array = None  # the strings as an array of objects, made when first asked for

    def __len__(self) -> int:
        return self.n

    def type(self, field: str) -> np.ndarray:
        return self._types[self._slot[field]]

    def int(self, field: str) -> np.ndarray:
        """The field's integers (T_INT) and strings' indices (T_STR); meaningless at rows of another type."""
        return self._ints[self._slot[field]]

    def real(self, field: str) -> np.ndarray:
        """The field's numbers as float64 (a T_INT rounded to the nearest, as C's cast does); 0 elsewhere."""
        k = self._slot[field]
        out = self._reals.get(k)
        if out is None:
            t, v = self._types[k], self._ints[k]
            # a real's bits as float64; an integer cast (the inner where is int64, the outer makes it float64)
            out = np.where(t == T_REAL, v.view(np.float64), np.where(t == T_INT, v, 0))
            out.flags.writeable = False
            self._reals[k] = out
        return out

    def string_array(self) -> np.ndarray:
        """``strings`` as an array of those objects (``as_objects``), made once: a string code column's
        ``string_array()[codes].tolist()`` is the list of its strings."""
        if self._string_array is None:
            self._string_array = as_objects(self.strings)
        return self._string_array

    def objects(self, field: str, rows: np.ndarray, default=None) -> np.ndarray | None:
        """The values of ``field`` at ``rows`` as msgspec decodes them, as an array of Python objects (its
        ``tolist()`` is the list): the integer, the string, None for null, ``default`` where the event has
        no such key. None where a row holds another type (a real, a boolean, an array, an object ...), whose
        conversion is the per-event rules'."""
        t, v = self._types[self._slot[field]][rows], self._ints[self._slot[field]][rows]
        is_int, is_str, is_missing = t == T_INT, t == T_STR, t == T_MISSING
        if not np.all(is_int | is_str | is_missing | (t == T_NULL)):
            return None
        out = np.empty(len(t), dtype=object)  # None where nothing else is put: the nulls
        out[is_int] = v[is_int]  # as Python ints
        if is_str.any():
            out[is_str] = self.string_array()[v[is_str]]
        if default is not None:
            out[is_missing] = default
        return out

    def ints_or_values(self, field: str, rows: np.ndarray) -> np.ndarray | list | None:
        """The field at ``rows``: its int64s where every row holds an integer (a trace's threads: ``as_list``
        makes them the list ``values`` gives), else ``values``' list or None."""
        k = self._slot[field]
        if np.all(self._types[k][rows] == T_INT):
            return self._ints[k][rows]
        return self.values(field, rows)

    def values(self, field: str, rows: np.ndarray, default=None) -> list | None:
        """``objects(field, rows, default)`` as a list; a column of integers only, straight from its int64s."""
        k = self._slot[field]
        if np.all(self._types[k][rows] == T_INT):
            return self._ints[k][rows].tolist()
        out = self.objects(field, rows, default)
        return None if out is None else out.tolist()


class ColumnReader:
    """Reads the fields of ``event`` (a msgspec Struct whose field ``args_field`` is an optional Struct of the
    event's arguments). Fields are named by their attribute names; both structs' attributes must differ."""

    def __init__(self, event: type, args_field: str = "args") -> None:
        fields = {f.name: f for f in msgspec.structs.fields(event)}
        args_struct = _struct_of(fields[args_field].type)
        top = [f for name, f in fields.items() if name != args_field]
        inner = list(msgspec.structs.fields(args_struct))
        names = [f.name for f in top] + [args_field] + [f.name for f in inner]
        if len(set(names)) != len(names):
            raise ValueError("the event's fields and its args' fields must have distinct names")
        self.slot = {name: k for k, name in enumerate(names)}
        self.event_keys = tuple(f.encode_name.encode() for f in top) + (fields[args_field].encode_name.encode(),)
        self.args_keys = tuple(f.encode_name.encode() for f in inner)
        self.fields = tuple(names)

    def read(self, text) -> Columns | None:
        """The columns of ``text`` (a JSON array of events), or None: no compiled reader, or text that the
        caller's msgspec decoder must judge (not strict JSON, an entry that is no object, ``args`` that is no
        object, nesting too deep)."""
        if not available():
            return None
        raw = _fastread.columns(text, self.event_keys, self.args_keys)
        if raw is None:
            return None
        cols = Columns(raw, self.slot)
        cols.text = text  # kept, not copied: a TraceStream never changes a piece's text once decoded
        return cols


def as_list(values: np.ndarray | list) -> list:
    """An int64 array (``Columns.ints_or_values``) as its ``tolist()``, equal values sharing one int object (a
    column of threads: a few objects instead of one per row, cheaper to make, keep and free); a list as it
    is."""
    if not isinstance(values, np.ndarray):
        return values
    shared = getattr(_fastread, "shared_ints", None)
    return shared(np.ascontiguousarray(values, dtype=np.int64)) if shared is not None else values.tolist()


def as_objects(values: list) -> np.ndarray:
    """``values`` as a numpy array of those objects: gathering from it (``[codes].tolist()``) gives the same
    objects as ``list(map(values.__getitem__, codes.tolist()))``, in a fraction of the time."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


PLAN_FIELDS = ("name", "cat", "ph", "ts", "dur")  # the fields plan_rows reads, in its order


def plan_rows(cols: Columns, kind_of: np.ndarray, step_cat: np.ndarray, bits: np.ndarray, x_code: int,
              i_code: int, base: float, long_us: float, max_time: float) -> tuple | None:
    """One compiled pass over a piece's columns (csrc/fastread.cpp), for stream_columns._plan: None where a
    check fails (a name, category, phase, ts or dur of a type or size the per-event rules must judge; a complete
    event kept, or a call, without numeric ts and dur; a step that is no complete event of positive length; a
    ``[memory]`` event without a numeric ts), else ``(s_all, t_all, name, cat, rows)``: each event's start
    (ts - base) and end (the start plus a positive dur), its name's and its category's codes (``m``, the
    number of strings, where it has none), and twelve int64 arrays of rows, in order: the steps, ``[memory]``
    events, Python calls, built-in calls, long frames, model frames, module frames, device activity, runtime
    calls, data ranges, operators and annotations. ``kind_of``, ``step_cat`` (int8, bool) say what each string
    code is as a category (stream_collect's ``_K_*``; whether it holds steps), ``bits`` (int16) what each is as
    a name (stream_columns._name_bits); each holds ``m + 1`` entries, the last for none. ``x_code``,
    ``i_code``: the codes of the phases "X" and "i" (-2: not among the strings)."""
    tables = (np.ascontiguousarray(kind_of, dtype=np.int8), np.ascontiguousarray(step_cat, dtype=np.uint8),
              np.ascontiguousarray(bits, dtype=np.int16))
    got = _fastread.plan_rows(cols._types, cols._ints, cols.n, tuple(cols._slot[f] for f in PLAN_FIELDS), *tables,
                              x_code, i_code, base, long_us, max_time)
    if got is None:
        return None
    s_all, t_all, name, cat, rows = got
    return (np.frombuffer(s_all, dtype=np.float64), np.frombuffer(t_all, dtype=np.float64),
            np.frombuffer(name, dtype=np.int64), np.frombuffer(cat, dtype=np.int64),
            tuple(np.frombuffer(r, dtype=np.int64) for r in rows))


def spans(text) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each entry of ``text`` (a JSON array) lies: int64 arrays ``starts`` and ``ends``, entry k being
    ``text[starts[k]:ends[k]]``, found without decoding any entry. None: no compiled reader, or the array's
    structure is broken (a cut inside a string or a nested value), for the caller's decoder to judge. It
    does not check the values inside an entry (csrc/fastread.cpp): for text that a validating read has
    already accepted, such as a trace whose copy was planned from the same file."""
    if not available():
        return None
    got = _fastread.spans(text)
    if got is None:
        return None
    offsets, n = got
    both = np.frombuffer(offsets, dtype=np.int64)
    return both[:n], both[n:]


def splice(text, starts: np.ndarray, ends: np.ndarray, values: list[bytes], codes: np.ndarray) -> list | None:
    """The entries ``text[starts[k]:ends[k]]`` of ``text`` (a JSON array) with members set, each rewritten
    where it lies (csrc/fastread.cpp): ``codes[k]`` holds the indices in ``values`` (JSON texts) of entry k's
    new name, category, args' External id and args' call stack, -1 where one is not set. Per entry, its new
    text, or None where the compiled reader cannot lay it out (then the caller rewrites the decoded entry);
    None for all: no compiled reader. Like ``spans``, for text that a validating reader has already read."""
    if not available():
        return None
    where = np.concatenate((starts, ends)).astype(np.int64, copy=False)
    return _fastread.splice(text, where, values, np.ascontiguousarray(codes, dtype=np.int64))


def open_frames(frame_thread: np.ndarray, frame_start: np.ndarray, frame_stop: np.ndarray, frame_name: np.ndarray,
                frame_real: np.ndarray, op_thread: np.ndarray, op_start: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The real Python frames open at each operator's start on its thread (csrc/fastread.cpp), as a chain:
    a node of a tree whose ``parent`` (-1: the outermost frame) and ``name`` (the frame's name id) are given
    per node, -1 where none is open. Frames sorted by thread, start, then latest end first; operators by
    thread, then start. None: no compiled reader (plugin_copy/stream_callstack.py sweeps in Python)."""
    if not available():
        return None
    got = _fastread.open_frames(*(np.ascontiguousarray(a, dtype=t) for a, t in (
        (frame_thread, np.int64), (frame_start, np.float64), (frame_stop, np.float64), (frame_name, np.int64),
        (frame_real, np.uint8), (op_thread, np.int64), (op_start, np.float64))))
    return tuple(np.frombuffer(b, dtype=np.int64) for b in got)


def joined(text, seg_start: np.ndarray, seg_end: np.ndarray, news: list[bytes], lead: bool) -> bytes:
    """Segments joined by ``",\n"`` (preceded by one more where ``lead``): segment k is
    ``text[seg_start[k]:seg_end[k]]``, or ``news[-1 - seg_start[k]]`` where ``seg_start[k]`` is negative. By the
    compiled reader (one copy into the result), else by bytes.join."""
    if not available():
        sep = b",\n"
        parts = [text[a:b] if a >= 0 else news[-1 - a] for a, b in zip(seg_start.tolist(), seg_end.tolist())]
        return (sep if lead and parts else b"") + sep.join(parts)
    return _fastread.joined(text, np.ascontiguousarray(seg_start, dtype=np.int64),
                            np.ascontiguousarray(seg_end, dtype=np.int64), news, lead)


def release() -> None:
    """Free this thread's parsers and their buffers (tens of MB), kept between pieces: called once a trace has
    been read, so that they are not held through its analysis."""
    if _fastread is not None:
        _fastread.release()


def releasing(fn):
    """``fn`` that calls ``release()`` when it returns or raises: for a function that reads a whole trace."""
    @functools.wraps(fn)
    def read_then_release(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            release()
    return read_then_release


def _struct_of(annotation: Any) -> type:
    """The Struct in ``Struct | None``."""
    for t in getattr(annotation, "__args__", (annotation,)):
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            return t
    raise TypeError(f"{annotation!r} holds no msgspec Struct")

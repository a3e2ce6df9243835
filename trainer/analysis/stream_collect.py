"""What the analysis takes from a piece of decoded events: the rules that turn trace events into a
``ParsedTrace``'s columns, for the streamed parse (stream_parse.py) and its byte ranges (stream_ranges.py).

    c = Collector("w.1")                   # "w.1": the worker.span that error messages start with
    c.find_base(events)                    # the trace's base time, from the first event with one
    c.add(events)                          # events: decode(text) of consecutive events, in file order

msgspec decodes each piece into the one event schema's structs (trace/schema.py: name, cat, ph, ts, dur,
tid, pid and the few args any reader uses; the compiled reader reads the same fields into columns). A piece
that msgspec refuses although it is JSON that Python reads (NaN or Infinity literals, an event that is not an
object, ``args`` that is not an object) is normalised: read with Python's json and turned into the same
structs (``from_objects``), an entry that is no usable event kept as an ``Invalid`` marker that the collector
refuses in its turn. The collector applies validate.py's checks
as events arrive and raises their ``TraceError`` (one line, naming the event by its index in
``traceEvents``), or the ValueError/TypeError of a field that is not a number. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from stepscope.analysis import stream_columns
from stepscope.analysis.events import (
    DATA_ANNOTATIONS,
    HOST_OP_CATEGORIES,
    LONG_FRAME_US,
    MODEL_FRAME_PREFIXES,
    MODULE_FRAME_PREFIX,
    PROFILER_STEP,
    DeviceEvent,
    DeviceEventsBuilder,
    HostEvent,
    HostEventsBuilder,
    MemoryColumns,
    MemorySample,
    NameTable,
    Step,
    TimesBuilder,
)
from stepscope.analysis.validate import MAX_TIME_US, STEP_CATEGORIES, STEP_NAME, check_event
from stepscope.trace import schema
from stepscope.trace.errors import TraceError
from stepscope.trace.fastread import ColumnReader, Columns
from stepscope.trace.schema import UNSET
from stepscope.trace.vocabulary import (
    ANNOTATION_CATEGORIES,
    DATALOADER_PREFIX,
    DEVICE_KINDS,
    RUNTIME_CATEGORIES,
    STEP_PREFIX,
)

# The fields the analysis reads: a view of the one event schema (trace/schema.py), which the compiled reader
# reads too. ``read`` also takes schema.Event, whose fields are a superset (plugin_copy/one_pass.py).
Event = schema.view("name", "cat", "ph", "ts", "dur", "tid", "pid",
                    args=("device", "stream", "correlation", "input_dims", *schema.MEMORY_FIELDS))
Args = schema.args_of(Event)
MEMORY_ARGS, _MEMORY_FIELDS = schema.MEMORY_ARGS, schema.MEMORY_FIELDS
assert _MEMORY_FIELDS == MemorySample._fields[1:-1]
decode = schema.decoder(Event)


class Invalid(NamedTuple):
    """An entry of traceEvents that is no event the structs can hold (kept in ``Event.name``)."""
    entry: Any


_NO_ARGS = Args()
# What a category's complete events are (Collector._kind)
_K_PYTHON, _K_DEVICE, _K_RUNTIME, _K_OP, _K_ANNOTATION, _K_OTHER = range(6)

_COLUMNS = ColumnReader(Event)


def read(text) -> list[Event] | Columns:
    """``decode``, or the same events as columns when the compiled reader is built (trace/fastread.py):
    Collector.add and find_base take either."""
    cols = _COLUMNS.read(text)
    return decode(text) if cols is None else cols


def from_objects(entries: list) -> list[Event]:
    """``decode`` for a piece that Python's json read (jsonstream.TraceStream's ``lenient``); an entry that is
    no event is kept as an ``Invalid`` marker, which the collector refuses."""
    return [e if e is not None else Event(name=Invalid(o))
            for o, e in zip(entries, map(schema.from_object, entries))]


def as_dict(e: Event):
    """The event as the JSON object it came from, as far as validate.py's checks read it."""
    if type(e.name) is Invalid:
        return e.name.entry
    out = {k: v for k, v in (("name", e.name), ("cat", e.cat)) if v is not UNSET}
    out.update((k, v) for k, v in (("ph", e.ph), ("ts", e.ts), ("dur", e.dur)) if v is not None)
    if e.args is not None:
        out["args"] = {}
    return out


def _position(events: list, e) -> int:
    return next(k for k, x in enumerate(events) if x is e)


class Collector:
    """The events of a trace, collected piece by piece (module docstring)."""

    def __init__(self, where: str = "", names: NameTable | None = None,
                 kinds: dict[str, tuple[str, int, bool]] | None = None) -> None:
        self.where = where
        # the codes of the ops' and runtime calls' names read as columns: one table for every collector of a
        # parse (``names``: another collector's, for the byte ranges that extend it)
        self.name_table = names if names is not None else NameTable()
        self.base: float | None = None
        self.count = 0  # events added so far: the index in traceEvents of the next one
        self.steps, self.annotations = [], []
        # no tuple per op or runtime call where a piece is read as columns
        self.ops, self.runtime = HostEventsBuilder(), HostEventsBuilder()
        self.device, self.data_spans = DeviceEventsBuilder(), []  # no tuple per activity read as columns
        self.memory = MemoryColumns()  # a list per MemorySample field: no tuple per [memory] event
        self.python_calls, self.python_builtins = TimesBuilder(), TimesBuilder()
        self.long_frames: set[str] = set()  # names of Python frames of at least LONG_FRAME_US
        self.model_spans: list[tuple[float, float]] = []  # frames of the model's own work (events.py)
        self.module_frames: list[HostEvent] = []  # nn.Module calls, named, on their threads
        self.shapes = False
        self.header: dict = {}  # the file's keys other than traceEvents (a byte range's share of them)
        # category -> _kind(category) (``kinds``: another collector's, for the pieces of one byte range that a
        # helper collects apart)
        self._kinds: dict[str, tuple[str, int, bool]] = kinds if kinds is not None else {}

    def extend(self, later: Collector) -> None:
        """Append the events of ``later``, collected from the bytes after this collector's, as if this one had
        collected them (stream_ranges.py); its header keys update this one's."""
        self.steps.extend(later.steps)
        self.annotations.extend(later.annotations)
        self.ops.extend_builder(later.ops)
        self.runtime.extend_builder(later.runtime)
        self.device.extend_builder(later.device)
        self.data_spans.extend(later.data_spans)
        self.memory.add_columns(later.memory.columns)
        self.python_calls.extend(later.python_calls)
        self.python_builtins.extend(later.python_builtins)
        self.long_frames.update(later.long_frames)
        self.model_spans.extend(later.model_spans)
        self.module_frames.extend(later.module_frames)
        self.shapes = self.shapes or later.shapes
        self.header.update(later.header)

    def find_base(self, events: list[Event]) -> bool:
        """``events._base`` over the events seen so far; False while none has a finite numeric ts."""
        if type(events) is Columns:
            return stream_columns.find_base(self, events, decode)
        for e in events:
            ts = e.ts
            if isinstance(ts, (int, float)) and math.isfinite(ts):
                self.base = float(math.floor(ts))
                return True
        return False

    def _kind(self, cat) -> tuple[str, int, bool]:
        """(lower-cased category, what its complete events are: one of the ``_K`` codes, whether a
        ProfilerStep#N in it is a step), kept per category string."""
        lowered = "" if cat is UNSET else str(cat).lower()
        kind = (_K_PYTHON if lowered == "python_function" else _K_DEVICE if lowered in DEVICE_KINDS
                else _K_RUNTIME if lowered in RUNTIME_CATEGORIES else _K_OP if lowered in HOST_OP_CATEGORIES
                else _K_ANNOTATION if lowered in ANNOTATION_CATEGORIES else _K_OTHER)
        info = (lowered, kind, lowered in STEP_CATEGORIES)
        if type(cat) is str:
            self._kinds[cat] = info
        return info

    def refuse(self, events: list[Event], e: Event):
        """Raise validate.check_event's error for ``e``, which fails one of its checks."""
        i = self.count + _position(events, e)
        check_event(as_dict(e), i, self.where)
        raise TraceError(f"{self.where}: event #{i} is not a well-formed event")  # not reached

    def no_time(self, events: list[Event], e: Event):
        cat = None if e.cat is UNSET else e.cat
        raise TraceError(f"event #{self.count + _position(events, e)} ({e.name!r}, cat {cat!r}) has no numeric "
                         "ts/dur")

    def add(self, events: list[Event]) -> None:
        """The rules of the parse, event by event, in file order; the category decides first, as the rules
        for python_function, device and runtime events hold whatever their name."""
        if type(events) is Columns:
            return stream_columns.add(self, events, decode)
        base, kinds, new_kind = self.base, self._kinds, self._kind
        lo, hi = -MAX_TIME_US, MAX_TIME_US
        ops, annotations, runtime, device, data_spans = (self.ops, self.annotations, self.runtime, self.device,
                                                         self.data_spans)
        calls, builtins, long_frames, long_us = (self.python_calls, self.python_builtins, self.long_frames,
                                                 LONG_FRAME_US)
        model_spans, model_frames = self.model_spans, MODEL_FRAME_PREFIXES
        memory: list[Event] = []  # this piece's [memory] events, made columns at its end
        for e in events:
            name, ts, dur, cat = e.name, e.ts, e.dur, e.cat
            if ts is not None and ((type(ts) is not float and type(ts) is not int) or not lo <= ts <= hi):
                self.refuse(events, e)
            if dur is not None and ((type(dur) is not float and type(dur) is not int) or not lo <= dur <= hi):
                self.refuse(events, e)
            info = kinds.get(cat) if type(cat) is str else None
            lowered, kind, step_category = info if info is not None else new_kind(cat)
            ph = e.ph
            if type(name) is not str:
                if name is not UNSET:
                    self.refuse(events, e)
                if ph == "X" and kind == _K_PYTHON:  # a frame without a name is a call
                    if ts is None or dur is None:
                        self.no_time(events, e)
                    calls.append(ts - base)
                continue
            if step_category and name.startswith(STEP_PREFIX) and STEP_NAME.match(name) is not None:
                if ph != "X" or ts is None or dur is None or dur <= 0:
                    self.refuse(events, e)
                s = float(ts) - base
                self.steps.append(Step(int(PROFILER_STEP.match(name).group(1)), s, s + float(dur)))
                continue
            if ph != "X":
                if ph == "i" and name == "[memory]":
                    memory.append(e)
                continue
            if kind == _K_OTHER and not name.startswith(DATALOADER_PREFIX):
                continue
            if ts is None or dur is None:
                self.no_time(events, e)
            s = ts - base  # a float: base is one; float(ts) - base, as events._span
            t = s + dur if dur > 0 else s  # max(dur, 0)
            if kind == _K_PYTHON:
                if name.startswith("<built-in"):
                    builtins.append(s)
                else:
                    calls.append(s)
                    if dur >= long_us:  # few frames are: the loop's own among them (events.py)
                        long_frames.add(name)
                if name.startswith(model_frames):
                    model_spans.append((s, t))
                    if name.startswith(MODULE_FRAME_PREFIX):
                        self.module_frames.append(HostEvent(name, e.tid, s, t))
            elif kind == _K_DEVICE:
                args = e.args or _NO_ARGS
                dev = e.pid if args.device is UNSET else args.device
                stream = e.tid if args.stream is UNSET else args.stream
                # a device or stream that is no number raises int()'s ValueError/TypeError, as it would
                device.append(DeviceEvent(name, DEVICE_KINDS[lowered], int(dev or 0), int(stream or 0), s, t,
                                          args.correlation))
            elif kind == _K_RUNTIME:
                runtime.append(HostEvent(name, e.tid, s, t, (e.args or _NO_ARGS).correlation))
            elif name.startswith(DATALOADER_PREFIX):  # any category: our TensorBoard copy makes it a cpu_op
                data_spans.append(HostEvent(name, e.tid, s, t))
            elif kind == _K_OP:
                ops.append(HostEvent(name, e.tid, s, t))
                if not self.shapes and e.args is not None and e.args.input_dims is not UNSET:
                    self.shapes = True
            elif kind == _K_ANNOTATION:
                annotations.append(HostEvent(name, e.tid, s, t))
                if name in DATA_ANNOTATIONS:
                    data_spans.append(HostEvent(name, e.tid, s, t))
        if memory:
            self._memory(events, memory)
        self.count += len(events)

    def _memory(self, events: list[Event], memory: list[Event]) -> None:
        """A piece's [memory] events appended to the columns, field by field (MemorySample's order: ts, the
        MEMORY_ARGS, the tid), each an int; the first event without numbers refused by its position."""
        base = self.base
        args = [e.args or _NO_ARGS for e in memory]
        try:
            columns = ([float(e.ts) - base for e in memory], [int(a.device_type) for a in args],
                       [int(a.total_allocated) for a in args], [int(a.total_reserved) for a in args],
                       [int(a.bytes) for a in args], [int(a.addr) for a in args], [int(a.device_id) for a in args],
                       [e.tid for e in memory])
        except (TypeError, ValueError):
            for e, a in zip(memory, args):
                try:
                    float(e.ts)
                    for k in _MEMORY_FIELDS:
                        int(getattr(a, k))
                except (TypeError, ValueError):
                    raise TraceError(f"{self.where}: [memory] event #{self.count + _position(events, e)} has no "
                                     "numeric ts/args") from None
            raise
        self.memory.add_columns(columns)

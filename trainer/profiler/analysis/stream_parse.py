"""Parse a trace file straight from disk into a ``ParsedTrace``, streaming, without the whole JSON in memory.

    parsed = parse_trace_file(Path("w.1.pt.trace.json.gz"), worker="w", span="1")

The file is cut into pieces of whole events (jsonstream.py) and each piece is decoded by msgspec into small
structs of only the fields the analysis reads (name, cat, ph, ts, dur, tid, pid and five args), which are
turned into events.py's HostEvent/DeviceEvent objects exactly as ``parse_trace`` turns the dicts of a
``json.load``; a piece is dropped once parsed. The result equals ``parse_trace(load_trace(path), ...)``.

Only a trace that passes every check of validate.py is parsed here. Anything else (text msgspec refuses,
such as NaN literals, an event that is not an object, a field of the wrong type, a trace with nothing to take
steps from)
raises ``StreamFallback``: the caller then reads the file the ordinary way (``report.read_trace`` and
``parse_trace``), which yields main's one-line ``TraceError`` for that input. Torch-free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from ..trace.bounded_read import TraceTooLarge, open_trace, read_limit
from ..trace.gc_paused import gc_paused
from ..trace.jsonstream import BLOCK, TraceStream, split_points
from ..trace.vocabulary import STEP_PREFIX
from ..trace.workers import json_size
from .events import (
    ANNOTATION_CATEGORIES,
    DATA_ANNOTATIONS,
    DATALOADER_PREFIX,
    DEVICE_KINDS,
    HOST_OP_CATEGORIES,
    PROFILER_STEP,
    RUNTIME_CATEGORIES,
    DeviceEvent,
    HostEvent,
    MemorySample,
    ParsedTrace,
    Step,
    _int_or_none,
)
from .inferred_steps import FROM_PROFILER, infer_steps
from .validate import MAX_TIME_US, STEP_CATEGORIES, STEP_NAME

UNSET = msgspec.UNSET
# This process parses the first byte range and then rebuilds the helpers' events from their columns (about
# a quarter of what parsing them cost), so its range is this much longer than theirs: measured on 1 GB.
FIRST_RANGE_WEIGHT = 1.15
# A gzipped file's first process has also decompressed the file up to the cut once, to find it (gzindex.py):
# 0.9 evened the two processes' CPU time on the 1 GB replica stored as .json.gz.
FIRST_RANGE_WEIGHT_GZ = 0.9


class StreamFallback(Exception):
    """This file must be parsed the ordinary way (module docstring); the message says why."""


class _Args(msgspec.Struct, gc=False):
    device: Any = UNSET
    stream: Any = UNSET
    correlation: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=UNSET, name="Input Dims")  # only its presence is used
    device_type: Any = msgspec.field(default=0, name="Device Type")
    total_allocated: Any = msgspec.field(default=0, name="Total Allocated")


class _Event(msgspec.Struct, gc=False):
    name: Any = UNSET
    cat: Any = ""
    ph: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    pid: Any = 0
    args: _Args | None = None


_DECODER = msgspec.json.Decoder(list[_Event])
# What a category's complete events are (_Collector._kind)
_K_PYTHON, _K_DEVICE, _K_RUNTIME, _K_OP, _K_ANNOTATION, _K_OTHER = range(6)
_NO_ARGS = _Args()


def _decode(text) -> list[_Event]:
    # from an immutable copy: the "Input Dims" left undecoded (msgspec.Raw) keep a reference to the text they
    # came from, which must not be the stream's own buffer (it is resized for the next piece)
    return _DECODER.decode(bytes(text))


class _Collector:
    """``parse_trace``'s loop over events, for decoded structs; raises StreamFallback where it raises."""

    def __init__(self) -> None:
        self.base: float | None = None
        self.steps, self.ops, self.annotations, self.runtime = [], [], [], []
        self.device, self.data_spans, self.memory = [], [], []
        self.python_calls: list[float] = []
        self.python_builtins: list[float] = []
        self.shapes = False
        self.misplaced_steps = False  # ProfilerStep# events outside the step categories
        self.header: dict = {}  # the file's keys other than traceEvents (a byte range's share of them)
        self._kinds: dict[str, tuple[str, int, bool]] = {}  # category -> _kind(category)

    def find_base(self, events: list[_Event]) -> bool:
        """``events._base`` over the events seen so far; False while none has a finite numeric ts."""
        for e in events:
            if isinstance(e.ts, (int, float)) and math.isfinite(e.ts):
                self.base = float(math.floor(e.ts))
                return True
        return False

    def _kind(self, cat) -> tuple[str, int, bool]:
        """(lower-cased category, what its complete events are: one of the ``_K`` codes, whether a
        ProfilerStep#N in it is a step), kept per category string."""
        lowered = str(cat).lower()
        kind = (_K_PYTHON if lowered == "python_function" else _K_DEVICE if lowered in DEVICE_KINDS
                else _K_RUNTIME if lowered in RUNTIME_CATEGORIES else _K_OP if lowered in HOST_OP_CATEGORIES
                else _K_ANNOTATION if lowered in ANNOTATION_CATEGORIES else _K_OTHER)
        info = (lowered, kind, lowered in STEP_CATEGORIES)
        if type(cat) is str:
            self._kinds[cat] = info
        return info

    def add(self, events: list[_Event]) -> None:
        """``parse_trace``'s rules, event by event, in its order; the category decides first, as the rules
        for python_function, device and runtime events hold whatever their name."""
        base, kinds, new_kind = self.base, self._kinds, self._kind
        lo, hi = -MAX_TIME_US, MAX_TIME_US
        ops, annotations, runtime, device, data_spans = (self.ops, self.annotations, self.runtime, self.device,
                                                         self.data_spans)
        calls, builtins = self.python_calls, self.python_builtins
        for e in events:
            name, ts, dur, cat = e.name, e.ts, e.dur, e.cat
            if ts is not None and ((type(ts) is not float and type(ts) is not int) or not lo <= ts <= hi):
                raise StreamFallback("an event fails validate.check_event (ts)")
            if dur is not None and ((type(dur) is not float and type(dur) is not int) or not lo <= dur <= hi):
                raise StreamFallback("an event fails validate.check_event (dur)")
            info = kinds.get(cat) if type(cat) is str else None
            lowered, kind, step_category = info if info is not None else new_kind(cat)
            ph = e.ph
            if type(name) is not str:
                if name is not UNSET:
                    raise StreamFallback("an event fails validate.check_event (name)")
                if ph == "X" and kind == _K_PYTHON:  # a frame without a name is a call
                    calls.append(self._span(ts, dur)[0])
                continue
            if step_category and name.startswith(STEP_PREFIX) and STEP_NAME.match(name) is not None:
                if ph != "X" or ts is None or dur is None or dur <= 0:
                    raise StreamFallback("a ProfilerStep#N fails validate.check_event")
                s, t = self._span(ts, dur)
                self.steps.append(Step(int(PROFILER_STEP.match(name).group(1)), s, t))
                continue
            if ph != "X":
                if ph == "i" and name == "[memory]":
                    self._memory(ts, e.args or _NO_ARGS)
                continue
            if kind == _K_OTHER and not name.startswith(DATALOADER_PREFIX):
                if name.startswith(STEP_PREFIX):  # a ProfilerStep# that is no host step: no steps are inferred
                    self.misplaced_steps = True
                continue
            if ts is None or dur is None:
                raise StreamFallback("an event without numeric ts/dur")
            s = ts - base  # a float: base is one; float(ts) - base, as events._span
            t = s + dur if dur > 0 else s  # max(dur, 0)
            if kind == _K_PYTHON:
                (builtins if name.startswith("<built-in") else calls).append(s)
            elif kind == _K_DEVICE:
                args = e.args or _NO_ARGS
                dev = e.pid if args.device is UNSET else args.device
                stream = e.tid if args.stream is UNSET else args.stream
                try:
                    device.append(DeviceEvent(name, DEVICE_KINDS[lowered], int(dev or 0), int(stream or 0), s,
                                              t, args.correlation))
                except (TypeError, ValueError):
                    raise StreamFallback("a device event with a non-numeric device or stream") from None
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

    def _memory(self, ts, args: _Args) -> None:
        if ts is None:
            raise StreamFallback("a [memory] event without ts")
        try:
            self.memory.append(MemorySample(float(ts) - self.base, int(args.device_type), int(args.total_allocated)))
        except (TypeError, ValueError):
            raise StreamFallback("a [memory] event without numeric args") from None

    def _span(self, ts, dur) -> tuple[float, float]:
        if ts is None or dur is None:
            raise StreamFallback("an event without numeric ts/dur")
        s = float(ts) - self.base
        dur = float(dur)
        return s, s + (0.0 if dur < 0.0 else dur)  # max(dur, 0.0), as events._span


def _check_header(header: dict) -> None:
    for key, kind in (("distributedInfo", dict), ("deviceProperties", list)):
        value = header.get(key)
        if value is not None and not isinstance(value, kind):
            raise StreamFallback(f"{key} of the wrong type")


@gc_paused()
def parse_trace_file(path: Path, worker: str, span: str, limit: int | None = None,
                     block: int = BLOCK, parts: int = 1) -> ParsedTrace:
    """``parse_trace`` of the trace in ``path``, streamed (module docstring) in pieces of about ``block``
    bytes. ``parts`` > 1: the file is cut into that many byte ranges of whole events, parsed at once by this
    process and ``parts - 1`` forked ones (the result is the same); a .gz file only when the JSON its
    trailer records is within the bound of the one-range read (a small file may inflate to anything). Raises StreamFallback when
    the file must be parsed the ordinary way, TraceTooLarge past bounded_read's ceiling (``limit`` bytes)."""
    path = Path(path)
    bound = limit if limit is not None else read_limit() if path.name.endswith(".gz") else None
    if parts > 1 and (bound is None or json_size(path) <= bound):
        from .stream_ranges import collect_ranges, first_base

        weight = FIRST_RANGE_WEIGHT_GZ if path.name.endswith(".gz") else FIRST_RANGE_WEIGHT
        ranges = split_points(path, parts, _decode, weight)
        base = first_base(path, block) if ranges else None
        if base is not None:
            try:
                return _parsed(worker, span, *collect_ranges(path, ranges, base, block))
            except StreamFallback:
                raise
            except Exception:  # a helper that could not start or died: the one-process parse below
                pass
    c = _Collector()
    pending: list[list[_Event]] = []
    try:
        with TraceStream(path, block, opener=lambda p: open_trace(p, limit)) as ts:
            for events in ts.decode_events(_decode):
                if c.base is None:
                    pending.append(events)
                    if not c.find_base(events):
                        continue
                    for piece in pending:
                        c.add(piece)
                    pending = []
                else:
                    c.add(events)
            header = ts.header
    except (TraceTooLarge, StreamFallback):
        raise
    except Exception as e:  # msgspec errors, unreadable files: the ordinary reader names them
        raise StreamFallback(f"{type(e).__name__}: {e}") from None
    if c.base is None:
        c.base = 0.0
        for piece in pending:
            c.add(piece)
    return _parsed(worker, span, c, header)


def _parsed(worker: str, span: str, c: _Collector, header: dict) -> ParsedTrace:
    _check_header(header)
    steps, steps_from = c.steps, FROM_PROFILER
    if not steps and not c.misplaced_steps:
        inferred, steps_from = infer_steps(c.annotations, (c.ops, c.runtime, c.data_spans))
        steps = [Step(*s) for s in inferred]
    if not steps:
        raise StreamFallback("no steps: the ordinary parse says what the ProfilerStep# events lack")
    dist = header.get("distributedInfo") or {}
    props = header.get("deviceProperties") or []
    return ParsedTrace(
        worker=worker, span=span, base_us=c.base,
        rank=_int_or_none(dist.get("rank")), world_size=_int_or_none(dist.get("world_size")),
        device_name=props[0].get("name") if props and isinstance(props[0], dict) else None,
        steps=tuple(sorted(steps, key=lambda s: s.start)),
        ops=tuple(c.ops), annotations=tuple(c.annotations), runtime=tuple(c.runtime),
        device=tuple(sorted(c.device, key=lambda d: d.start)),
        data_spans=tuple(c.data_spans), memory=tuple(c.memory), python_calls=tuple(sorted(c.python_calls)),
        python_builtins=tuple(sorted(c.python_builtins)), recorded_shapes=c.shapes, steps_from=steps_from)

"""Parse a trace file straight from disk into a ``ParsedTrace``, streaming, without the whole JSON in memory.

    parsed = parse_trace_file(Path("w.1.pt.trace.json.gz"), worker="w", span="1")

The file is cut into pieces of whole events (jsonstream.py) and each piece is decoded by msgspec into small
structs of only the fields the analysis reads (name, cat, ph, ts, dur, tid, pid and five args), which are
turned into events.py's HostEvent/DeviceEvent objects exactly as ``parse_trace`` turns the dicts of a
``json.load``; a piece is dropped once parsed. The result equals ``parse_trace(load_trace(path), ...)``.

Only a trace that passes every check of validate.py is parsed here. Anything else (text msgspec refuses,
such as NaN literals, an event that is not an object, a field of the wrong type, a trace without steps)
raises ``StreamFallback``: the caller then reads the file the ordinary way (``report.read_trace`` and
``parse_trace``), which yields main's one-line ``TraceError`` for that input. Torch-free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
from stepscope.trainer.profiler.bounded_read import TraceTooLarge, open_trace

from ..vocabulary import STEP_PREFIX
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
from .jsonstream import BLOCK, TraceStream, split_points
from .validate import MAX_TIME_US, STEP_CATEGORIES, STEP_NAME

UNSET = msgspec.UNSET


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
        self.header: dict = {}  # the file's keys other than traceEvents (a byte range's share of them)
        self._lowered: dict[str, str] = {}  # category -> lower-cased

    def find_base(self, events: list[_Event]) -> bool:
        """``events._base`` over the events seen so far; False while none has a finite numeric ts."""
        for e in events:
            if isinstance(e.ts, (int, float)) and math.isfinite(e.ts):
                self.base = float(math.floor(e.ts))
                return True
        return False

    def add(self, events: list[_Event]) -> None:
        base, lowered, span = self.base, self._lowered, self._span
        lo, hi = -MAX_TIME_US, MAX_TIME_US
        for e in events:
            name, ph, ts, dur = e.name, e.ph, e.ts, e.dur
            if ((name is not UNSET and type(name) is not str)
                    or (ts is not None and ((type(ts) is not float and type(ts) is not int) or not lo <= ts <= hi))
                    or (dur is not None and ((type(dur) is not float and type(dur) is not int)
                                             or not lo <= dur <= hi))):
                raise StreamFallback("an event fails validate.check_event")
            cat = lowered.get(e.cat) if type(e.cat) is str else None
            if cat is None:
                cat = str(e.cat).lower()
                if type(e.cat) is str:
                    lowered[e.cat] = cat
            step = (type(name) is str and name.startswith(STEP_PREFIX) and STEP_NAME.match(name) is not None
                    and cat in STEP_CATEGORIES)
            if step and (ph != "X" or ts is None or dur is None or dur <= 0):
                raise StreamFallback("a ProfilerStep#N fails validate.check_event")
            args = e.args or _NO_ARGS
            if ph == "i" and name == "[memory]":
                if ts is None:
                    raise StreamFallback("a [memory] event without ts")
                try:
                    self.memory.append(MemorySample(float(ts) - base, int(args.device_type),
                                                    int(args.total_allocated)))
                except (TypeError, ValueError):
                    raise StreamFallback("a [memory] event without numeric args") from None
                continue
            if ph != "X":
                continue
            if cat == "python_function":
                (self.python_builtins if str(None if name is UNSET else name).startswith("<built-in")
                 else self.python_calls).append(span(ts, dur)[0])
                continue
            if type(name) is not str:
                continue
            if step:
                s, t = span(ts, dur)
                self.steps.append(Step(int(PROFILER_STEP.match(name).group(1)), s, t))
                continue
            if cat in DEVICE_KINDS:
                s, t = span(ts, dur)
                dev = e.pid if args.device is UNSET else args.device
                stream = e.tid if args.stream is UNSET else args.stream
                try:
                    self.device.append(DeviceEvent(name, DEVICE_KINDS[cat], int(dev or 0), int(stream or 0), s, t,
                                                   args.correlation))
                except (TypeError, ValueError):
                    raise StreamFallback("a device event with a non-numeric device or stream") from None
                continue
            if cat in RUNTIME_CATEGORIES:
                s, t = span(ts, dur)
                self.runtime.append(HostEvent(name, e.tid, s, t, args.correlation))
                continue
            if name.startswith(DATALOADER_PREFIX):
                s, t = span(ts, dur)
                self.data_spans.append(HostEvent(name, e.tid, s, t))
                continue
            if cat in HOST_OP_CATEGORIES:
                s, t = span(ts, dur)
                self.ops.append(HostEvent(name, e.tid, s, t))
                self.shapes = self.shapes or args.input_dims is not UNSET
            elif cat in ANNOTATION_CATEGORIES:
                s, t = span(ts, dur)
                self.annotations.append(HostEvent(name, e.tid, s, t))
                if name in DATA_ANNOTATIONS:
                    self.data_spans.append(HostEvent(name, e.tid, s, t))

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


def parse_trace_file(path: Path, worker: str, span: str, limit: int | None = None,
                     block: int = BLOCK, parts: int = 1) -> ParsedTrace:
    """``parse_trace`` of the trace in ``path``, streamed (module docstring) in pieces of about ``block``
    bytes. ``parts`` > 1: an uncompressed file is cut into that many byte ranges of whole events, parsed at
    once by this process and ``parts - 1`` forked ones (the result is the same). Raises StreamFallback when
    the file must be parsed the ordinary way, TraceTooLarge past bounded_read's ceiling (``limit`` bytes)."""
    path = Path(path)
    if parts > 1 and (limit is None or path.stat().st_size <= limit):
        from .stream_ranges import collect_ranges, first_base

        ranges = split_points(path, parts, _decode)
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
    if not c.steps:
        raise StreamFallback("no steps: the ordinary parse says what the ProfilerStep# events lack")
    dist = header.get("distributedInfo") or {}
    props = header.get("deviceProperties") or []
    return ParsedTrace(
        worker=worker, span=span, base_us=c.base,
        rank=_int_or_none(dist.get("rank")), world_size=_int_or_none(dist.get("world_size")),
        device_name=props[0].get("name") if props and isinstance(props[0], dict) else None,
        steps=tuple(sorted(c.steps, key=lambda s: s.start)),
        ops=tuple(c.ops), annotations=tuple(c.annotations), runtime=tuple(c.runtime),
        device=tuple(sorted(c.device, key=lambda d: d.start)),
        data_spans=tuple(c.data_spans), memory=tuple(c.memory), python_calls=tuple(sorted(c.python_calls)),
        python_builtins=tuple(sorted(c.python_builtins)), recorded_shapes=c.shapes)

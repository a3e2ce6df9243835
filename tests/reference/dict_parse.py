"""The dict parse: a trace loaded whole with json, parsed event by event. A reference for the tests only.

    parsed = parse_trace(load_trace(path), worker="rank0", span="1795259107760373831")
    report = analyze_trace(load_trace(path), "rank0", "1")

The analysis parses streaming (stepscope.analysis.stream_parse); this is the plain reading of the
same rules, written for clarity rather than speed, that the tests hold the streamed parse to: the same
ParsedTrace for every trace, the same one-line TraceError for every bad one.
"""

from __future__ import annotations

import json
import math
import zlib

from stepscope.analysis.events import (
    DATA_ANNOTATIONS,
    HOST_OP_CATEGORIES,
    LONG_FRAME_US,
    MODEL_FRAME_PREFIXES,
    MODULE_FRAME_PREFIX,
    PROFILER_STEP,
    DeviceEvent,
    HostEvent,
    MemorySample,
    ParsedTrace,
    Step,
    _int_or_none,
    device_memory,
)
from stepscope.analysis.inferred_steps import FROM_PROFILER, infer_steps
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanReport, analyze_selected
from stepscope.analysis.validate import check_document, check_event, is_step_event, no_steps_error
from stepscope.trace.errors import TraceError
from stepscope.trace.files import load_trace
from stepscope.trace.vocabulary import (
    ANNOTATION_CATEGORIES,
    DATALOADER_PREFIX,
    DEVICE_KINDS,
    RUNTIME_CATEGORIES,
    STEP_PREFIX,
)


def analyze_trace(trace: dict, worker: str, span: str, telemetry: dict | None = None,
                  selection: StepSelection | None = None) -> SpanReport:
    """The report of one trace dict, with the analysis' one-line errors."""
    try:
        parsed = parse_trace(trace, worker, span)
    except TraceError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise TraceError(f"{worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return analyze_selected(parsed, telemetry, selection)


def _span(e: dict, i: int, base: float) -> tuple[float, float]:
    try:
        ts, dur = float(e["ts"]) - base, float(e["dur"])
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"event #{i} ({e.get('name')!r}, cat {e.get('cat')!r}) has no numeric "
                         "ts/dur") from None
    return ts, ts + max(dur, 0.0)


def parse_trace(trace: dict, worker: str, span: str) -> ParsedTrace:
    """Typed events of one (worker, span) trace. Without ProfilerStep#N ranges, the steps are inferred
    (inferred_steps.py); raises TraceError if there is nothing to infer them from."""
    check_document(trace, f"{worker}.{span}")
    steps, ops, annotations, runtime, device, data_spans, memory = [], [], [], [], [], [], []
    python_calls: list[float] = []
    python_builtins: list[float] = []
    long_frames: set[str] = set()
    model_spans: list[tuple[float, float]] = []
    module_frames: list[HostEvent] = []
    shapes = False
    base = _base(trace["traceEvents"])
    for i, e in enumerate(trace["traceEvents"]):
        check_event(e, i, f"{worker}.{span}")
        ph = e.get("ph")
        cat = str(e.get("cat", "")).lower()
        name = e.get("name")
        if ph == "i" and name == "[memory]":
            args = e.get("args") or {}
            try:
                memory.append(MemorySample(float(e["ts"]) - base, int(args.get("Device Type", 0)),
                                           int(args.get("Total Allocated", 0)), int(args.get("Total Reserved", 0)),
                                           int(args.get("Bytes", 0)), int(args.get("Addr", 0)),
                                           int(args.get("Device Id", 0)), e.get("tid")))
            except (KeyError, TypeError, ValueError):
                raise TraceError(f"{worker}.{span}: [memory] event #{i} has no numeric ts/args") from None
            continue
        if ph == "X" and cat == "python_function":
            start, end = _span(e, i, base)
            if str(name).startswith("<built-in"):
                python_builtins.append(start)
            else:
                python_calls.append(start)
                if isinstance(name, str) and float(e["dur"]) >= LONG_FRAME_US:
                    long_frames.add(name)
            if isinstance(name, str) and name.startswith(MODEL_FRAME_PREFIXES):
                model_spans.append((start, end))
                if name.startswith(MODULE_FRAME_PREFIX):
                    module_frames.append(HostEvent(name, e.get("tid"), start, end))
            continue
        if ph != "X" or not isinstance(name, str):
            continue
        args = e.get("args") or {}
        if is_step_event(e):  # user_annotation; Operator in torch 1.8/1.9 traces
            s, t = _span(e, i, base)
            steps.append(Step(int(PROFILER_STEP.match(name).group(1)), s, t))
            continue
        if cat in DEVICE_KINDS:
            s, t = _span(e, i, base)
            device.append(DeviceEvent(name, DEVICE_KINDS[cat], int(args.get("device", e.get("pid", 0)) or 0),
                                      int(args.get("stream", e.get("tid", 0)) or 0), s, t,
                                      args.get("correlation")))
            continue
        if cat in RUNTIME_CATEGORIES:
            s, t = _span(e, i, base)
            runtime.append(HostEvent(name, e.get("tid"), s, t, args.get("correlation")))
            continue
        if name.startswith(DATALOADER_PREFIX):  # any category: our TensorBoard copy makes it a cpu_op
            s, t = _span(e, i, base)
            data_spans.append(HostEvent(name, e.get("tid"), s, t))
            continue
        if cat in HOST_OP_CATEGORIES:
            s, t = _span(e, i, base)
            ops.append(HostEvent(name, e.get("tid"), s, t))
            shapes = shapes or "Input Dims" in args
        elif cat in ANNOTATION_CATEGORIES:
            s, t = _span(e, i, base)
            annotations.append(HostEvent(name, e.get("tid"), s, t))
            if name in DATA_ANNOTATIONS:
                data_spans.append(HostEvent(name, e.get("tid"), s, t))
    steps_from = FROM_PROFILER
    if not steps and not any(isinstance(e, dict) and str(e.get("name", "")).startswith(STEP_PREFIX)
                             for e in trace["traceEvents"]):  # misplaced ones: no_steps_error says how
        inferred, steps_from = infer_steps(annotations, (ops, runtime, data_spans))
        steps = [Step(*s) for s in inferred]
    if not steps:
        raise no_steps_error(trace["traceEvents"], f"{worker}.{span}")
    dist = trace.get("distributedInfo") or {}
    props = trace.get("deviceProperties") or []
    return ParsedTrace(
        worker=worker, span=span, base_us=base,
        rank=_int_or_none(dist.get("rank")), world_size=_int_or_none(dist.get("world_size")),
        device_name=props[0].get("name") if props and isinstance(props[0], dict) else None,
        steps=tuple(sorted(steps, key=lambda s: s.start)),
        ops=tuple(ops), annotations=tuple(annotations), runtime=tuple(runtime),
        device=tuple(sorted(device, key=lambda d: d.start)),
        data_spans=tuple(data_spans), memory=tuple(memory), python_calls=tuple(sorted(python_calls)),
        python_builtins=tuple(sorted(python_builtins)), long_frames=tuple(sorted(long_frames)),
        model_spans=tuple(sorted(model_spans)), module_frames=tuple(module_frames), recorded_shapes=shapes, steps_from=steps_from,
        device_memory=device_memory(props))


def _base(events: list) -> float:
    """The first event's whole µs. Profiler clocks read ~4e12 µs, where a float resolves only ~1e-3 µs;
    times relative to a nearby base keep ts + dur - ts equal to dur."""
    for e in events:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and math.isfinite(e["ts"]):
            return float(math.floor(e["ts"]))
    return 0.0


def parse_file(path, worker: str, span: str) -> ParsedTrace:
    """A trace file loaded whole and parsed by ``parse_trace``, with the analysis' one-line errors, each
    naming the file: what the engine must say of the same file."""
    try:
        trace = load_trace(path)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: unreadable trace ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise TraceError(f"{path}: unreadable trace (JSON nested too deeply to parse)") from None
    if not isinstance(trace, dict):
        raise TraceError(f"{path}: unreadable trace (a JSON {type(trace).__name__}, not an object)")
    try:
        return parse_trace(trace, worker, span)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise TraceError(f"{path}: {worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None

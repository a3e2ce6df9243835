"""Parse a Chrome-trace dict written by ``torch.profiler`` into typed events.

    parsed = parse_trace(load_trace(path), worker="rank0", span="1795259107760373831")

Accepts the untouched original (``cuda_runtime``/``cuda_driver`` categories), our TensorBoard-adapted copy
(those rewritten to ``runtime``, DataLoader spans made ``cpu_op``) and plain ``tensorboard_trace_handler``
output. Times are µs, as in the file, counted from ``base_us``. Device work is linked to its launch by the
``correlation`` argument that both the runtime call and the kernel/memcpy/memset carry (the same id the
``ac2g`` flow events use). Of the Python-stack events (``python_function``) only their start times are kept:
they tell how much the profiler itself slowed the host (overhead.py), and a trace of a hot Python loop holds
hundreds of thousands of them. Raises ``TraceError`` (a ValueError)
on input that is not a profiler trace of training steps.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from ..trace.errors import TraceError
from ..trace.vocabulary import (
    ANNOTATION_CATEGORIES,
    DATALOADER_PREFIX,
    DEVICE_KINDS,
    OPERATOR_CATEGORIES,
    RUNTIME_CATEGORIES,
    STEP_PREFIX,
)
from .inferred_steps import FROM_PROFILER, infer_steps
from .validate import check_document, check_event, is_step_event, no_steps_error

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

HOST_OP_CATEGORIES = OPERATOR_CATEGORIES  # the analysis's name for them

# Runtime calls that block the host until the GPU has caught up.
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
DATA_ANNOTATIONS = {"data"}  # our trainer's record_function("data") around fetching the next batch
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms", "mpi:", "ucc:")


class HostEvent(NamedTuple):
    """A span on a host thread: an op, an annotation or a runtime call. (Events are named tuples: a large
    trace holds millions, made and passed between processes cheaply.)"""

    name: str
    tid: int | str
    start: float
    end: float
    correlation: int | None = None  # runtime calls only

    @property
    def dur(self) -> float:
        return self.end - self.start


class DeviceEvent(NamedTuple):
    """A kernel, memcpy or memset on a GPU stream."""

    name: str
    kind: str  # "kernel" | "memcpy" | "memset"
    device: int
    stream: int
    start: float
    end: float
    correlation: int | None

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Step:
    number: int
    start: float
    end: float


class MemorySample(NamedTuple):
    ts: float
    device_type: int  # 0 CPU, 1 CUDA (c10::DeviceType)
    total_allocated: int


@dataclass(frozen=True)
class ParsedTrace:
    worker: str
    span: str
    base_us: float  # every time below is µs after this one (see _base)
    rank: int | None
    world_size: int | None
    device_name: str | None
    steps: tuple[Step, ...]
    ops: tuple[HostEvent, ...]  # cpu_op
    annotations: tuple[HostEvent, ...]  # user_annotation, except ProfilerStep#N
    runtime: tuple[HostEvent, ...]  # cuda_runtime / cuda_driver / runtime
    device: tuple[DeviceEvent, ...]  # sorted by start
    data_spans: tuple[HostEvent, ...]  # DataLoader iteration and `data` ranges, any category
    memory: tuple[MemorySample, ...]
    python_calls: tuple[float, ...] = ()  # start of every with_stack Python function frame, sorted
    python_builtins: tuple[float, ...] = ()  # ... and of every call of a built-in ("<built-in ...>"), sorted
    recorded_shapes: bool = False  # record_shapes was on: operators carry "Input Dims"
    steps_from: str = FROM_PROFILER  # or, in a trace without ProfilerStep#N, inferred_steps.FROM_*

    @property
    def has_gpu(self) -> bool:
        return bool(self.device)


@lru_cache(maxsize=1 << 16)  # asked once per event; a trace has few distinct names
def is_comm(name: str) -> bool:
    return name.startswith(COMM_PREFIXES)


@lru_cache(maxsize=1 << 16)
def is_comm_kernel(name: str) -> bool:
    return "nccl" in name.lower()


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
                                           int(args.get("Total Allocated", 0))))
            except (KeyError, TypeError, ValueError):
                raise TraceError(f"{worker}.{span}: [memory] event #{i} has no numeric ts/args") from None
            continue
        if ph == "X" and cat == "python_function":
            start = _span(e, i, base)[0]
            (python_builtins if str(name).startswith("<built-in") else python_calls).append(start)
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
        python_builtins=tuple(sorted(python_builtins)), recorded_shapes=shapes, steps_from=steps_from)


def _base(events: list) -> float:
    """The first event's whole µs. Profiler clocks read ~4e12 µs, where a float resolves only ~1e-3 µs;
    times relative to a nearby base keep ts + dur - ts equal to dur."""
    for e in events:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and math.isfinite(e["ts"]):
            return float(math.floor(e["ts"]))
    return 0.0


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None

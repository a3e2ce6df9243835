"""The typed events of a Chrome trace written by ``torch.profiler``: what the parse (stream_parse.py) makes.

    parsed = parse_trace_file(path, worker="rank0", span="1795259107760373831")   # a ParsedTrace

The parse accepts the untouched original (``cuda_runtime``/``cuda_driver`` categories), our TensorBoard-adapted copy
(those rewritten to ``runtime``, DataLoader spans made ``cpu_op``) and plain ``tensorboard_trace_handler``
output. Times are µs, as in the file, counted from ``base_us``. Device work is linked to its launch by the
``correlation`` argument that both the runtime call and the kernel/memcpy/memset carry (the same id the
``ac2g`` flow events use). Of the Python-stack events (``python_function``) only their start times are kept:
they tell how much the profiler itself slowed the host (overhead.py), and a trace of a hot Python loop holds
hundreds of thousands of them. Of the few frames that last ``LONG_FRAME_US`` or more, the distinct names are
kept too: among them are the frames of the loop around the steps (a framework's ``Trainer``: its training
loop spans the recorded window and its step function a step), which tell the loop's style (step_range.py).
The frames of the model's own work are kept whole (``model_spans``): each ``nn.Module`` call (``nn.Module:
Name_0``) and the autograd engine's run of a backward (``<built-in method run_backward ...>``). The host's
time inside them is the model dispatching its ops (breakdown.py). The module calls are also kept with their
names and threads (``module_frames``): the bytes a module allocates are told by them (memory.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from stepscope.trace.vocabulary import DATA_RANGE, OPERATOR_CATEGORIES
from stepscope.trace.vocabulary import STEPS_FROM_PROFILER as FROM_PROFILER

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

HOST_OP_CATEGORIES = OPERATOR_CATEGORIES  # the analysis's name for them

# Runtime calls that block the host until the GPU has caught up.
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
# Python frames (with_stack) of the model's own work: a module's call, the autograd engine running a backward
MODULE_FRAME_PREFIX = "nn.Module: "  # a module's call: "nn.Module: Linear_0" (class and instance index)
MODEL_FRAME_PREFIXES = (MODULE_FRAME_PREFIX.rstrip(), "<built-in method run_backward")
# record_function ranges of the model's own work: torch.optim names every optimizer's step and zero_grad
MODEL_ANNOTATION_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
DATA_ANNOTATIONS = {DATA_RANGE}  # stepscope's range around fetching the next batch
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms", "mpi:", "ucc:")
# a Python frame this long (µs) or longer has its name kept (ParsedTrace.long_frames): a training step's
# frame is longer under with_stack, and a few percent of a trace's frames are
LONG_FRAME_US = 100.0


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
    """A ``[memory]`` instant event: one allocation (``bytes`` > 0) or free (< 0) of the caching allocator, on
    the allocating thread, with the allocator's totals after it. The fields from ``total_reserved`` on are
    read from the same args of the same event (stream_collect.MEMORY_ARGS lists them for every reader)."""
    ts: float
    device_type: int  # 0 CPU, 1 CUDA (c10::DeviceType)
    total_allocated: int
    total_reserved: int = 0
    bytes: int = 0  # signed: an allocation is positive, a free negative
    addr: int = 0  # the block's address: an allocation and its free share it
    device_id: int = 0  # -1 for the CPU
    tid: int | str | None = None  # the allocating thread


class MemoryColumns:
    """``[memory]`` samples as columns, one list per MemorySample field in its order: what the streamed parse
    collects (no tuple per event) and what the memory analysis reads. A sequence of MemorySample to everything
    else (len, iteration, indexing, equality with a tuple of them); ``of`` makes one from such a sequence, as
    the other readers of traces give it."""

    __slots__ = ("columns",)

    def __init__(self, columns=None) -> None:
        self.columns = tuple(list(c) for c in columns) if columns is not None else \
            tuple([] for _ in MemorySample._fields)
        assert len(self.columns) == len(MemorySample._fields)

    @classmethod
    def of(cls, memory) -> MemoryColumns:
        if isinstance(memory, cls):
            return memory
        memory = list(memory)
        return cls(zip(*memory)) if memory else cls()

    def field(self, name: str) -> list:
        return self.columns[MemorySample._fields.index(name)]

    def take(self, indices) -> MemoryColumns:
        """The samples at ``indices`` (in their order)."""
        return MemoryColumns([c[i] for i in indices] for c in self.columns)

    def add_columns(self, columns) -> None:
        """Append samples given as columns (one sequence per MemorySample field, in its order)."""
        for mine, more in zip(self.columns, columns, strict=True):
            mine.extend(more)

    def extend(self, samples) -> None:
        """Append MemorySamples (a reader that makes them one by one; add_columns is the cheap way)."""
        samples = list(samples)
        if samples:
            self.add_columns(zip(*samples))

    def append(self, sample: MemorySample) -> None:
        for mine, value in zip(self.columns, sample, strict=True):
            mine.append(value)

    def __len__(self) -> int:
        return len(self.columns[0])

    def __iter__(self):
        return map(MemorySample, *self.columns)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return MemoryColumns(c[i] for c in self.columns)
        return MemorySample(*(c[i] for c in self.columns))

    def __eq__(self, other) -> bool:
        if isinstance(other, MemoryColumns):
            return self.columns == other.columns
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"MemoryColumns({len(self)} samples)"


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
    memory: tuple[MemorySample, ...] | MemoryColumns  # the streamed parse's: MemoryColumns
    python_calls: tuple[float, ...] = ()  # start of every with_stack Python function frame, sorted
    python_builtins: tuple[float, ...] = ()  # ... and of every call of a built-in ("<built-in ...>"), sorted
    long_frames: tuple[str, ...] = ()  # the distinct names of frames of LONG_FRAME_US or more, sorted
    model_spans: tuple[tuple[float, float], ...] = ()  # (start, end) of each MODEL_FRAME_PREFIXES frame
    module_frames: tuple[HostEvent, ...] = ()  # each nn.Module call's frame, named and on its thread
    recorded_shapes: bool = False  # record_shapes was on: operators carry "Input Dims"
    # (device id, totalGlobalMem bytes) of each GPU in the trace's deviceProperties
    device_memory: tuple[tuple[int, int], ...] = ()
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


def device_memory(props) -> tuple[tuple[int, int], ...]:
    """(id, totalGlobalMem) of each GPU a trace's ``deviceProperties`` lists with both as numbers."""
    out = []
    for p in props if isinstance(props, list) else ():
        if isinstance(p, dict):
            i, total = _int_or_none(p.get("id")), _int_or_none(p.get("totalGlobalMem"))
            if i is not None and total is not None and total > 0:
                out.append((i, total))
    return tuple(out)


def distributed_rank(header: dict) -> tuple[int | None, int | None]:
    """(rank, world size) as a trace's ``distributedInfo`` gives them; None for either it does not give."""
    dist = header.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        return None, None
    return _int_or_none(dist.get("rank")), _int_or_none(dist.get("world_size"))


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None

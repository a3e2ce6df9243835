"""Memory per profiled step, from the same trace and the same parse as the time verdict.

    mem = memory_section(memory_devices(trace, kept), telemetry)   # MemoryReport; None: no events, no counters
    mem.devices[0].steps[0].composition     # {"persistent": ..., "forward": ..., ...}: sums to the step's peak
    mem.findings, mem.to_dict(), mem.lines()

``profile_memory=True`` records every allocation and free of the caching allocator as a ``[memory]`` event
(events.MemorySample) on the allocating thread, with the allocator's totals after it. Sorted by time, each
event's Total Allocated is the previous one's plus its Bytes, so for each profiled step and device:

- the peak allocated (the largest Total Allocated in the step's host range, or at its start) and reserved;
- the composition at that peak: ``persistent`` (allocated when the step began: parameters, gradients,
  optimizer state, whatever the loop holds across steps) plus the net growth from the step's start to the peak
  in each phase of the step: ``forward`` (before the backward), ``backward`` (from the first to the last
  ``autograd::engine::evaluate_function`` op), ``optimizer`` (inside ``Optimizer.step#`` ranges; a step whose
  optimizer keeps what it allocated, the first step's state creation, shows it apart as
  ``optimizer_state_new``) and ``other`` (the rest: zero_grad, the loss's read-out). They sum to the peak;
- the blocks live at the peak that the step allocated, by the innermost op on the allocating thread (a generic
  allocation op such as ``aten::empty`` gives way to the op around it);
- the same blocks by the innermost ``nn.Module`` call on the allocating thread, where the trace has module
  frames (with_stack), and the bytes allocated outside any module;
- fragmentation: reserved minus allocated at the peak.

Across the steps: memory creep (allocated at the start of each step rising on every step) and allocator calls
inside the steps (``cudaMalloc``/``cudaFree``/``cuMem*``: the caching allocator growing or giving memory
back, each a host stall and ``cudaFree`` a device synchronisation). Churn that holds the GPU idle is also a
time finding (stall_finding(stall_figures(...))), costed in the step's time beside the verdict's findings. Capacity is the
device's ``totalGlobalMem`` from the trace's ``deviceProperties``. The findings' thresholds are the constants below
(docs/memory.md). Torch-free, pure functions of the ParsedTrace.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from stepscope.analysis.breakdown import device_sets
from stepscope.analysis.columns import op_columns, op_name_codes
from stepscope.analysis.events import MODULE_FRAME_PREFIX, MemoryColumns, ParsedTrace, events_at, rows_named
from stepscope.analysis.findings import Finding
from stepscope.analysis.intervals import IntervalSet, subtract
from stepscope.analysis.per_trace import per_trace
from stepscope.analysis.steps import StepWindow
from stepscope.analysis.vocabulary import (
    ALLOC_RETRIES,
    ALLOCATOR_CHURN,
    ALLOCATOR_STALLS,
    FRAGMENTATION,
    HEADROOM,
    MEMORY_CREEP,
    MEMORY_IMBALANCE,
    OOM_RISK,
)
from stepscope.trace.fastread import as_objects
from stepscope.trace.gc_paused import gc_paused

GIB = float(1 << 30)
MIB = float(1 << 20)
# peak reserved at or above this share of the device's memory: one larger batch, a longer sequence or a
# fragmented moment away from an out-of-memory error (TraceML's pressure rule)
OOM_RISK_PCT = 92.0
# peak reserved at or below this share: the batch could grow (the prediction says by how much)
HEADROOM_PCT = 50.0
# memory outside the caching allocator on the device (CUDA context, kernels' modules, NCCL buffers), left out
# of what a larger batch may use
CONTEXT_BYTES = 1 << 30
# reserved minus allocated at the peak, at least this share of reserved and this many bytes: fragmentation
FRAGMENTATION_PCT = 50.0
FRAGMENTATION_MIN_BYTES = 1 << 30
# allocated at the start of a step rising on every step by at least this much on average: creep
CREEP_MIN_BYTES_PER_STEP = 1 << 20
CREEP_MIN_STEPS = 3
# allocator calls in every kept step (at least this many steps): churn; growth in the first steps is warm-up
CHURN_MIN_STEPS = 2
# a batch scale is predicted only where the step adds at least this much above its persistent bytes
SCALE_MIN_BYTES = 16 << 20
# a larger predicted scale is said as "at least" this much (activations stop scaling linearly long before)
SCALE_SAID_MAX = 8.0
# a step whose optimizer keeps this much of what it allocated creates state (the first step of a run)
STATE_NEW_MIN_BYTES = 1 << 20
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease",
                   "cuMemAddressReserve", "cuMemAddressFree", "cuMemSetAccess", "cudaMallocAsync", "cudaFreeAsync")
SYNCING_ALLOCATOR_CALLS = ("cudaFree",)
# churn whose calls hold the GPU idle for at least this share of the step is a time finding too
# (stall_finding): a starting point, as host_sync's "any sync inside the step", less the noise of a call that
# happens to fall in a gap the step has anyway
ALLOCATOR_STALL_PCT = 1.0
CHURN_REMEDIES = (
    "Remove torch.cuda.empty_cache() from the loop: it hands the cached blocks back (cudaFree, which "
    "synchronises the device) and the next step allocates them again (cudaMalloc)",
    "Keep tensor shapes steady across steps: pad or bucket variable-length batches to a few fixed sizes, so "
    "that the caching allocator reuses its blocks",
    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place instead of new ones being "
    "allocated and freed)",
)
BACKWARD_OP = "autograd::engine::evaluate_function"
OPTIMIZER_RANGE = "Optimizer.step#"
GENERIC_ALLOCATING_OPS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                                    "aten::new_empty_strided", "aten::resize_"})
PHASES = ("persistent", "forward", "backward", "optimizer", "optimizer_state_new", "other")
TOP_ALLOCATORS = 5


@dataclass(frozen=True)
class StepMemory:
    step: int  # N of ProfilerStep#N
    peak_allocated: int
    peak_reserved: int
    reserved_at_peak: int
    at_start: int  # allocated when the step began
    at_end: int  # ... and when it ended
    peak_phase: str
    composition: dict  # PHASES -> bytes, summing to peak_allocated
    top: tuple  # ((op name, bytes live at the peak that the step allocated in it), ...), largest first
    # the same bytes by the innermost nn.Module call around their allocation ((module, bytes), ...), largest
    # first, and the bytes allocated outside any module (the backward's thread, the optimizer, the loop);
    # None for a trace without module frames (recorded without with_stack: with_modules records none for an
    # eager model)
    modules: tuple | None = None
    outside_modules: int = 0
    largest_allocation: int = 0  # the largest single block the step asked the allocator for (bytes)

    @property
    def fragmentation(self) -> int:
        return max(self.reserved_at_peak - self.peak_allocated, 0)

    def to_dict(self) -> dict:
        return {"step": self.step, "peak_allocated_gib": _gib(self.peak_allocated),
                "peak_reserved_gib": _gib(self.peak_reserved), "at_start_gib": _gib(self.at_start),
                "at_end_gib": _gib(self.at_end), "peak_phase": self.peak_phase,
                "composition_gib": {k: _gib(v) for k, v in self.composition.items()},
                "fragmentation_gib": _gib(self.fragmentation),
                "largest_allocation_gib": _gib(self.largest_allocation),
                "top_allocators": [{"name": n, "gib": _gib(b)} for n, b in self.top],
                **({} if self.modules is None else {
                    "top_modules": [{"name": n, "gib": _gib(b)} for n, b in self.modules],
                    "outside_modules_gib": _gib(self.outside_modules)})}


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "cuda:0", "cpu"
    capacity: int | None  # bytes (GPU: deviceProperties' totalGlobalMem); None for the CPU
    steps: tuple[StepMemory, ...]
    creep_bytes_per_step: float | None  # the slope of allocated at the steps' starts (None: too few steps)
    allocator_calls_per_step: float
    allocator_ms_per_step: float
    allocator_syncs_per_step: float
    allocator_every_step: bool = False  # allocator calls in each of the steps
    batch_scale: float | None = None  # how many times the batch could grow (prediction), GPU only
    # what of the peak step's memory grows with its batch (_scaling): (fixed bytes, batch-scaled bytes) at each
    # moment that can be its peak at a larger batch; and the same with the room each moment needs for its own
    # new block beside what is live then
    scaling: tuple = ()
    room: tuple = ()

    @property
    def peak(self) -> StepMemory:
        return max(self.steps, key=lambda s: s.peak_allocated)

    @property
    def peak_reserved(self) -> int:
        return max(s.peak_reserved for s in self.steps)

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.peak_reserved

    @property
    def headroom_pct(self) -> float | None:
        return None if self.capacity is None else 100.0 * self.headroom / self.capacity

    @property
    def used_pct(self) -> float | None:
        return None if self.capacity is None else 100.0 * self.peak_reserved / self.capacity

    def to_dict(self) -> dict:
        p = self.peak
        out = {"device": self.device, "capacity_gib": _gib(self.capacity),
               "peak_allocated_gib": _gib(p.peak_allocated), "peak_reserved_gib": _gib(self.peak_reserved),
               "headroom_gib": _gib(self.headroom), "headroom_pct": _round(self.headroom_pct),
               "fragmentation_gib": _gib(p.fragmentation),
               "fragmentation_pct": _round(100.0 * p.fragmentation / p.reserved_at_peak if p.reserved_at_peak
                                           else 0.0),
               "creep_mib_per_step": _round(None if self.creep_bytes_per_step is None
                                            else self.creep_bytes_per_step / MIB),
               "allocator_calls_per_step": _round(self.allocator_calls_per_step),
               "allocator_ms_per_step": _round(self.allocator_ms_per_step),
               "allocator_syncs_per_step": _round(self.allocator_syncs_per_step),
               "batch_scale_predicted": _round(self.batch_scale),
               "steps": [s.to_dict() for s in self.steps]}
        return out


@dataclass(frozen=True)
class MemoryReport:
    devices: tuple[DeviceMemory, ...]
    findings: tuple[Finding, ...] = field(default=())
    # the allocator's counters over the run's unprofiled steps (capture/memory_stats.py KEYS, from the
    # telemetry of stepscope.schedule or the trainer), when the run measured them
    measured: dict = field(default_factory=dict)

    def device(self, name: str) -> DeviceMemory | None:
        return next((d for d in self.devices if d.device == name), None)

    def to_dict(self) -> dict:
        out = {"devices": [d.to_dict() for d in self.devices], "findings": [f.to_dict() for f in self.findings]}
        if self.measured:
            out["measured"] = {k: _round(v) for k, v in self.measured.items()}
        return out

    def lines(self, top: bool = True) -> list[str]:
        """One line per device (peak, headroom, composition, fragmentation), with ``top`` one for its top
        allocating ops, and one for its top allocating modules where the trace has module frames."""
        out = []
        for d in self.devices:
            p = d.peak
            cap = (f" of {d.capacity / GIB:.1f} GiB, headroom {size(d.headroom)} ({d.headroom_pct:.0f}%)"
                   if d.capacity is not None else "")
            parts = ", ".join(f"{k} {size(v)}" for k, v in p.composition.items() if v)
            reserved = f", {size(d.peak_reserved)} reserved" if d.peak_reserved else ""
            free = f"; reserved but free {size(p.fragmentation)}" if p.reserved_at_peak else ""
            out.append(f"memory {d.device}: peak {size(p.peak_allocated)} allocated{reserved}{cap}; at the "
                       f"peak (step {p.step}, {p.peak_phase}): {parts}{free}")
            if top and p.top:
                out.append("memory top allocators at the peak: " + ", ".join(
                    f"{n} {b / MIB:.0f} MiB" for n, b in p.top))
            if p.modules:
                out.append("memory top modules at the peak: " + ", ".join(
                    f"{n} {b / MIB:.0f} MiB" for n, b in p.modules) + f" (outside any module: "
                    f"{p.outside_modules / MIB:.0f} MiB)")
        m = self.measured
        if m:
            out.append(f"memory without the profiler (the run's own counters): peak {_mib(m, 'mem_peak_allocated_mib')} "
                       f"allocated, {_mib(m, 'mem_peak_reserved_mib')} reserved; {m.get('mem_alloc_retries', 0):g} "
                       f"allocation retries, {m.get('mem_ooms', 0):g} out-of-memory errors")
        return out


def size(b: float) -> str:
    """Bytes as GiB from 1 GiB up, else MiB."""
    return f"{b / GIB:.2f} GiB" if abs(b) >= GIB else f"{b / MIB:.1f} MiB"


def _mib(m: dict, key: str) -> str:
    return f"{m[key] / 1024:.2f} GiB" if key in m else "?"


def _gib(v) -> float | None:
    return None if v is None else round(v / GIB, 4)


def _round(v):
    return round(v, 4) if isinstance(v, float) else v


@dataclass(frozen=True)
class MemoryDevices:
    """What the memory section takes from a trace (memory_devices): each device's steps, and the devices'
    capacities; the run's own counters are added by memory_section."""
    devices: tuple[DeviceMemory, ...]
    capacities: tuple[tuple[int, int], ...]  # trace.device_memory: (device id, bytes)


def memory_section(found: MemoryDevices, telemetry: dict | None) -> MemoryReport | None:
    """The memory section: the trace's devices (memory_devices) with the run's own counters from ``telemetry``
    (its ``mem_*`` keys), and their findings; None with neither [memory] events nor such counters. The
    counters are the run's, so a trace's devices are made once (span.SpanEvidence) for any telemetry."""
    measured = {k: v for k, v in (telemetry or {}).items() if k.startswith("mem_")}
    devices = list(found.devices)
    if not devices and not measured:
        return None
    return MemoryReport(found.devices, tuple(memory_findings(devices) + measured_findings(measured, devices,
                                                                                          found.capacities)),
                        measured)


@gc_paused()  # it makes columns of every [memory] event: no collector passes over the trace's millions of events
def memory_devices(trace: ParsedTrace, windows: list[StepWindow]) -> MemoryDevices:
    """The memory of the steps ``windows`` (the kept ones) per device, from the trace's [memory] events."""
    capacities = tuple(trace.device_memory)
    if not trace.memory or not windows:
        return MemoryDevices((), capacities)
    cols = MemoryColumns.of(trace.memory)
    kind = np.asarray(cols.field("device_type"), dtype=np.int64)
    dev_id = np.where(kind != 0, np.asarray(cols.field("device_id"), dtype=np.int64), -1)
    kind = np.where(kind != 0, kind, 0)
    by_device = {(k, d): np.flatnonzero((kind == k) & (dev_id == d)) for k, d in _pairs(kind, dev_id)}
    phases = _phases(trace, windows)
    owners = _Owners(trace)
    modules = _Modules(trace)
    by_id = dict(capacities)
    calls = _allocator_calls(trace, windows)
    devices = []
    if any(kind != 0 for kind, _ in by_device):  # a GPU run: its CPU samples are pinned buffers and scalars
        by_device = {k: v for k, v in by_device.items() if k[0] != 0}
    for (kind, dev_id), samples in sorted(by_device.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        dev = _Device.of(cols, samples)
        steps = tuple(_device_steps(dev, windows, phases, owners, modules))
        if not steps:
            continue
        top = max(steps, key=lambda s: s.peak_allocated)  # DeviceMemory.peak
        i = next(i for i, w in enumerate(windows) if w.number == top.step)
        scaling, room = _scaling(dev, windows[i], phases[i], top)
        gpu = kind != 0
        capacity = by_id.get(dev_id) if gpu else None
        if gpu and capacity is None and len(by_id) == 1:
            capacity = next(iter(by_id.values()))
        n = len(windows)
        count, ms, syncs, every = calls if gpu else (0, 0.0, 0, False)
        d = DeviceMemory(f"cuda:{dev_id}" if gpu else "cpu", capacity, steps, _creep(steps),
                         count / n, ms / n, syncs / n, every, scaling=scaling, room=room)
        d = DeviceMemory(**{**d.__dict__, "batch_scale": batch_scale(d)})
        devices.append(d)
    return MemoryDevices(tuple(devices), capacities)


def _pairs(kind: np.ndarray, dev_id: np.ndarray) -> set[tuple[int, int]]:
    """The distinct (kind, id) pairs of the samples' devices: counted in one bincount where both are small, as
    they are (a device type and an index), else a set of every sample's pair."""
    if kind.size and kind.min() >= 0 and kind.max() < 256 and dev_id.min() >= -1 and dev_id.max() < 4096:
        present = np.flatnonzero(np.bincount(kind * 4097 + dev_id + 1)).tolist()
        return {(k // 4097, k % 4097 - 1) for k in present}
    return set(zip(kind.tolist(), dev_id.tolist()))


_BACKWARD, _OPTIMIZER, _GENERIC = 1, 2, 4  # the bits of _op_kinds


@per_trace
def _op_kinds(trace: ParsedTrace) -> np.ndarray:
    """Per op, what its name makes it, as bits: a backward op (_BACKWARD), an optimizer range (_OPTIMIZER), a
    generic allocation op (_GENERIC); each distinct name judged once (columns.op_name_codes)."""
    codes, table = op_name_codes(trace)
    bits = np.fromiter((_BACKWARD * n.startswith(BACKWARD_OP) | _OPTIMIZER * n.startswith(OPTIMIZER_RANGE)
                        | _GENERIC * (n in GENERIC_ALLOCATING_OPS) for n in table), np.int8, len(table))
    return bits[codes]


def _phases(trace: ParsedTrace, windows: list[StepWindow]) -> list[tuple]:
    """Per step: (backward start, backward end, the optimizer's ranges) within its host range."""
    cols = op_columns(trace)
    lo, hi = windows[0].host_start, windows[-1].host_end
    inside = (cols.start >= lo) & (cols.start < hi)
    kinds = _op_kinds(trace)

    def spans(bit: int) -> list[tuple[float, float]]:  # (start, end) of the ops inside whose name has ``bit``
        rows = np.flatnonzero(inside & ((kinds & bit) != 0))
        return list(zip(cols.start[rows].tolist(), cols.end[rows].tolist()))

    annotated = [(a.start, a.end) for a in trace.annotations if a.name.startswith(OPTIMIZER_RANGE)]
    optim = sorted(spans(_OPTIMIZER) + annotated)
    optim_starts = [o[0] for o in optim]
    # the backward ops sorted by (start, end), as their pairs sort; a window's are the slice [a, b) of them,
    # its backward from the first one's start to the latest end among them (every window's at once)
    rows = np.flatnonzero(inside & ((kinds & _BACKWARD) != 0))
    order = np.lexsort((cols.end[rows], cols.start[rows]))
    starts, ends = cols.start[rows][order], np.append(cols.end[rows][order], -np.inf)
    a = np.searchsorted(starts, np.array([w.host_start for w in windows], dtype=np.float64), side="left")
    b = np.searchsorted(starts, np.array([w.host_end for w in windows], dtype=np.float64), side="left")
    latest = np.maximum.reduceat(ends, np.column_stack((a, b)).reshape(-1))[::2].tolist()
    first = np.append(starts, np.nan)[a].tolist()
    out = []
    for w, mine, begins, ends_at in zip(windows, (b > a).tolist(), first, latest):
        # the optimizer's ranges sorted by start: a window's are one slice of them
        ranges = optim[bisect_left(optim_starts, w.host_start):bisect_left(optim_starts, w.host_end)]
        out.append((begins if mine else None, ends_at if mine else None, ranges))
    return out


_STEP_PHASES = ("forward", "backward", "optimizer", "other")  # the codes of _step_phase_codes


class _Device(NamedTuple):
    """A device's samples as columns, sorted by time. ``addr`` and ``tid``, the blocks' addresses and the
    allocating threads, are int64 arrays: the values themselves, or (a thread's name, a number beyond int64)
    codes (_coded), a thread's into ``threads`` (_thread_of)."""
    ts: np.ndarray
    total: np.ndarray
    reserved: np.ndarray
    nbytes: np.ndarray
    addr: np.ndarray
    tid: np.ndarray
    threads: list

    @classmethod
    def of(cls, cols: MemoryColumns, rows: np.ndarray) -> _Device:
        """The device's samples (``rows`` of ``cols``), sorted by time."""
        t = np.asarray(cols.field("ts"), dtype=np.float64)[rows]
        order = rows[np.argsort(t, kind="stable")]
        num = lambda name: np.asarray(cols.field(name), dtype=np.int64)[order]  # noqa: E731
        threads, tid = _coded(cols.field("tid"), order)
        return cls(np.sort(t, kind="stable"), num("total_allocated"), num("total_reserved"), num("bytes"),
                   _coded(cols.field("addr"), order)[1], tid, threads)


def _coded(column, order: np.ndarray) -> tuple[list, np.ndarray]:
    """A column's values at ``order`` as (the distinct values, each row's code into them); an int64 array's
    values are their own codes (the list then empty), others (a thread's name, an integer beyond int64) are
    coded in order of first appearance."""
    if isinstance(column, np.ndarray) and column.dtype == np.int64:
        return [], column[order]
    values = list(map(column.__getitem__, order.tolist()))
    code: dict = {}
    codes = np.fromiter((code.setdefault(v, len(code)) for v in values), dtype=np.int64, count=len(values))
    return list(code), codes


def _thread_of(dev: _Device, code: int):
    """The thread a code of ``dev.tid`` stands for."""
    return dev.threads[code] if dev.threads else code


def _bounds(dev: _Device, windows: list[StepWindow]) -> tuple[np.ndarray, np.ndarray]:
    """The device's samples in each window's host range, as the slices [lo, hi) (two arrays)."""
    lo = np.searchsorted(dev.ts, np.array([w.host_start for w in windows], dtype=np.float64) - 1e-9,
                         side="right")
    return lo, np.searchsorted(dev.ts, np.array([w.host_end for w in windows], dtype=np.float64), side="right")


def _device_steps(dev: _Device, windows: list[StepWindow], phases: list[tuple], owners: _Owners,
                  modules: _Modules) -> list[StepMemory]:
    """The memory of each step of ``windows`` (with its ``phases``, _phases) on the device, in their order; a
    step without a sample on it has none. Every step at once: each figure is a segment's reduction over the
    steps' samples laid end to end (a step's are the slice _bounds gives), and the blocks live at each step's
    peak are found, and given their owners, for all steps together (tests/reference/step_memory.py is the
    same step by step)."""
    lo, hi = _bounds(dev, windows)
    some = np.flatnonzero(lo < hi)
    if not len(some):
        return []
    lo, hi = lo[some], hi[some]
    length = hi - lo
    off = np.cumsum(length) - length  # each step's first position in the samples laid end to end
    seg = np.repeat(np.arange(len(some)), length)
    rel = np.arange(len(seg)) - off[seg]  # a position's index in its step
    rows = lo[seg] + rel
    total, nbytes = dev.total[rows], dev.nbytes[rows]
    before = np.maximum(lo - 1, 0)
    at_start = np.where(lo > 0, dev.total[before], dev.total[lo] - dev.nbytes[lo])
    top = np.maximum.reduceat(total, off)
    first_top = np.minimum.reduceat(np.where(total == top[seg], rel, len(seg)), off)  # np.argmax's
    peaked = top > at_start
    peak = np.where(peaked, top, at_start)
    peak_i = lo + first_top
    peak_reserved = np.maximum(np.maximum.reduceat(dev.reserved[rows], off),
                               np.where(lo > 0, dev.reserved[before], 0))
    reserved_at_peak = np.where(peaked, dev.reserved[peak_i], np.where(lo > 0, dev.reserved[before],
                                                                       dev.reserved[lo]))
    codes = _step_phase_codes(dev.ts[rows], seg, [phases[i] for i in some.tolist()])
    deltas = total - np.concatenate(([0], total[:-1]))
    deltas[off] = total[off] - at_start
    end = np.where(peaked, first_top + 1, 0)  # each step's samples up to its peak
    grown = rel < end[seg]
    sums = np.bincount(seg[grown] * 4 + codes[grown], weights=deltas[grown],
                       minlength=4 * len(some)).reshape(-1, 4)
    optim_kept = np.add.reduceat(np.where(codes == 2, deltas, 0), off)
    at_end = dev.total[hi - 1]
    largest = np.maximum(np.maximum.reduceat(nbytes, off), 0)
    tops, by_module = _live_owners(dev, rows[grown], seg[grown], len(some), owners, modules)
    out = []
    for s, i in enumerate(some.tolist()):
        growth = {name: int(round(x)) for name, x in zip(_STEP_PHASES, sums[s].tolist())}
        growth = {"forward": growth["forward"], "backward": growth["backward"], "optimizer": growth["optimizer"],
                  "optimizer_state_new": 0, "other": growth["other"]}
        start, stop, kept = int(at_start[s]), int(at_end[s]), int(optim_kept[s])
        if kept >= STATE_NEW_MIN_BYTES and stop > start:
            state_new = max(min(growth["optimizer"], kept, stop - start), 0)
            growth["optimizer"] -= state_new
            growth["optimizer_state_new"] = state_new
        mods, outside = None, 0
        if modules:
            outside = by_module[s].pop(None, 0)
            mods = tuple(sorted(by_module[s].items(), key=lambda kv: -kv[1])[:TOP_ALLOCATORS])
        phase = _STEP_PHASES[int(codes[off[s] + first_top[s]])] if peaked[s] else "step start"
        out.append(StepMemory(windows[i].number, int(peak[s]), int(peak_reserved[s]), int(reserved_at_peak[s]),
                              start, stop, phase, {"persistent": start, **growth},
                              tuple(sorted(tops[s].items(), key=lambda kv: -kv[1])[:TOP_ALLOCATORS]), mods,
                              outside, int(largest[s])))
    return out


def _step_phase_codes(ts: np.ndarray, seg: np.ndarray, phases: list[tuple]) -> np.ndarray:
    """Each time's phase, as an index of _STEP_PHASES, for the steps' samples laid end to end (``seg``: each
    one's step, an index of ``phases``, _phases): inside one of its step's optimizer ranges, optimizer; else
    before its backward, forward (without a backward: before its first optimizer range, and other after it);
    else backward up to its end, and other after. A range is looked up among its own step's only: each range's
    start, and each time, is ranked among all the ranges' starts, which orders (step, start) pairs and (step,
    time) pairs alike as integers."""
    n = len(phases)
    nan = float("nan")
    b0 = np.array([p[0] if p[0] is not None else nan for p in phases], dtype=np.float64)
    b1 = np.array([p[1] if p[1] is not None else nan for p in phases], dtype=np.float64)
    first = np.array([p[2][0][0] if p[2] else np.inf for p in phases], dtype=np.float64)
    has_b = ~np.isnan(b0)
    counts = np.array([len(p[2]) for p in phases], dtype=np.int64)
    codes = np.where(has_b[seg], np.where(ts < b0[seg], 0, np.where(ts <= b1[seg], 1, 3)),
                     np.where(counts[seg] > 0, np.where(ts < first[seg], 0, 3), 0))
    if not counts.any():
        return codes
    starts = np.array([o[0] for p in phases for o in p[2]], dtype=np.float64)
    ends = np.array([o[1] for p in phases for o in p[2]], dtype=np.float64)
    owner = np.repeat(np.arange(n), counts)  # each range's step
    ranked = np.sort(starts)
    wide = len(starts) + 1
    keys = owner * wide + np.searchsorted(ranked, starts, side="right")
    k = np.searchsorted(keys, seg * wide + np.searchsorted(ranked, ts, side="right"), side="right") - 1
    mine = (k >= 0) & (owner[np.maximum(k, 0)] == seg)
    ends_ranked = np.sort(ends)  # the running largest end within each step, as ranks of the ends
    end_rank = np.searchsorted(ends_ranked, ends)
    running = np.maximum.accumulate(owner * len(ends_ranked) + end_rank) - owner * len(ends_ranked)
    inside = mine & (ts < ends_ranked[running][np.maximum(k, 0)])
    return np.where(inside, 2, codes)


def _live_owners(dev: _Device, rows: np.ndarray, seg: np.ndarray, steps: int, owners: _Owners,
                 modules: _Modules) -> tuple[list[dict], list[dict]]:
    """Per step, the bytes of the blocks it allocated that are still live at its peak, by owning op and (where
    the trace has module frames) by module: ``rows``, the device's samples of each step (``seg``) up to its
    peak, in order. A block is live when nothing else touches its address before the peak; the owners are
    summed in the order a walk of the samples would meet them (so ties sort alike): by thread in order of
    first appearance, each thread's blocks in the order their addresses were (last) taken."""
    touch = dev.nbytes[rows] != 0
    rows, seg = rows[touch], seg[touch]
    if not len(rows):
        return [{} for _ in range(steps)], [{} for _ in range(steps)]
    addr, nbytes = dev.addr[rows], dev.nbytes[rows]
    order = np.lexsort((addr, seg))  # stable: each step's touches of one address together, in time order
    a, s, b = addr[order], seg[order], nbytes[order]
    same = (a[1:] == a[:-1]) & (s[1:] == s[:-1])
    last = np.append(~same, True)  # no later touch of its address in the step
    # an address's place in the walk: where it was taken after its last free (a block allocated again
    # without a free between keeps the place of the first)
    taken = np.ones(len(a), dtype=bool)
    taken[1:] = ~(same & (b[:-1] > 0))
    place = order[np.maximum.accumulate(np.where(taken, np.arange(len(a)), 0))]
    live = last & (b > 0)
    at, rows_live, seg_live = place[live], rows[order[live]], s[live]
    walk = np.lexsort((at, seg_live))
    rows_live, seg_live = rows_live[walk], seg_live[walk]
    tid = dev.tid[rows_live]
    distinct, tid_code = np.unique(tid, return_inverse=True)
    _, first, inverse = np.unique(seg_live * len(distinct) + tid_code.reshape(-1), return_index=True,
                                  return_inverse=True)
    by_thread = np.lexsort((np.arange(len(rows_live)), first[inverse.reshape(-1)]))
    rows_live, seg_live, tid = rows_live[by_thread], seg_live[by_thread], tid[by_thread]
    ts = dev.ts[rows_live]
    op = np.empty(len(rows_live), dtype=object)
    module = np.empty(len(rows_live), dtype=object)
    for code in distinct.tolist():  # the same values as tid's, reordered above
        pick = np.flatnonzero(tid == code)
        thread = _thread_of(dev, code)
        op[pick] = owners.owners(thread, ts[pick])
        if modules:
            module[pick] = modules.owners(thread, ts[pick])
    size = dev.nbytes[rows_live]
    return (_summed(seg_live, op.tolist(), size, steps),
            _summed(seg_live, module.tolist(), size, steps) if modules else [{} for _ in range(steps)])


def _summed(seg: np.ndarray, names: list, size: np.ndarray, steps: int) -> list[dict]:
    """Per step, {name: its blocks' bytes}, the names in order of first appearance: what adding each block's
    ``size`` to a dict of its step (``seg``) under its name, in order, gives, summed per name at once."""
    code = {name: k for k, name in enumerate(dict.fromkeys(names))}
    key = seg * len(code) + np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=len(names))
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    sums = np.zeros(len(first), dtype=np.int64)
    np.add.at(sums, inverse.reshape(-1), size)
    out: list[dict] = [{} for _ in range(steps)]
    order = np.argsort(first)  # each step's names in order of first appearance
    at = first[order]
    for step, k, total in zip(seg[at].tolist(), at.tolist(), sums[order].tolist()):
        out[step][names[k]] = total
    return out


def _scaling(dev: _Device, w: StepWindow, phases: tuple, p: StepMemory) -> tuple[tuple, tuple]:
    """What of a step's memory grows with its batch: the (fixed, scaled) bytes of each moment of the step that
    can be its peak at some larger batch (_envelope), and the same with the room each moment needs beside its
    peak, its own new block counted again where that block grows with the batch.

    The gradients are the blocks that the backward allocated and that are still live when the optimizer (its
    first range) begins: they have the parameters' sizes, not the batch's, and so do the
    optimizer's own temporaries. Outside the optimizer, what the step holds above its start scales, less the
    gradients live at that moment; inside it, at its largest, only what the forward allocated and still holds
    scales. Without an optimizer range, all the growth scales. The optimizer state a first step creates is held
    from the start by the steps after it.

    The room: a block is asked for at one moment and must be one contiguous piece. Where the allocator's cached
    free memory is split into smaller pieces (a caching allocator's segments, freed by blocks of about the same
    size before), the block needs fresh memory of its own beside what is live then: a block allocated near the
    peak needs room for itself twice, one allocated while little is live does not. Worked out for the device's
    peak step only (``p``, in window ``w`` with its ``phases``): the prediction reads no other."""
    lo, hi = (int(x[0]) for x in _bounds(dev, [w]))
    codes, optim = _step_phase_codes(dev.ts[lo:hi], np.zeros(hi - lo, dtype=np.int64), [phases]), phases[2]
    at_start, state_new = p.at_start, p.composition["optimizer_state_new"]
    total = dev.total[lo:hi]
    nbytes = dev.nbytes[lo:hi].tolist()
    addr = dev.addr[lo:hi].tolist()
    inside = codes == 2
    begins = int(np.searchsorted(dev.ts[lo:hi], optim[0][0], side="left")) if optim else len(nbytes)
    grads = {j: nbytes[j] for j in _live(nbytes, addr, begins) if codes[j] == 1} if optim else {}
    held = np.zeros(len(nbytes), dtype=np.int64)  # +bytes where a gradient is allocated, -bytes where freed
    held[list(grads)] = list(grads.values())
    freed = {addr[j]: b for j, b in grads.items()}
    for j in range(begins, len(nbytes)):
        if nbytes[j] < 0 and addr[j] in freed:
            held[j] -= freed.pop(addr[j])
    block = np.maximum(dev.nbytes[lo:hi], 0)  # each moment's new block, where it grows with the batch
    block[list(grads)] = 0
    fixed = at_start + state_new + np.cumsum(held)
    fixed, scaled, block = fixed[~inside], total[~inside] - fixed[~inside], block[~inside]
    if inside.any():
        o = int(np.flatnonzero(inside)[np.argmax(total[inside])])
        forward = sum(nbytes[j] for j in _live(nbytes, addr, o + 1) if codes[j] == 0)
        fixed, scaled, block = (np.append(fixed, int(total[o]) - forward), np.append(scaled, forward),
                                np.append(block, 0))
    return _envelope(fixed, scaled), _envelope(fixed, scaled + block)


def _envelope(fixed: np.ndarray, scaled: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The (fixed, scaled) pairs that are the largest fixed + s x scaled for some s >= 1: the upper hull of the
    points (scaled, fixed), from the one largest at s = 1 (the peak) to the one with the most that scales."""
    order = np.lexsort((-fixed, -scaled))  # most scaled first, then most fixed
    f, sc = fixed[order], scaled[order]
    keep = np.ones(len(f), dtype=bool)  # Pareto: no point with as much scaled holds more fixed
    keep[1:] = f[1:] > np.maximum.accumulate(f)[:-1]
    points = sorted(zip(sc[keep].tolist(), f[keep].tolist()))
    hull: list = []
    for x, y in points:  # the upper hull, left to right
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (y - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0])) >= 0:
            hull.pop()
        hull.append((x, y))
    if not hull:
        return ()
    k = max(range(len(hull)), key=lambda i: (hull[i][0] + hull[i][1], hull[i][0]))
    return tuple((int(y), int(x)) for x, y in hull[k:])


def _live(nbytes: list, addr: list, n: int) -> list[int]:
    """The samples among the first ``n`` whose allocation is still live after them."""
    live: dict = {}  # address -> the sample that allocated it
    for j in range(n):
        if nbytes[j] > 0:
            live[addr[j]] = j
        elif nbytes[j] < 0:
            live.pop(addr[j], None)
    return list(live.values())


_TID, _START, _END = map(itemgetter, (1, 2, 3))  # events.HostEvent's fields by position


class _Modules:
    """The innermost nn.Module call on a thread at a time (the trace's module frames: with_stack); false for a
    trace without them. A thread's frames nest (a call stack): sorted by start, each frame's parent is the
    innermost one open when it starts, so the frame around a time is the last one begun before it or, where
    that one has ended, the first of its ancestors still open."""

    def __init__(self, trace: ParsedTrace) -> None:
        frames = trace.module_frames
        self.by_tid: dict = defaultdict(list)  # thread -> its frames' indices in ``frames``, in trace order
        for k, tid in enumerate(map(_TID, frames)):
            self.by_tid[tid].append(k)
        self.start = np.fromiter(map(_START, frames), dtype=np.float64, count=len(frames))
        self.end = np.fromiter(map(_END, frames), dtype=np.float64, count=len(frames))
        self.frames = frames
        self.threads: dict = {}

    def __bool__(self) -> bool:
        return bool(self.by_tid)

    def _thread(self, tid):
        if tid not in self.threads:
            rows = np.asarray(self.by_tid.get(tid, ()), dtype=np.int64)
            rows = rows[np.lexsort((-self.end[rows], self.start[rows]))]  # by (start, -end), ties as listed
            starts, end_array = self.start[rows], self.end[rows]
            begun, ends = starts.tolist(), end_array.tolist()
            parent, open_ = [], []
            for k, s in enumerate(begun):
                while open_ and ends[open_[-1]] <= s:
                    open_.pop()
                parent.append(open_[-1] if open_ else -1)
                open_.append(k)
            named = [self.frames[k].name for k in rows.tolist()]
            module = {name: name[len(MODULE_FRAME_PREFIX):] for name in set(named)}
            names = as_objects(list(map(module.__getitem__, named)))  # gathered by owners()
            self.threads[tid] = (starts, ends, end_array, parent, names)
        return self.threads[tid]

    def owners(self, tid, ts: np.ndarray) -> np.ndarray:
        """The module around each time in ``ts`` (allocations on thread ``tid``), None outside any: an array of
        those objects."""
        starts, ends, end_array, parent, names = self._thread(tid)
        at = np.searchsorted(starts, ts, side="right") - 1
        # the frame begun last before the time is open at it: the usual case, answered for all at once
        open_ = ((at >= 0) & (end_array[np.maximum(at, 0)] > ts) if len(ends)
                 else np.zeros(len(ts), dtype=bool))
        out = np.empty(len(ts), dtype=object)  # None where nothing is put
        hit = np.flatnonzero(open_)
        out[hit] = names[at[hit]]
        times = ts.tolist()
        for i, k in zip(np.flatnonzero(~open_).tolist(), at[~open_].tolist()):
            t = times[i]
            while k >= 0 and ends[k] <= t:
                k = parent[k]
            out[i] = names[k] if k >= 0 else None
        return out


class _Owners:
    """The innermost op on a thread at a time, generic allocation ops giving way to the op around them; each
    thread's ops sorted once, when an allocation on it is first asked about."""

    def __init__(self, trace: ParsedTrace) -> None:
        self.cols = op_columns(trace)
        self.by_tid: dict = {}
        self._generic = (_op_kinds(trace) & _GENERIC) != 0  # per op: a generic allocation op

    def _thread(self, tid):
        """(op indices, starts, ends) of the thread's ops that are not generic allocation ops, by start; and the
        same of all its ops (for an allocation outside any other op)."""
        if tid not in self.by_tid:
            code = self.cols.threads.get(tid)
            if code is None:
                self.by_tid[tid] = None
            else:
                idx = np.flatnonzero(self.cols.thread == code)
                idx = idx[np.argsort(self.cols.start[idx], kind="stable")]
                keep = ~self._generic[idx]
                self.by_tid[tid] = tuple((ix, self.cols.start[ix], self.cols.end[ix]) for ix in (idx[keep], idx))
        return self.by_tid[tid]

    def owners(self, tid, ts: np.ndarray) -> np.ndarray:
        """The owner of each time in ``ts`` (allocations on thread ``tid``): an array of those names."""
        ranges = self._thread(tid)
        if ranges is None:
            return np.full(len(ts), "(no op)", dtype=object)
        (idx, starts, ends), every = ranges
        at = np.searchsorted(starts, ts, side="right") - 1
        k = np.maximum(at, 0)
        # the latest op begun before contains it: the usual case, looked up for all at once
        if len(idx):
            direct = (at >= 0) & (ends[k] > ts)
            out = self.names[idx[k]]
        else:
            direct, out = np.zeros(len(ts), dtype=bool), np.empty(len(ts), dtype=object)
        times = ts.tolist()
        for i in np.flatnonzero(~direct).tolist():
            out[i] = self._walk(ranges, times[i])
        return out

    @cached_property
    def names(self) -> np.ndarray:
        """The ops' names as an array of those objects (fastread.as_objects)."""
        return as_objects(self.cols.names)

    def _walk(self, ranges, ts: float) -> str:
        for idx, starts, ends in ranges:  # a non-generic op around it, else any op around it
            k = int(np.searchsorted(starts, ts, side="right"))
            lo = max(k - 4096, 0)
            containing = np.flatnonzero((ends[lo:k] > ts) | (ends[lo:k] == starts[lo:k]))
            if len(containing):
                return self.cols.names[idx[lo + containing[-1]]]
        return "(no op)"


@per_trace
def _allocator_events(trace: ParsedTrace) -> tuple[list, list[float]]:
    """The allocator's device calls (ALLOCATOR_CALLS) among the trace's runtime calls, sorted by start, and
    their starts: one pass over the runtime calls for both memory_devices and stall_figures."""
    rows = rows_named(trace.runtime, lambda name: name.startswith(ALLOCATOR_CALLS))
    events = sorted(events_at(trace.runtime, rows), key=lambda r: r.start)
    return events, [r.start for r in events]


def _in_window(trace: ParsedTrace, w: StepWindow) -> list:
    """The allocator's device calls that start in ``w``'s host range, by start."""
    events, starts = _allocator_events(trace)
    return events[bisect_left(starts, w.host_start):bisect_left(starts, w.host_end)]


def _allocator_calls(trace: ParsedTrace, windows: list[StepWindow]) -> tuple[int, float, int, bool]:
    """(count, ms, syncing ones, whether every step has one) of the allocator's device calls in the steps'
    host ranges."""
    count, us, syncs, steps = 0, 0.0, 0, 0
    for w in windows:
        mine = _in_window(trace, w)
        count += len(mine)
        us += sum(r.dur for r in mine)
        syncs += sum(r.name in SYNCING_ALLOCATOR_CALLS for r in mine)
        steps += bool(mine)
    return count, us / 1e3, syncs, len(windows) >= CHURN_MIN_STEPS and steps == len(windows)


class StallFigures(NamedTuple):
    """The allocator calls of the analysed steps (stall_figures): their count, host ms and cudaFree count,
    the GPU's idle inside and after them in µs, over ``steps`` steps."""
    count: int
    host_ms: float
    syncs: int
    idle_us: float
    steps: int


def stall_figures(trace: ParsedTrace, windows: list[StepWindow]) -> StallFigures | None:
    """What the allocator churn costs the steps ``windows`` (allocator calls in every analysed step, as
    allocator_churn): the GPU's idle while the host is inside a call (the host cannot queue work meanwhile),
    and after each cudaFree, which waits for the device to drain its queue, until the device's next work
    begins. The breakdown counts that idle in its host buckets (a runtime call is the host dispatching), so
    this names part of them; calls the GPU's queued work hides cost nothing. None on a CPU trace or without
    calls in every step."""
    if not trace.has_gpu or not windows:
        return None
    count, host_ms, syncs, every = _allocator_calls(trace, windows)
    if not every:
        return None
    busy = device_sets(trace)[0]
    idle_us = 0.0
    for w in windows:
        mine = _in_window(trace, w)
        held = [(r.start, min(r.end, w.host_end)) for r in mine]
        for r in mine:
            if r.name in SYNCING_ALLOCATOR_CALLS and r.end < w.host_end:
                k = bisect_right(busy.ends, r.end)  # the first device work not over yet
                held.append((r.end, min(busy.starts[k], w.host_end) if k < len(busy) else w.host_end))
        idle_us += subtract(IntervalSet(held), busy).total()
    return StallFigures(count, host_ms, syncs, idle_us, len(windows))


def stall_finding(f: StallFigures | None, step_ms: float) -> Finding | None:
    """The time finding of the figures (stall_figures), where the calls cost at least ALLOCATOR_STALL_PCT of
    ``step_ms`` (the step the verdict describes); None below that share, or without figures."""
    if f is None:
        return None
    n = f.steps
    cost = min(f.idle_us / n / 1e3, step_ms)
    pct = 100.0 * cost / step_ms if step_ms > 0 else 0.0
    if pct < ALLOCATOR_STALL_PCT:
        return None
    return Finding(ALLOCATOR_STALLS, (
        f"the step waits {cost:.2f} ms ({pct:.0f}%) on the caching allocator's device calls: {f.count / n:g} "
        f"cudaMalloc/cudaFree/cuMem* calls a step ({f.host_ms / n:.2f} ms of host time; {f.syncs / n:g} of them "
        "cudaFree, each a device synchronisation): the GPU idles inside them and, after a cudaFree, until the "
        "host queues work again (part of the GPU idle counted above)"), cost, CHURN_REMEDIES)


def _creep(steps: tuple[StepMemory, ...]) -> float | None:
    """The least-squares slope of allocated at the steps' starts, bytes per step; None for fewer than 2."""
    if len(steps) < 2:
        return None
    xs = [s.step for s in steps]
    ys = [s.at_start for s in steps]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else None


def batch_scale(d: DeviceMemory) -> float | None:
    """How many times the batch could grow before the step no longer fits the device (prediction), from the
    peak step's room (_scaling): at each moment that can be its peak, the fixed bytes stay and the scaled bytes
    grow with the batch, with the moment's new block counted again where it grows too (the fresh memory it may
    need beside what is live then). CONTEXT_BYTES of the device stay outside the allocator. None for the CPU or
    a step that adds too little that scales."""
    if d.capacity is None:
        return None
    if max((scaled for _, scaled in d.scaling), default=0) < SCALE_MIN_BYTES:
        return None
    room = d.capacity - CONTEXT_BYTES
    return max(min((room - fixed) / need for fixed, need in d.room if need > 0), 0.0)


def peak_line(d: DeviceMemory, scale: float) -> tuple[int, int] | None:
    """The (fixed, scaled) bytes of the peak step's moment that is its peak at ``scale`` times the recorded
    batch (_scaling); None without a scaling."""
    return max(d.scaling, key=lambda line: line[0] + scale * line[1], default=None)


def peak_at(d: DeviceMemory, scale: float) -> float:
    """The peak allocated that the prediction expects at ``scale`` times the recorded batch: the largest of the
    peak step's moments with their scaled bytes grown (``peak_line``)."""
    line = peak_line(d, scale)
    return float(d.peak.peak_allocated) if line is None else line[0] + scale * line[1]


def room_at(d: DeviceMemory, scale: float) -> float:
    """The device memory the prediction needs at ``scale`` times the recorded batch, outside CONTEXT_BYTES: the
    expected peak with, at each moment, its own new block's fresh memory (_scaling); batch_scale is the largest
    scale whose room fits the device."""
    return max((fixed + scale * need for fixed, need in d.room), default=float(d.peak.peak_allocated))


def _scale(x: float) -> str:
    return f"at least {SCALE_SAID_MAX:.0f}x" if x >= SCALE_SAID_MAX else f"about {x:.1f}x"


def memory_findings(devices: list[DeviceMemory]) -> list[Finding]:
    """oom_risk / headroom, fragmentation, allocator_churn and memory_creep, each with its figures and remedy;
    the cost is the step time it takes where it takes any (allocator calls), else 0."""
    out = []
    for d in devices:
        p = d.peak
        if d.capacity is not None:
            if d.used_pct >= OOM_RISK_PCT:
                out.append(Finding(OOM_RISK, (
                    f"{d.device}: peak reserved {d.peak_reserved / GIB:.2f} GiB is {d.used_pct:.0f}% of the "
                    f"device's {d.capacity / GIB:.1f} GiB (step {p.step}, {p.peak_phase}): a larger batch, a "
                    "longer sequence or a fragmented moment runs out of memory"), 0.0, (
                    "Cut the step's transient memory: activation checkpointing (torch.utils.checkpoint) on the "
                    "largest blocks, bf16 autocast, a smaller micro-batch with gradient accumulation; and set "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",)))
            elif d.used_pct <= HEADROOM_PCT and d.batch_scale is not None and d.batch_scale >= 1.5:
                out.append(Finding(HEADROOM, (
                    f"{d.device}: peak reserved {d.peak_reserved / GIB:.2f} GiB of {d.capacity / GIB:.1f} GiB "
                    f"({d.used_pct:.0f}%); persistent {p.composition['persistent'] / GIB:.2f} GiB stays and "
                    f"{(p.peak_allocated - p.composition['persistent']) / GIB:.2f} GiB scales with the batch: "
                    f"the batch could grow {_scale(d.batch_scale)} (a prediction; stepscope verify re-runs "
                    "it)"), 0.0, (
                    f"Raise the batch size (it could grow {_scale(d.batch_scale)}; scale the learning rate with it) "
                    "and confirm by re-running; a larger batch often raises the GPU's share of the step",)))
        if d.device != "cpu" and p.reserved_at_peak and (
                100.0 * p.fragmentation / p.reserved_at_peak >= FRAGMENTATION_PCT
                and p.fragmentation >= FRAGMENTATION_MIN_BYTES):
            out.append(Finding(FRAGMENTATION, (
                f"{d.device}: at the peak {p.fragmentation / GIB:.2f} GiB is reserved but not allocated "
                f"({100.0 * p.fragmentation / p.reserved_at_peak:.0f}% of reserved): the caching allocator "
                "holds segments that its blocks do not fill"), 0.0, (
                "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments grow in place instead of "
                "splitting); keep shapes steady (pad or bucket variable-length batches)",)))
        if d.allocator_every_step:
            out.append(Finding(ALLOCATOR_CHURN, (
                f"{d.device}: {d.allocator_calls_per_step:g} allocator calls (cudaMalloc/cudaFree/cuMem*) a "
                f"step, {d.allocator_ms_per_step:.2f} ms of host time, {d.allocator_syncs_per_step:g} device "
                "synchronisations (cudaFree): the caching allocator grows or gives memory back inside "
                "steady steps"), d.allocator_ms_per_step, CHURN_REMEDIES))
        c = d.creep_bytes_per_step
        starts = [s.at_start for s in d.steps]
        if (c is not None and len(d.steps) >= CREEP_MIN_STEPS and c >= CREEP_MIN_BYTES_PER_STEP
                and all(b > a for a, b in zip(starts, starts[1:]))):
            reach = ""
            if d.capacity is not None:
                left = (d.capacity - CONTEXT_BYTES - d.peak_reserved) / c
                reach = f"; at this rate it fills the device about {max(left, 0):.0f} steps after step {d.steps[-1].step}"
            out.append(Finding(MEMORY_CREEP, (
                f"{d.device}: allocated at the start of each step rises by {c / MIB:.1f} MiB a step "
                f"({starts[0] / GIB:.2f} to {starts[-1] / GIB:.2f} GiB over steps {d.steps[0].step}-"
                f"{d.steps[-1].step}){reach}"), 0.0, (
                "Something keeps tensors across steps: a loss or output appended to a list without .item() or "
                ".detach(), a growing cache, hooks holding activations; record torch.cuda.memory._record_memory_"
                "history() and compare two snapshots a few steps apart",)))
    return out


def measured_findings(m: dict, devices: list[DeviceMemory], capacities: tuple[tuple[int, int], ...]) -> list[Finding]:
    """From the run's own counters over its unprofiled steps: allocation retries and out-of-memory errors (the
    allocator ran short and emptied its cache, a step stalls and synchronises for it), and creep of allocated
    across the windows, where the trace's few steps did not already say so."""
    out = []
    retries, ooms = m.get("mem_alloc_retries", 0.0), m.get("mem_ooms", 0.0)
    if retries > 0 or ooms > 0:
        out.append(Finding(ALLOC_RETRIES, (
            f"the caching allocator ran short {retries:g} times over the run (it freed its cached blocks and "
            f"retried, stalling the step and synchronising the device) and raised {ooms:g} out-of-memory errors: "
            "memory is at the device's limit"), 0.0, (
            "Cut the step's peak (activation checkpointing, bf16 autocast, a smaller micro-batch with gradient "
            "accumulation) and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",)))
    creep = m.get("mem_creep_mib_per_step", 0.0)
    if creep * MIB >= CREEP_MIN_BYTES_PER_STEP and not any(f.id == MEMORY_CREEP
                                                          for f in memory_findings(devices)):
        capacity = next((c for _, c in capacities), None)
        reach = ""
        if capacity is not None and "mem_peak_reserved_mib" in m:
            left = (capacity - CONTEXT_BYTES - m["mem_peak_reserved_mib"] * MIB) / (creep * MIB)
            reach = f"; at this rate it fills the device in about {max(left, 0):.0f} steps"
        out.append(Finding(MEMORY_CREEP, (
            f"allocated between steps rises by {creep:.1f} MiB a step across the run's windows of unprofiled "
            f"steps (now {m.get('mem_allocated_mib', 0) / 1024:.2f} GiB){reach}"), 0.0, (
            "Something keeps tensors across steps: a loss or output appended to a list without .item() or "
            ".detach(), a growing cache, hooks holding activations; compare two allocator snapshots a few steps "
            "apart",)))
    return out


# ranks of one job whose peaks differ by this ratio (largest over smallest) and this many bytes: imbalance
IMBALANCE_RATIO = 1.10
IMBALANCE_MIN_BYTES = 256 << 20


def rank_imbalance(by_rank: dict) -> dict | None:
    """Across the ranks of a profiling cycle (rank -> its MemoryReport or None): each rank's peak allocated on
    its first GPU, and a ``memory_imbalance`` finding when the largest is IMBALANCE_RATIO times the smallest
    and IMBALANCE_MIN_BYTES above it (the largest rank runs out of memory first: uneven shards, a rank that
    keeps more, rank 0's extra work). None unless every rank has a GPU's memory."""
    peaks = {}
    for rank, mem in by_rank.items():
        dev = next((d for d in mem.devices if d.device != "cpu"), None) if mem is not None else None
        if dev is None:
            return None
        peaks[rank] = dev.peak.peak_allocated
    hi = max(peaks, key=peaks.get)
    lo = min(peaks, key=peaks.get)
    ratio = peaks[hi] / peaks[lo] if peaks[lo] else None
    findings = []
    if ratio is not None and ratio >= IMBALANCE_RATIO and peaks[hi] - peaks[lo] >= IMBALANCE_MIN_BYTES:
        findings.append(Finding(MEMORY_IMBALANCE, (
            f"rank {hi} peaks at {size(peaks[hi])} allocated, rank {lo} at {size(peaks[lo])} ({ratio:.2f}x): "
            f"rank {hi} runs out of memory first"), 0.0, (
            "Even out what the ranks hold: shard evenly (FSDP/ZeRO), keep rank 0's extra work (logging, "
            "evaluation, checkpoint gathering) off the GPU or out of the step",)).to_dict())
    return {"peak_allocated_gib": {str(r): _gib(v) for r, v in sorted(peaks.items())},
            "imbalance": _round(ratio), "findings": findings}

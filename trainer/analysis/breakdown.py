"""Where each step's time goes: GPU busy, or GPU idle and why (what the host was doing meanwhile).

GPU traces. Inside each step window (see steps.py) the GPU is busy where some kernel/memcpy/memset runs on any
stream; the rest are idle gaps. Each gap is judged by the device activity that ends it:

- its launch finished before the gap began: the work was already queued, so the GPU itself paused
  (dependencies, the ~1 µs between kernels of a CUDA graph, a memcpy engine turn-around): ``device_idle``.
  Except in a gap longer than such a turn-around (``DEVICE_TURNAROUND_US``) the part during which the host
  is blocked in a sync counts as ``sync``: the host waits on the GPU and the GPU runs nothing, so that time
  is the sync's cost, not the device's own idle;
- otherwise the GPU waited for the host, and the gap's time is split by what the host was doing, instant by
  instant, on any of its threads, first match wins:
  ``sync``  inside a blocking call (cudaStreamSynchronize/DeviceSynchronize/EventSynchronize, blocking
            cudaMemcpy, a D2H copy to pageable memory, which is what `.item()` of a GPU tensor runs);
  ``data``  inside a DataLoader iteration or our ``data`` range;
  ``launch`` inside a torch op or a CUDA runtime call (dispatching ops, launching kernels), or inside the
            model's own work between them: an ``nn.Module`` call, the autograd engine's backward (both seen
            in with_stack traces) or an optimizer's step or zero_grad (``model_scope``). The Python between a
            model's ops is part of dispatching them: a CUDA graph or torch.compile removes it with the launches;
  ``other_host`` anything else: the loop's own Python outside the model (metrics, logging, a framework's
            bookkeeping), the GIL, sleeping.
  After a sync the queue is empty and the GPU waits while the host dispatches the next op: that launch time,
  inside a gap that overlaps a sync, is recovery from the sync and counts as ``sync``.
- a gap at the end of the window that no device activity ends is host-caused too.
Busy time has three buckets: ``gpu_busy`` (kernels and memsets), ``transfer`` (host<->device copies that no
kernel overlaps: copies are not compute) and ``communication`` (collective kernels, ``nccl*``, that nothing
else overlaps). The buckets add up to the window exactly.

CPU-only traces. The host's step range is split, first match wins, into ``data``, ``cpu_ops`` (inside a torch
op on any thread, collectives excluded), ``communication`` (inside a gloo/nccl collective or c10d op, no
compute op running) and ``other_host``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from stepscope.analysis.columns import (
    device_columns,
    launch_columns,
    op_columns,
    op_name_codes,
    runtime_columns,
)
from stepscope.analysis.events import (
    MODEL_ANNOTATION_PREFIXES,
    SYNC_CALLS,
    HostEvent,
    ParsedTrace,
    correlations_of,
    events_at,
    is_comm,
    rows_named,
)
from stepscope.analysis.intervals import IntervalSet, pieces_by_priority, subtract
from stepscope.analysis.per_trace import per_trace
from stepscope.analysis.steps import StepWindow, window_bounds
from stepscope.analysis.vocabulary import (
    COMMUNICATION,
    CPU_BUCKETS,
    CPU_OPS,
    DATA,
    DEVICE_IDLE,
    GPU_BUCKETS,
    GPU_BUSY,
    LAUNCH,
    OTHER_HOST,
    SYNC,
    TRANSFER,
)

# A sync that returned at most this long before a gap began still caused it: CPU and GPU clocks in a trace
# are aligned to a few µs, and a sync returns only once the GPU has drained its queue.
SYNC_RECOVERY_TOLERANCE_US = 5.0
# The longest pause between already-queued device work that is the device's own turn-around even while the
# host waits in a sync. The longest such pause under a sync in tests/data is 9.2 µs (a replayed CUDA graph
# on an H200; most are 1-3 µs).
DEVICE_TURNAROUND_US = 20.0


@dataclass(frozen=True)
class Breakdown:
    """Time per bucket, summed over the steps (µs). ``buckets`` keys are GPU_BUCKETS or CPU_BUCKETS."""

    buckets: dict[str, float]
    total_us: float
    steps: int

    def ms_per_step(self, bucket: str) -> float:
        return self.buckets[bucket] / self.steps / 1e3

    def pct(self, bucket: str) -> float:
        return 100.0 * self.buckets[bucket] / self.total_us if self.total_us > 0 else 0.0


@dataclass(frozen=True)
class HostSets:
    """What the host is doing, as unions over all its threads."""

    sync: IntervalSet
    data: IntervalSet
    busy: IntervalSet  # inside a non-collective torch op, a runtime call or the model's own work (model_scope)
    compute_ops: IntervalSet  # inside a non-collective torch op
    comm: IntervalSet  # inside a collective annotation or c10d op


@per_trace
def sync_primitives(trace: ParsedTrace) -> list[HostEvent]:
    """Host calls that block until the GPU catches up (see module doc), in time order."""
    copies = map(trace.device.__getitem__, np.flatnonzero(device_columns(trace).is_copy).tolist())
    blocking_copies = {d.correlation for d in copies if "DtoH" in d.name and "Pageable" in d.name}
    # Only a runtime call makes the host wait for the device: `.item()` of a GPU tensor shows one under it
    # (a device-to-host copy and a stream synchronize), `.item()` of a CPU tensor (an optimizer's step
    # counter, say) shows none and is no sync.
    runtime = trace.runtime
    rows = rows_named(runtime, SYNC_CALLS.__contains__)
    if blocking_copies:
        copies = np.fromiter(map(blocking_copies.__contains__, correlations_of(runtime)), dtype=bool,
                             count=len(runtime))
        rows = np.union1d(np.asarray(rows, dtype=np.int64), np.flatnonzero(copies)).tolist()  # in file order
    return sorted(events_at(runtime, rows), key=lambda e: e.start)


def _spans(events) -> IntervalSet:
    """The union of the events' [start, end) ranges."""
    return IntervalSet.from_arrays([e.start for e in events], [e.end for e in events])


@per_trace
def host_sets(trace: ParsedTrace) -> HostSets:
    # An op that calls a collective (DDP's gradient hook inside AccumulateGrad calls c10d::allreduce_) is
    # communicating, not computing, for as long as that call lasts.
    ops, cols = trace.ops, op_columns(trace)
    codes, table = op_name_codes(trace)  # each distinct name asked once
    comm = np.fromiter(map(is_comm, table), dtype=bool, count=len(table))[codes] if len(table) else codes > 0
    comm_ops = [ops[i] for i in np.flatnonzero(comm).tolist()]
    starts, ends = cols.start, cols.end
    if comm_ops:
        starts, ends = starts[~comm], ends[~comm]
    compute_ops = subtract(IntervalSet.from_arrays(starts, ends), _spans(comm_ops))
    runtime = runtime_columns(trace)
    return HostSets(
        sync=_spans(sync_primitives(trace)),
        data=_spans(trace.data_spans),
        busy=IntervalSet.from_arrays(np.concatenate([compute_ops.arrays()[0], runtime.start]),
                                     np.concatenate([compute_ops.arrays()[1], runtime.end]))
        .union(model_scope(trace)),
        compute_ops=compute_ops,
        comm=_spans([*comm_ops, *(a for a in trace.annotations if is_comm(a.name))]))


def model_scope(trace: ParsedTrace) -> IntervalSet:
    """Where the host runs the model's own work (module docstring): its modules' calls and backward
    (``model_spans``) and its optimizer's ranges."""
    optimizer = [a for a in trace.annotations if a.name.startswith(MODEL_ANNOTATION_PREFIXES)]
    return IntervalSet([*trace.model_spans, *((a.start, a.end) for a in optimizer)])


@per_trace
def device_sets(trace: ParsedTrace) -> tuple[IntervalSet, IntervalSet, IntervalSet]:
    """(all device activity, compute activity (copies included), communication not overlapped by compute)."""
    d = device_columns(trace)
    compute = d.spans(~d.is_comm)
    return d.spans(), compute, subtract(d.spans(d.is_comm), compute)


@per_trace
def busy_sets(trace: ParsedTrace) -> tuple[IntervalSet, IntervalSet, IntervalSet]:
    """The three busy buckets as disjoint sets: (kernels, copies no kernel overlaps, communication alone)."""
    d = device_columns(trace)
    kernel_set, copy_set = d.spans(~d.is_copy & ~d.is_comm), d.spans(d.is_copy)
    return kernel_set, subtract(copy_set, kernel_set), subtract(d.spans(d.is_comm), kernel_set.union(copy_set))


def breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    return _gpu_breakdown(trace, windows) if trace.has_gpu else _cpu_breakdown(trace, windows)


def _cpu_breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    hs = host_sets(trace)
    buckets = dict.fromkeys(CPU_BUCKETS, 0.0)
    for w in windows:
        data, ops, comm, other = pieces_by_priority(w.start, w.end, [hs.data, hs.compute_ops, hs.comm])
        buckets[DATA] += data
        buckets[CPU_OPS] += ops
        buckets[COMMUNICATION] += comm
        buckets[OTHER_HOST] += other
    return Breakdown(buckets, sum(w.dur for w in windows), len(windows))


def _gpu_breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    """The module docstring's rules, applied to all the gaps of a window at once (numpy arrays)."""
    hs = host_sets(trace)
    everything, _, _ = device_sets(trace)
    kernels, transfer, comm_only = busy_sets(trace)
    queued = _queued_lookup(trace)
    sync_or_data = hs.sync.union(hs.data)  # the host's activities by priority, as growing unions
    any_host = sync_or_data.union(hs.busy)
    buckets = dict.fromkeys(GPU_BUCKETS, 0.0)
    lo, hi = window_bounds(windows)
    # every window's gaps at once, each gap's figures elementwise; each window's sums then taken over its own
    # gaps in order (the same additions as window by window)
    g0, g1, bounds = everything.gaps_of(lo, hi)
    device_own = queued(g0, g1)
    own_bounds = np.concatenate(([0], np.cumsum(device_own)))[bounds]  # each window's slice of the q arrays
    host_bounds = bounds - own_bounds
    q0, q1 = g0[device_own], g1[device_own]
    blocked = np.where(q1 - q0 > DEVICE_TURNAROUND_US, hs.sync.lengths_within(q0, q1), 0.0)
    idle = q1 - q0 - blocked
    h0, h1 = g0[~device_own], g1[~device_own]
    sync = hs.sync.lengths_within(h0, h1)
    up_to_data = sync_or_data.lengths_within(h0, h1)
    up_to_busy = any_host.lengths_within(h0, h1)
    data, busy, other = up_to_data - sync, up_to_busy - up_to_data, (h1 - h0) - up_to_busy
    # recovery: relaunching after the sync drained the queue
    recovery = (sync > 0) | (hs.sync.lengths_within(h0 - SYNC_RECOVERY_TOLERANCE_US, h0) > 0)
    sync_all, launch = np.where(recovery, sync + busy, sync), np.where(recovery, 0.0, busy)
    for k, (gpu, moved, comm) in enumerate(zip(kernels.lengths_within(lo, hi).tolist(),
                                               transfer.lengths_within(lo, hi).tolist(),
                                               comm_only.lengths_within(lo, hi).tolist())):
        buckets[GPU_BUSY] += gpu
        buckets[TRANSFER] += moved
        buckets[COMMUNICATION] += comm
        if bounds[k] == bounds[k + 1]:
            continue
        a, b = own_bounds[k], own_bounds[k + 1]
        buckets[SYNC] += float(blocked[a:b].sum())
        buckets[DEVICE_IDLE] += float(idle[a:b].sum())
        a, b = host_bounds[k], host_bounds[k + 1]
        buckets[SYNC] += float(sync_all[a:b].sum())
        buckets[DATA] += float(data[a:b].sum())
        buckets[LAUNCH] += float(launch[a:b].sum())
        buckets[OTHER_HOST] += float(other[a:b].sum())
    return Breakdown(buckets, sum(w.dur for w in windows), len(windows))


def _queued_lookup(trace: ParsedTrace) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """For gaps (g0, g1): was any device activity that starts at g1 already launched (or launched before the
    trace) at g0? Per distinct start time, the earliest end of its activities' launch calls (-inf for an
    activity without a launch in the trace)."""
    begin = device_columns(trace).start
    launch = launch_columns(trace)
    launch_end = np.where(launch.found, launch.end, -np.inf)
    order = np.lexsort((launch_end, begin))  # by start, the earliest launch end first
    starts, first = np.unique(begin[order], return_index=True)
    launched = launch_end[order][first]

    def queued(g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
        k = np.minimum(np.searchsorted(starts, g1), max(starts.size - 1, 0))
        if starts.size == 0:
            return np.zeros(g0.shape, dtype=bool)
        return (starts[k] == g1) & (launched[k] <= g0)

    return queued

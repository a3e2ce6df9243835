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
  ``launch`` inside a torch op or a CUDA runtime call (dispatching ops, launching kernels);
  ``other_host`` anything else: Python outside torch ops, the GIL, sleeping.
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

from bisect import bisect_left
from dataclasses import dataclass

from .events import SYNC_CALLS, DeviceEvent, HostEvent, ParsedTrace, is_comm, is_comm_kernel
from .intervals import IntervalSet, pieces_by_priority, subtract
from .steps import StepWindow, launches_by_correlation

GPU_BUCKETS = ("gpu_busy", "transfer", "device_idle", "communication", "launch", "data", "sync", "other_host")
CPU_BUCKETS = ("cpu_ops", "data", "communication", "other_host")
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
    busy: IntervalSet  # inside a non-collective torch op or a runtime call
    compute_ops: IntervalSet  # inside a non-collective torch op
    comm: IntervalSet  # inside a collective annotation or c10d op


def sync_primitives(trace: ParsedTrace) -> list[HostEvent]:
    """Host calls that block until the GPU catches up (see module doc), in time order."""
    blocking_copies = {d.correlation for d in trace.device
                       if d.kind == "memcpy" and "DtoH" in d.name and "Pageable" in d.name}
    # Only a runtime call makes the host wait for the device: `.item()` of a GPU tensor shows one under it
    # (a device-to-host copy and a stream synchronize), `.item()` of a CPU tensor (an optimizer's step
    # counter, say) shows none and is no sync.
    out = [r for r in trace.runtime if r.name in SYNC_CALLS or (r.correlation in blocking_copies)]
    return sorted(out, key=lambda e: e.start)


def host_sets(trace: ParsedTrace) -> HostSets:
    # An op that calls a collective (DDP's gradient hook inside AccumulateGrad calls c10d::allreduce_) is
    # communicating, not computing, for as long as that call lasts.
    comm_calls = IntervalSet((o.start, o.end) for o in trace.ops if is_comm(o.name))
    ops = IntervalSet((o.start, o.end) for o in trace.ops if not is_comm(o.name))
    compute_ops = subtract(ops, comm_calls)
    comm = [(e.start, e.end) for e in (*trace.ops, *trace.annotations) if is_comm(e.name)]
    return HostSets(
        sync=IntervalSet((e.start, e.end) for e in sync_primitives(trace)),
        data=IntervalSet((e.start, e.end) for e in trace.data_spans),
        busy=IntervalSet([*compute_ops, *((r.start, r.end) for r in trace.runtime)]),
        compute_ops=compute_ops,
        comm=IntervalSet(comm))


def device_sets(trace: ParsedTrace) -> tuple[IntervalSet, IntervalSet, IntervalSet]:
    """(all device activity, compute activity (copies included), communication not overlapped by compute)."""
    compute = IntervalSet((d.start, d.end) for d in trace.device if not is_comm_kernel(d.name))
    comm = IntervalSet((d.start, d.end) for d in trace.device if is_comm_kernel(d.name))
    return IntervalSet((d.start, d.end) for d in trace.device), compute, subtract(comm, compute)


def busy_sets(trace: ParsedTrace) -> tuple[IntervalSet, IntervalSet, IntervalSet]:
    """The three busy buckets as disjoint sets: (kernels, copies no kernel overlaps, communication alone)."""
    kernels = IntervalSet((d.start, d.end) for d in trace.device
                          if d.kind != "memcpy" and not is_comm_kernel(d.name))
    copies = IntervalSet((d.start, d.end) for d in trace.device if d.kind == "memcpy")
    comm = IntervalSet((d.start, d.end) for d in trace.device if is_comm_kernel(d.name))
    not_comm = IntervalSet([*kernels, *copies])
    return kernels, subtract(copies, kernels), subtract(comm, not_comm)


def breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    return _gpu_breakdown(trace, windows) if trace.has_gpu else _cpu_breakdown(trace, windows)


def _cpu_breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    hs = host_sets(trace)
    buckets = dict.fromkeys(CPU_BUCKETS, 0.0)
    for w in windows:
        data, ops, comm, other = pieces_by_priority(w.start, w.end, [hs.data, hs.compute_ops, hs.comm])
        buckets["data"] += data
        buckets["cpu_ops"] += ops
        buckets["communication"] += comm
        buckets["other_host"] += other
    return Breakdown(buckets, sum(w.dur for w in windows), len(windows))


def _gpu_breakdown(trace: ParsedTrace, windows: list[StepWindow]) -> Breakdown:
    hs = host_sets(trace)
    everything = IntervalSet((d.start, d.end) for d in trace.device)
    kernels, transfer, comm_only = busy_sets(trace)
    launch = launches_by_correlation(trace)
    by_start = sorted(trace.device, key=lambda d: d.start)
    starts = [d.start for d in by_start]
    buckets = dict.fromkeys(GPU_BUCKETS, 0.0)
    for w in windows:
        buckets["gpu_busy"] += kernels.length_within(w.start, w.end)
        buckets["transfer"] += transfer.length_within(w.start, w.end)
        buckets["communication"] += comm_only.length_within(w.start, w.end)
        for g0, g1 in everything.gaps(w.start, w.end):
            enders = _starting_at(by_start, starts, g1)
            if enders and _queued_before(enders, launch, g0):
                blocked = hs.sync.length_within(g0, g1) if g1 - g0 > DEVICE_TURNAROUND_US else 0.0
                buckets["sync"] += blocked
                buckets["device_idle"] += g1 - g0 - blocked
                continue
            sync, data, busy, other = pieces_by_priority(g0, g1, [hs.sync, hs.data, hs.busy])
            if sync > 0 or hs.sync.length_within(g0 - SYNC_RECOVERY_TOLERANCE_US, g0) > 0:
                sync, busy = sync + busy, 0.0  # recovery: relaunching after the sync drained the queue
            buckets["sync"] += sync
            buckets["data"] += data
            buckets["launch"] += busy
            buckets["other_host"] += other
    return Breakdown(buckets, sum(w.dur for w in windows), len(windows))


def _starting_at(by_start: list[DeviceEvent], starts: list[float], t: float) -> list[DeviceEvent]:
    i = bisect_left(starts, t)
    out = []
    while i < len(starts) and starts[i] == t:
        out.append(by_start[i])
        i += 1
    return out


def _queued_before(enders: list[DeviceEvent], launch: dict[int, HostEvent], t: float) -> bool:
    """Was any of the activities that end a gap already launched (or launched before the trace) at ``t``?"""
    for d in enders:
        r = launch.get(d.correlation)
        if r is None or r.end <= t:
            return True
    return False

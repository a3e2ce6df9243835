"""Per-(worker, span) numbers measured from the trace: step time, GPU busy, kernels, syncs, data, memory.

Every "per step" number is a total over the profiled steps divided by their count. GPU terms are None on a
CPU-only trace. Counts and times are of the work each step launched (see steps.py), so the GPU work of
warm-up steps that still runs in the first profiled step is not counted as that step's kernels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from stepscope.analysis.breakdown import Breakdown, device_sets, host_sets, sync_primitives
from stepscope.analysis.columns import DeviceColumns, device_columns, op_columns, runtime_columns
from stepscope.analysis.events import (
    HostEvent,
    HostEvents,
    MemoryColumns,
    ParsedTrace,
    events_at,
    is_comm,
    rows_named,
)
from stepscope.analysis.intervals import IntervalSet, intersect
from stepscope.analysis.per_trace import per_trace
from stepscope.analysis.steps import StepWindow, device_rows, window_bounds
from stepscope.analysis.vocabulary import COMMUNICATION, GPU_BUSY

KERNEL_LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                   "cudaLaunchCooperativeKernel"}
TOP_N = 5
MIB = 1 << 20


@dataclass(frozen=True)
class TopItem:
    name: str
    ms_per_step: float
    count_per_step: float
    pct: float  # of all kernel time (GPU) or of all op self time (CPU)


@dataclass(frozen=True)
class SyncEpisode:
    """One host-device sync: the sync calls under one top-level op (e.g. aten::item), or a bare call."""

    name: str  # the top-level op, or the runtime call
    start: float
    blocked_us: float


@dataclass(frozen=True)
class SpanMetrics:
    steps: int
    step_ms: float
    host_step_ms: float  # mean ProfilerStep# range on the host
    gpu_busy_pct: float | None
    kernels_per_step: float | None
    host_us_per_kernel: float | None  # host step time outside data loading / kernels: the host's cost of one
    median_kernel_us: float | None
    median_launch_us: float | None
    syncs_per_step: float | None
    sync_ms_per_step: float | None
    data_ms_per_step: float
    memcpy_ms_per_step: float | None
    memcpy_per_step: float | None
    peak_gpu_memory_mib: float | None
    peak_cpu_memory_mib: float | None
    compute_ms_per_step: float
    comm_ms_per_step: float
    overlap_ms_per_step: float
    top: tuple[TopItem, ...]  # top kernels (GPU) or top ops by self time (CPU)
    sync_episodes: tuple[SyncEpisode, ...]

    def to_dict(self) -> dict:
        """The JSON ``metrics`` object (scalars only; top items and episodes are reported elsewhere)."""
        return {k: _round(v) for k, v in self.__dict__.items() if k not in ("top", "sync_episodes")}


def _round(v):
    return round(v, 4) if isinstance(v, float) else v


def span_metrics(trace: ParsedTrace, windows: list[StepWindow], bd: Breakdown,
                 episodes: list[SyncEpisode] | None = None) -> SpanMetrics:
    """The steps' metrics. ``episodes``: the trace's ``sync_episodes`` where the caller has them (an empty
    list: the caller sets the sync figures later, with ``sync_figures``); None: made here."""
    n = len(windows)
    hs = host_sets(trace)
    data_us = sum(hs.data.lengths_within(*window_bounds(windows, host=True)).tolist())  # added step by step
    peak = _peak_allocated(trace.memory)
    common = dict(steps=n, step_ms=bd.total_us / n / 1e3,
                  host_step_ms=sum(w.host_end - w.host_start for w in windows) / n / 1e3,
                  data_ms_per_step=data_us / n / 1e3,
                  peak_gpu_memory_mib=peak[1] / MIB if peak[1] is not None else None,
                  peak_cpu_memory_mib=peak[0] / MIB if peak[0] is not None else None)
    if not trace.has_gpu:
        compute, comm = hs.compute_ops, hs.comm
        return SpanMetrics(gpu_busy_pct=None, kernels_per_step=None, host_us_per_kernel=None,
                           median_kernel_us=None, median_launch_us=None, syncs_per_step=None,
                           sync_ms_per_step=None, memcpy_ms_per_step=None, memcpy_per_step=None,
                           top=tuple(_top_ops(trace.ops, windows)), sync_episodes=(),
                           **_comm_compute(compute, comm, windows, n), **common)

    dev = device_columns(trace)
    own = device_rows(windows)  # the steps' activity, step by step, as rows of dev
    kernels, memcpys = own[dev.is_kernel[own]], own[dev.is_copy[own]]
    step_ranges = _step_ranges(windows)
    # the kernel launches that start inside the steps, as columns: no tuple per launch (a large trace has
    # hundreds of thousands)
    launch = rows_named(trace.runtime, KERNEL_LAUNCHES.__contains__)
    runtime = runtime_columns(trace)
    starts, ends = runtime.start[launch], runtime.end[launch]
    inside = step_ranges.covers_each(starts)
    launch_us = ends[inside] - starts[inside]
    _, compute, _ = device_sets(trace)
    comm = dev.spans(dev.is_comm)
    busy_us = bd.buckets[GPU_BUSY] + bd.buckets[COMMUNICATION]
    return SpanMetrics(
        gpu_busy_pct=100.0 * busy_us / bd.total_us if bd.total_us > 0 else 0.0,
        kernels_per_step=len(kernels) / n,
        host_us_per_kernel=(common["host_step_ms"] - common["data_ms_per_step"]) * 1e3 * n / len(kernels)
        if kernels.size else None,
        median_kernel_us=_median(dev.end[kernels] - dev.start[kernels]) if kernels.size else None,
        median_launch_us=_median(launch_us) if launch_us.size else None,
        memcpy_ms_per_step=dev.spans(memcpys).total() / n / 1e3,
        memcpy_per_step=len(memcpys) / n, top=tuple(_top_kernels(dev, kernels, n)),
        **sync_figures(windows, sync_episodes(trace) if episodes is None else episodes),
        **_comm_compute(compute, comm, windows, n), **common)


def sync_figures(windows: list[StepWindow], episodes: list[SyncEpisode]) -> dict:
    """SpanMetrics' sync fields from a GPU trace's ``sync_episodes``: those that start inside the steps."""
    in_steps = _step_ranges(windows).covers
    mine = [e for e in episodes if in_steps(e.start)]
    n = len(windows)
    return dict(syncs_per_step=len(mine) / n, sync_ms_per_step=sum(e.blocked_us for e in mine) / n / 1e3,
                sync_episodes=tuple(mine))


def _median(dur: np.ndarray) -> float:
    """``statistics.median`` of the values in ``dur`` (at least one)."""
    n = len(dur)
    k = n // 2
    if n % 2:
        return float(np.partition(dur, k)[k])
    part = np.partition(dur, (k - 1, k))
    return (float(part[k - 1]) + float(part[k])) / 2


def _peak_allocated(memory) -> dict[int, int | None]:
    """The largest Total Allocated of the CPU (0) and the GPU (1) samples; None where there is none."""
    peak: dict[int, int | None] = {0: None, 1: None}
    cols = MemoryColumns.of(memory)
    kinds, totals = cols.field("device_type"), cols.field("total_allocated")
    if isinstance(kinds, np.ndarray) and isinstance(totals, np.ndarray):  # int64 columns: one pass in numpy
        for kind in peak:
            mine = totals[kinds == kind]
            peak[kind] = int(mine.max()) if mine.size else None
        return peak
    for kind, total in set(zip(cols.values("device_type"), cols.values("total_allocated"))):
        if kind in peak and (peak[kind] is None or total > peak[kind]):
            peak[kind] = total
    return peak


def _step_ranges(windows: list[StepWindow]) -> IntervalSet:
    """The union of the steps' host ranges."""
    return IntervalSet((w.host_start, w.host_end) for w in windows)


def _in_steps(windows: list[StepWindow]) -> Callable[[float], bool]:
    """Whether a time is inside some step's host range, asked once per event."""
    return _step_ranges(windows).covers


def _comm_compute(compute: IntervalSet, comm: IntervalSet, windows: list[StepWindow], n: int) -> dict:
    both = intersect(compute, comm)
    lo, hi = window_bounds(windows)

    def per_step(s: IntervalSet) -> float:  # each step's length, added in order as a loop over them would
        return sum(s.lengths_within(lo, hi).tolist()) / n / 1e3

    return dict(compute_ms_per_step=per_step(compute), comm_ms_per_step=per_step(comm),
                overlap_ms_per_step=per_step(both))


def sync_episodes(trace: ParsedTrace) -> list[SyncEpisode]:
    """Host-device syncs, one per top-level op that contains sync calls (an ``.item()`` is aten::item >
    aten::_local_scalar_dense > cudaMemcpyAsync + cudaStreamSynchronize: one sync, not four)."""
    tops = top_level_rows(trace)
    cols = op_columns(trace) if tops else None
    starts: dict = {}  # per thread, its top-level ops' starts, made when a sync on it is first met
    groups: dict[tuple, list[HostEvent]] = defaultdict(list)
    for p in sync_primitives(trace):
        key = (p.tid, p.start, p.name)
        rows = tops.get(p.tid)
        if rows is not None and rows.size:  # the top-level op that began last before it, if it holds it
            s = starts.get(p.tid)
            if s is None:
                s = starts[p.tid] = cols.start[rows]
            i = int(np.searchsorted(s, p.start, side="right")) - 1
            if i >= 0 and cols.end[rows[i]] >= p.end:
                top = int(rows[i])
                key = (p.tid, float(cols.start[top]), cols.names[top])
        groups[key].append(p)
    out = []
    for (_, start, name), prims in groups.items():
        blocked = IntervalSet((p.start, p.end) for p in prims).total()
        out.append(SyncEpisode(name, start, blocked))
    return sorted(out, key=lambda e: e.start)


@per_trace
def top_level_ops(trace: ParsedTrace) -> dict:
    """Per thread: (starts, ops: a HostEvents or a list of HostEvent) of its top-level ops (top_level_rows)."""
    ops, start = trace.ops, op_columns(trace).start
    # as columns where the trace keeps its ops so (no tuple per op: a large trace has a hundred thousand)
    pick = (lambda rows: ops.take(rows)) if isinstance(ops, HostEvents) else (  # noqa: E731
        lambda rows: events_at(ops, rows.tolist()))
    return {key: (start[tops].tolist(), pick(tops)) for key, tops in top_level_rows(trace).items()}


@per_trace
def top_level_rows(trace: ParsedTrace) -> dict:
    """Per thread: the rows (in trace.ops) of the ops not nested in another op, in time order: in (start, -end)
    order, the first op, then the first one that starts at or after the end of the last one taken."""
    if not trace.ops:
        return {}
    cols = op_columns(trace)
    threads, tid, start, end = cols.threads, cols.thread, cols.start, cols.end
    order = _by_thread_then_time(tid, start, end)
    bounds = np.searchsorted(tid[order], np.arange(len(threads) + 1))
    out = {}
    for key, code in threads.items():
        rows = order[bounds[code]:bounds[code + 1]]
        out[key] = rows[_chain(start[rows], end[rows])]
    return out


def _by_thread_then_time(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The rows in order of thread, then (start, -end), ties in row order: ``np.lexsort((-end, start, tid))``.
    A trace usually lists each thread's ops in that order already; then grouping by thread keeps it, at a
    tenth of the three-key sort's cost (checked on every pair of neighbours)."""
    order = np.argsort(tid, kind="stable")
    s, e, t = start[order], end[order], tid[order]
    in_order = (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] <= e[:-1])) | (t[1:] != t[:-1])
    return order if bool(in_order.all()) else np.lexsort((-end, start, tid))


def _chain(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Of ops in (start, -end) order: 0, after(0), after(after(0)), ... while below their count, where after(i),
    the op taken after op i, is the first that starts at or after its end (at least i + 1). Where a thread's
    ops nest (the usual case), these are the ops that start at or after the end of every op before them: that
    set is taken when it is the chain (every link checked at once, after() found for those ops alone), else
    the chain is followed op by op."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)

    def after(i: np.ndarray) -> np.ndarray:
        return np.maximum(i + 1, starts.searchsorted(ends[i]))

    candidates = np.flatnonzero(np.concatenate(([True], starts[1:] >= np.maximum.accumulate(ends)[:-1])))
    linked = after(candidates)
    if np.array_equal(linked[:-1], candidates[1:]) and linked[-1] >= n:
        return candidates
    links, taken, i = after(np.arange(n)).tolist(), [], 0
    while i < n:
        taken.append(i)
        i = links[i]
    return np.asarray(taken, dtype=np.int64)


def op_table(trace: ParsedTrace, windows: list[StepWindow]) -> dict[str, float]:
    """Every kernel (a GPU trace) or CPU operator by self time (a CPU trace) of these steps: name -> ms per step,
    the full table that a span's ``top`` is the head of."""
    if not windows:
        return {}
    if not trace.has_gpu:
        items = _top_ops(trace.ops, windows, None)
    else:
        dev, own = device_columns(trace), device_rows(windows)
        items = _top_kernels(dev, own[dev.is_kernel[own]], len(windows), None)
    return {t.name: t.ms_per_step for t in items}


def _top_kernels(dev: DeviceColumns, kernels: np.ndarray, n: int, rows: int | None = TOP_N) -> list[TopItem]:
    """The kernels (rows of ``dev``) by total time: per name, in order of first appearance, the durations
    summed in the kernels' order (bincount adds them one by one, as a loop would) and the count."""
    names, codes, summed = dev.by_name(kernels)
    total = dict(zip(names, summed.tolist()))
    count = dict(zip(names, np.bincount(codes, minlength=len(names)).tolist()))
    grand = sum(total.values()) or 1.0
    best = sorted(total, key=total.get, reverse=True)[:rows]
    return [TopItem(name, total[name] / n / 1e3, count[name] / n, 100.0 * total[name] / grand)
            for name in best]


def _top_ops(ops, windows: list[StepWindow], rows: int | None = TOP_N) -> list[TopItem]:
    """Top CPU ops by self time (own duration minus that of ops nested in them on the same thread)."""
    n = len(windows)
    by_tid: dict = defaultdict(list)
    in_steps = _in_steps(windows)
    for o in ops:
        if in_steps(o.start):
            by_tid[o.tid].append(o)
    self_us: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for lst in by_tid.values():
        lst.sort(key=lambda o: (o.start, -o.end))
        stack: list[HostEvent] = []
        for o in lst:
            while stack and stack[-1].end <= o.start:
                stack.pop()
            if stack:
                self_us[stack[-1].name] -= o.dur  # the parent's self time excludes this child
            self_us[o.name] += o.dur
            count[o.name] += 1
            stack.append(o)
    compute = {k: v for k, v in self_us.items() if not is_comm(k)}  # collectives count as communication
    grand = sum(compute.values()) or 1.0
    best = sorted(compute, key=compute.get, reverse=True)[:rows]
    return [TopItem(name, self_us[name] / n / 1e3, count[name] / n, 100.0 * self_us[name] / grand)
            for name in best]

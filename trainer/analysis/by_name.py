"""Where each phase of a step goes, by name: the small table that tells one rank's phase from another's.

    times = name_times(trace, windows)
    times.items["gpu_kernels"]        # (("ampere_sgemm_...", 0.41), ...): ms per step, largest first

One table per phase of the step breakdown (breakdown.py) that has names:
  ``gpu_kernels``       GPU time of each kernel and memset name (collective kernels are communication);
  ``copies``            GPU time of each host<->device copy name;
  ``host_dispatch``     host time inside each top-level torch op (inclusive: the op and what it launched);
  ``host_outside_ops``  host time between top-level ops on the step's own thread, by the innermost
                        ``record_function`` range around it, else as "before <the next op>";
  ``data``              host time in each DataLoader / ``data`` range;
  ``sync``              host time blocked in each host-device sync (by its top-level op).
Only the ``KEEP`` largest names of each phase are kept, so a rank's table stays small wherever it is sent;
a name below that cut counts as 0 for that rank. Times are within the steps' host ranges, summed over the
steps and divided by their count. They are attributions, not a partition of the step: a kernel's time
counts whether or not it overlapped anything, so compare a name across ranks, not with the buckets.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from stepscope.analysis.breakdown import host_sets
from stepscope.analysis.columns import device_columns
from stepscope.analysis.events import ParsedTrace, is_comm
from stepscope.analysis.intervals import IntervalSet
from stepscope.analysis.metrics import SyncEpisode, top_level_ops
from stepscope.analysis.steps import StepWindow, device_rows
from stepscope.analysis.vocabulary import COPIES, DATA, GPU_KERNELS, HOST_DISPATCH, HOST_OUTSIDE_OPS, SYNC

KEEP = 20


@dataclass(frozen=True)
class NameTimes:
    """phase -> ((name, ms per step), ...), largest first, at most KEEP each; and each phase's total over
    all its names."""

    items: dict[str, tuple[tuple[str, float], ...]]
    totals: dict[str, float]

    def of(self, phase: str) -> dict[str, float]:
        return dict(self.items.get(phase, ()))


def name_times(trace: ParsedTrace, windows: list[StepWindow], episodes: tuple[SyncEpisode, ...] = ()
               ) -> NameTimes:
    n = max(len(windows), 1)
    # each kernel's (memset's) and copy's time by name, step by step in trace order, from the device columns
    dev, own = device_columns(trace), device_rows(windows)
    kernels = _by_name(dev, own[~dev.is_copy[own] & ~dev.is_comm[own]])
    copies = _by_name(dev, own[dev.is_copy[own]])
    host = [(w.host_start, w.host_end) for w in windows]
    data: dict[str, float] = defaultdict(float)
    for s in trace.data_spans:
        data[s.name] += _within(s.start, s.end, host)
    sync: dict[str, float] = defaultdict(float)
    for e in episodes:
        sync[e.name] += e.blocked_us
    dispatch, outside = _host_ops(trace, windows)
    tables = {GPU_KERNELS: kernels, COPIES: copies, HOST_DISPATCH: dispatch, HOST_OUTSIDE_OPS: outside,
              DATA: data, SYNC: sync}
    return NameTimes({phase: _largest(t, n) for phase, t in tables.items() if t},
                     {phase: sum(t.values()) / n / 1e3 for phase, t in tables.items() if t})


def _by_name(dev, rows: np.ndarray) -> dict[str, float]:
    names, _, total = dev.by_name(rows)
    return dict(zip(names, total.tolist()))


def _largest(table: dict[str, float], n: int) -> tuple[tuple[str, float], ...]:
    best = sorted(((name, us / n / 1e3) for name, us in table.items() if us > 0), key=lambda x: (-x[1], x[0]))
    return tuple(best[:KEEP])


def _within(start: float, end: float, ranges: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in ranges)


def _host_ops(trace: ParsedTrace, windows: list[StepWindow]) -> tuple[dict[str, float], dict[str, float]]:
    """(host time inside each top-level op, host time between top-level ops on the step's thread by where it
    is), both within the steps' host ranges."""
    tops = top_level_ops(trace)
    dispatch: dict[str, float] = defaultdict(float)
    outside: dict[str, float] = defaultdict(float)
    if not windows:
        return dispatch, outside
    h0 = np.array([w.host_start for w in windows])
    h1 = np.array([w.host_end for w in windows])
    first: dict = {}  # per thread, the steps in which it runs the first top-level op
    for tid, (_, ops) in tops.items():
        if not ops:
            continue
        s = np.array([o.start for o in ops])
        e = np.array([o.end for o in ops])
        k = np.clip(np.searchsorted(h1, s, side="right"), 0, len(windows) - 1)  # the step an op may fall in
        inside = np.clip(np.minimum(e, h1[k]) - np.maximum(s, h0[k]), 0.0, None)
        for o, us in zip(ops, inside.tolist(), strict=True):
            if us > 0 and not is_comm(o.name):
                dispatch[o.name] += us
        at = np.searchsorted(s, h0)  # each step's first op on this thread
        first[tid] = np.where(at < s.size, s[np.minimum(at, s.size - 1)], np.inf)
    if first:
        # the step's own thread (the training loop's) runs the step's first op: forward before backward
        tids = list(first)
        earliest = np.argmin(np.stack([first[t] for t in tids]), axis=0)
        main = tids[int(np.bincount(earliest).argmax())]
        hs = host_sets(trace)
        elsewhere = hs.busy.union(hs.comm).union(hs.sync).union(hs.data)
        _gaps(tops[main][1], windows, trace, elsewhere, outside)
    return dispatch, outside


def _gaps(ops, windows: list[StepWindow], trace: ParsedTrace, elsewhere: IntervalSet, out: dict[str, float]
          ) -> None:
    """The gaps between consecutive top-level ops of one thread inside each step's host range, less the time
    the host is busy ``elsewhere`` (an op on another thread, a collective, a sync, a data wait), by the
    innermost annotation (on that thread) around the gap's middle, else by the op that ends the gap."""
    tid = ops[0].tid
    marks = sorted(((a.start, a.end, a.name) for a in trace.annotations if a.tid == tid and not is_comm(a.name)),
                   key=lambda a: a[1] - a[0], reverse=True)  # the longest first: inner ranges paint over
    starts = np.array([o.start for o in ops])
    ends = np.array([o.end for o in ops])
    for w in windows:
        i0, i1 = int(np.searchsorted(starts, w.host_start)), int(np.searchsorted(starts, w.host_end))
        s, e = starts[i0:i1], ends[i0:i1]
        g0 = np.concatenate(([w.host_start], np.maximum(np.maximum.accumulate(e), w.host_start)))
        g1 = np.concatenate((s, [w.host_end]))
        g1 = np.minimum(g1, w.host_end)
        keep = g1 > g0
        if not keep.any():
            continue
        labels = np.array([f"before {ops[i0 + j].name}" for j in range(s.size)] + ["end of step"], dtype=object)
        g0, g1, labels = g0[keep], g1[keep], labels[keep]
        mid = (g0 + g1) / 2
        order = np.argsort(mid, kind="stable")
        for a0, a1, name in marks:
            if a1 <= w.host_start or a0 >= w.host_end:
                continue
            lo, hi = np.searchsorted(mid[order], a0), np.searchsorted(mid[order], a1)
            labels[order[lo:hi]] = name
        own = (g1 - g0) - elsewhere.lengths_within(g0, g1)
        for name, us in zip(labels.tolist(), own.tolist(), strict=True):
            if us > 0:
                out[name] += us

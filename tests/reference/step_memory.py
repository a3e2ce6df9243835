"""The memory of each step, one step at a time: a reference for the tests only.

    steps = device_steps(dev, windows, phases, owners, modules)   # as memory._device_steps gives them

stepscope.analysis.memory makes every step's figures at once, as reductions over the steps' samples laid end
to end (``_device_steps``); this is the plain reading of the same rules, a step's slice of the device's samples
walked in time order, which the tests hold the batched one to.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

import numpy as np
from stepscope.analysis.columns import op_columns
from stepscope.analysis.memory import (
    _STEP_PHASES,
    BACKWARD_OP,
    GENERIC_ALLOCATING_OPS,
    OPTIMIZER_RANGE,
    STATE_NEW_MIN_BYTES,
    TOP_ALLOCATORS,
    StepMemory,
    _live,
    _thread_of,
)


def step_phases(trace, windows) -> list[tuple]:
    """memory._phases, window by window and by the ops' names: each window's backward (its first backward op's
    start, the latest end among them) and its optimizer ranges (ops and annotations), sorted."""
    cols = op_columns(trace)
    lo, hi = windows[0].host_start, windows[-1].host_end
    spans = [(s, e, name) for s, e, name in zip(cols.start.tolist(), cols.end.tolist(), cols.names)
             if lo <= s < hi]
    backward = sorted((s, e) for s, e, name in spans if name.startswith(BACKWARD_OP))
    optim = sorted([(s, e) for s, e, name in spans if name.startswith(OPTIMIZER_RANGE)]
                   + [(a.start, a.end) for a in trace.annotations if a.name.startswith(OPTIMIZER_RANGE)])
    out = []
    for w in windows:
        mine = [b for b in backward if w.host_start <= b[0] < w.host_end]
        ranges = [o for o in optim if w.host_start <= o[0] < w.host_end]
        out.append((mine[0][0] if mine else None, max(b[1] for b in mine) if mine else None, ranges))
    return out


def device_steps(dev, windows, phases, owners, modules) -> list[StepMemory]:
    """Each window's StepMemory on the device ``dev`` (memory._Device), the windows without a sample left out."""
    out = (step_memory(dev, w, phases[i], owners, modules) for i, w in enumerate(windows))
    return [s for s in out if s is not None]


def rows(dev, w) -> tuple[int, int]:
    """The device's samples in step ``w``'s host range, as the slice [lo, hi)."""
    return (int(np.searchsorted(dev.ts, w.host_start - 1e-9, side="right")),
            int(np.searchsorted(dev.ts, w.host_end, side="right")))


def phase_codes(ts: np.ndarray, phases: tuple) -> np.ndarray:
    """Each time's phase, as an index of _STEP_PHASES: inside an optimizer range, optimizer; else before the
    backward, forward (without a backward: before the first optimizer range, and other after it); else
    backward up to its end, and other after."""
    b0, b1, optim = phases
    if b0 is None:
        codes = np.where(ts < optim[0][0], 0, 3) if optim else np.zeros(len(ts), dtype=np.int64)
    else:
        codes = np.where(ts < b0, 0, np.where(ts <= b1, 1, 3))
    if optim:
        starts = np.array([o[0] for o in optim])
        ends = np.array([o[1] for o in optim])
        k = np.searchsorted(starts, ts, side="right") - 1
        inside = (k >= 0) & (ts < np.maximum.accumulate(ends)[np.maximum(k, 0)])
        codes = np.where(inside, 2, codes)
    return codes


def step_memory(dev, w, phases: tuple, owners, modules) -> StepMemory | None:
    lo, hi = rows(dev, w)
    if lo >= hi:
        return None
    total = dev.total[lo:hi]
    at_start = int(dev.total[lo - 1]) if lo > 0 else int(dev.total[lo] - dev.nbytes[lo])
    i = int(np.argmax(total))
    peak_i = lo + i if total[i] > at_start else None
    peak = int(total[i]) if peak_i is not None else at_start
    peak_reserved = int(max(dev.reserved[lo:hi].max(), dev.reserved[lo - 1] if lo > 0 else 0))
    codes = phase_codes(dev.ts[lo:hi], phases)
    deltas = np.diff(total, prepend=at_start)
    end = peak_i + 1 - lo if peak_i is not None else 0
    sums = np.bincount(codes[:end], weights=deltas[:end], minlength=4) if end else np.zeros(4)
    growth = {name: int(round(sums[k])) for k, name in enumerate(_STEP_PHASES)}
    growth = {"forward": growth["forward"], "backward": growth["backward"], "optimizer": growth["optimizer"],
              "optimizer_state_new": 0, "other": growth["other"]}
    optim_kept = int(deltas[codes == 2].sum())
    at_end = int(total[-1])
    if optim_kept >= STATE_NEW_MIN_BYTES and at_end > at_start:
        state_new = max(min(growth["optimizer"], optim_kept, at_end - at_start), 0)
        growth["optimizer"] -= state_new
        growth["optimizer_state_new"] = state_new
    composition = {"persistent": at_start, **growth}
    if peak_i is not None:
        reserved_at_peak = int(dev.reserved[peak_i])
    else:
        reserved_at_peak = int(dev.reserved[lo - 1] if lo > 0 else dev.reserved[lo])
    nbytes = dev.nbytes[lo:hi].tolist()
    tops: dict[str, int] = defaultdict(int)
    by_module: dict[str | None, int] = defaultdict(int)
    by_tid: dict = defaultdict(list)
    for j in _live(nbytes, dev.addr[lo:hi].tolist(), end):  # the blocks the step allocated, live at its peak
        by_tid[_thread_of(dev, int(dev.tid[lo + j]))].append((lo + j, nbytes[j]))
    for tid, allocs in by_tid.items():
        ts = dev.ts[[j for j, _ in allocs]]
        for name, (_, b) in zip(owners.owners(tid, ts), allocs):
            tops[name] += b
        if modules:
            for name, (_, b) in zip(modules.owners(tid, ts), allocs):
                by_module[name] += b
    top = tuple(sorted(tops.items(), key=lambda kv: -kv[1])[:TOP_ALLOCATORS])
    outside = by_module.pop(None, 0)
    mods = tuple(sorted(by_module.items(), key=lambda kv: -kv[1])[:TOP_ALLOCATORS]) if modules else None
    phase = _STEP_PHASES[int(codes[peak_i - lo])] if peak_i is not None else "step start"
    largest = max(int(dev.nbytes[lo:hi].max()), 0)
    return StepMemory(w.number, peak, peak_reserved, reserved_at_peak, at_start, at_end, phase, composition, top,
                      mods, outside if modules else 0, largest)


class OpOwners:
    """The op that owns an allocation on a thread at a time, one time at a time (memory._Owners answers many at
    once): of the thread's ops that are not generic allocation ops (GENERIC_ALLOCATING_OPS), the one begun last
    at or before the time, where it is still open; else, among the last 4096 of them begun by then, the last
    that is still open or has no length; else the same among all of the thread's ops; else "(no op)". Ops
    that begin together keep their order in the trace."""

    def __init__(self, trace) -> None:
        self.cols = op_columns(trace)
        self.threads: dict = {}

    def _thread(self, tid) -> tuple | None:
        """The thread's plain ops and all its ops, each a list of (start, end, name) in order of start, with the
        list of their starts."""
        if tid not in self.threads:
            cols, code = self.cols, self.cols.threads.get(tid)
            mine = [] if code is None else sorted(
                ((float(cols.start[i]), float(cols.end[i]), cols.names[i]) for i in range(len(cols.names))
                 if cols.thread[i] == code), key=lambda op: op[0])
            plain = [op for op in mine if op[2] not in GENERIC_ALLOCATING_OPS]
            self.threads[tid] = None if code is None else tuple((g, [op[0] for op in g]) for g in (plain, mine))
        return self.threads[tid]

    def owner(self, tid, t: float) -> str:
        groups = self._thread(tid)
        if groups is None:
            return "(no op)"
        (plain, plain_starts), _ = groups
        begun = bisect_right(plain_starts, t)
        if begun and plain[begun - 1][1] > t:
            return plain[begun - 1][2]
        for group, starts in groups:
            begun = bisect_right(starts, t)
            inside = [op for op in group[max(begun - 4096, 0):begun] if op[1] > t or op[1] == op[0]]
            if inside:
                return inside[-1][2]
        return "(no op)"

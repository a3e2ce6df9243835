"""The caching allocator's counters read at the edges of windows of unprofiled steps, where the loop already
synchronises: memory measured over the whole run, not only in the few profiled steps.

    mem = MemoryWindows()
    mem.edge(step, closing=True)      # a window of kept steps ends: its peaks and the counters are read
    mem.edge(step, closing=False)     # one begins: the peaks are reset (what came before is not its own)
    mem.telemetry()                   # {"mem_peak_allocated_mib", ...}: flat numbers for a cycle's telemetry

A window's peaks are ``torch.cuda.memory_stats()``'s ``allocated_bytes.all.peak`` and
``reserved_bytes.all.peak`` since the window began (``torch.cuda.reset_peak_memory_stats()`` at each edge, so
``torch.cuda.max_memory_allocated()`` reads the peak since the last edge; ``run_peak_allocated`` keeps the
run's). At each closing edge: allocated and reserved then (the memory kept across steps), and the counters
``num_alloc_retries`` (the allocator freed its cache and retried: memory was short) and ``num_ooms``. Reading
them is a host-side dictionary of the allocator's counters (no device synchronisation), a few tens of µs at
an edge every ``window`` steps. Nothing is read where CUDA was never initialised (a CPU loop).
"""

from __future__ import annotations

import weakref
from collections import deque

import torch
from stepscope.capture.cycle import MEMORY_KEYS
from stepscope.capture.oom import attach_observer

MIB = float(1 << 20)
KEPT = 64  # closing edges kept (the creep slope is fitted over them)
CREEP_MIN_EDGES = 3
KEYS = MEMORY_KEYS  # those a telemetry may carry


def read(reset: bool = True) -> dict | None:
    """The current device's counters, its peaks reset after reading when ``reset``; None without CUDA."""
    if not torch.cuda.is_initialized():  # no CUDA work was ever queued (and no driver call is made)
        return None
    s = torch.cuda.memory_stats()
    out = {"allocated": s.get("allocated_bytes.all.current", 0), "reserved": s.get("reserved_bytes.all.current", 0),
           "peak_allocated": s.get("allocated_bytes.all.peak", 0), "peak_reserved": s.get("reserved_bytes.all.peak", 0),
           "retries": s.get("num_alloc_retries", 0), "ooms": s.get("num_ooms", 0)}
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return out


_live: weakref.WeakSet[MemoryWindows] = weakref.WeakSet()  # the process's windows (the device's peaks are one)


class MemoryWindows:
    """The windows' readings (module docstring). Several in one process (the demonstration trainer's log
    windows beside its stepscope.schedule's) share the device's peak counters: a reset at one's edge first
    hands the peaks so far to the others, so each window's peak is the peak since its own last edge."""

    def __init__(self) -> None:
        self.edges: deque[tuple[int, dict]] = deque(maxlen=KEPT)  # (step, reading) at each closing edge
        self.since = 0  # closing edges counted since the last telemetry's reset
        self.count = 0  # closing edges in all
        self.run_peak_allocated = 0
        self.run_peak_reserved = 0
        self._carried = (0, 0)  # the peaks (allocated, reserved) that another's reset took since this edge
        _live.add(self)

    def edge(self, step: int, closing: bool) -> None:
        r = read(reset=False)
        if r is None:
            return
        for w in list(_live):
            if w is not self:
                w._carried = (max(w._carried[0], r["peak_allocated"]), max(w._carried[1], r["peak_reserved"]))
        torch.cuda.reset_peak_memory_stats()
        r["peak_allocated"] = max(r["peak_allocated"], self._carried[0])
        r["peak_reserved"] = max(r["peak_reserved"], self._carried[1])
        self._carried = (0, 0)
        attach_observer()  # CUDA is initialised: out-of-memory captures can take the snapshot at the failure
        if closing:
            self.edges.append((step, r))
            self.count += 1
            self.since += 1
            self.run_peak_allocated = max(self.run_peak_allocated, r["peak_allocated"])
            self.run_peak_reserved = max(self.run_peak_reserved, r["peak_reserved"])

    def take(self) -> None:
        """The windows so far are counted for one cycle: the next telemetry starts after them."""
        self.since = 0

    def telemetry(self, windows: int | None = None) -> dict:
        """Flat numbers (KEYS) over the last ``windows`` closing edges (default: those since ``take``): the
        largest peaks, allocated and reserved at the last edge, the run's retries and OOMs so far, and the
        slope of allocated at the edges over the kept edges (MiB per step; from CREEP_MIN_EDGES edges on)."""
        n = min(self.since if windows is None else windows, len(self.edges))
        if not self.edges:
            return {}
        recent = list(self.edges)[-n:] if n else list(self.edges)[-1:]
        last = self.edges[-1][1]
        out = {"mem_peak_allocated_mib": max(r["peak_allocated"] for _, r in recent) / MIB,
               "mem_peak_reserved_mib": max(r["peak_reserved"] for _, r in recent) / MIB,
               "mem_allocated_mib": last["allocated"] / MIB, "mem_reserved_mib": last["reserved"] / MIB,
               "mem_alloc_retries": float(last["retries"]), "mem_ooms": float(last["ooms"])}
        slope = creep_slope([(s, r["allocated"]) for s, r in self.edges])
        if slope is not None:
            out["mem_creep_mib_per_step"] = max(slope / MIB, 0.0)
        return out


def creep_slope(points: list[tuple[int, int]]) -> float | None:
    """Least-squares bytes per step of (step, allocated) points; None for fewer than CREEP_MIN_EDGES."""
    if len(points) < CREEP_MIN_EDGES:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    var = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / var if var else None


def merge(before: dict, after: dict) -> dict:
    """A cycle's counters from the windows before it and after it: the larger peaks, the rest the later's."""
    out = {**before, **after}
    for k in ("mem_peak_allocated_mib", "mem_peak_reserved_mib"):
        if k in before and k in after:
            out[k] = max(before[k], after[k])
    return out

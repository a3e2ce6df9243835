"""Which profiled steps represent the run: the trust gate in front of every verdict.

    kept, cold = representative_steps(trace, windows)   # cold: ColdStart | None

A profiled window that holds the process's first CUDA work (context creation, lazy loading of kernel modules,
cuDNN autotuning, the caching allocator's first growth) has steps many times slower than the run's: the
classic "cudaLaunchKernel is 99.8% of the time" trace. Such steps say nothing about the run, so they are
left out of the verdict and named instead. A step is cold when it is more than COLD_RATIO times the median
of the other steps and at least COLD_MIN_MS longer, or when it loads CUDA modules (``cuModuleLoad*``,
``cuLibraryLoad*``) and is more than 1.5 times that median. If every step would go, none is left out (the
finding then says that the whole window is cold). A trace without GPU events has none of these causes: a slow
step there is the host's own noise (another process on the core), not a cold start, and every step is kept.
Torch-free.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
from stepscope.analysis.columns import runtime_columns
from stepscope.analysis.events import ParsedTrace, rows_named, sorted_times
from stepscope.analysis.per_trace import per_trace
from stepscope.analysis.steps import StepWindow

COLD_RATIO = 3.0
COLD_MIN_MS = 5.0
MODULE_LOADS = ("cuModuleLoad", "cuLibraryLoad", "cudaLibraryLoad", "cuModuleGetFunction")


@dataclass(frozen=True)
class ColdStart:
    steps: tuple[int, ...]  # ProfilerStep numbers left out
    cold_ms: float  # mean duration of those steps
    warm_ms: float  # median of the others
    module_loads: int  # CUDA module loads inside them
    whole_window: bool  # every step looked cold: nothing was left out


@per_trace
def _load_starts(trace: ParsedTrace) -> np.ndarray:
    """The starts of the trace's CUDA module loads, sorted."""
    rows = rows_named(trace.runtime, lambda name: name.startswith(MODULE_LOADS))
    return sorted_times(runtime_columns(trace).start[rows])


def _loads_within(trace: ParsedTrace, w: StepWindow) -> int:
    starts = _load_starts(trace)
    return int(np.searchsorted(starts, w.host_end, side="left") - np.searchsorted(starts, w.host_start, side="left"))


def _median_without(ordered: list[float], d: float) -> float:
    """``statistics.median`` of ``ordered`` (sorted) less one element equal to ``d``: the same arithmetic,
    without a pass over the others for every step."""
    p = bisect_left(ordered, d)
    m = len(ordered) - 1

    def at(j: int) -> float:  # the j-th of the others, in order
        return ordered[j] if j < p else ordered[j + 1]

    if m == 0:
        raise statistics.StatisticsError("no median for empty data")
    return at(m // 2) if m % 2 else (at(m // 2 - 1) + at(m // 2)) / 2


def representative_steps(trace: ParsedTrace, windows: list[StepWindow]) -> tuple[list[StepWindow], ColdStart | None]:
    if len(windows) < 2 or not trace.has_gpu:
        return windows, None
    durs = [w.dur / 1e3 for w in windows]
    cold = []
    ordered = sorted(durs)
    for i, w in enumerate(windows):
        others = _median_without(ordered, durs[i])
        slow = durs[i] > COLD_RATIO * others and durs[i] - others >= COLD_MIN_MS
        loads = _loads_within(trace, w) if durs[i] > 1.5 * others else 0
        if slow or loads:
            cold.append(i)
    if not cold:
        return windows, None
    kept = [w for i, w in enumerate(windows) if i not in cold]
    whole = not kept
    warm = statistics.median(d for i, d in enumerate(durs) if i not in cold) if kept else min(durs)
    info = ColdStart(tuple(windows[i].number for i in cold), statistics.mean(durs[i] for i in cold), warm,
                     sum(_loads_within(trace, windows[i]) for i in cold), whole)
    return (windows if whole else kept), info

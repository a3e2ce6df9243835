"""Step windows: which GPU work belongs to which training step, and when each step really ends.

A step's GPU work is the device activity whose launch (the runtime call with the same ``correlation`` id:
``cudaLaunchKernel``, ``cudaGraphLaunch``, ``cudaMemcpyAsync``, ...) ran on the host inside that step's
``ProfilerStep#N`` range. One ``cudaGraphLaunch`` correlates with every kernel of the graph.

The window of step i is ``[start_i, end_i]`` with

    end_i   = max(host end of ProfilerStep i, end of the last device activity launched in step i)
    start_i = max(host start of ProfilerStep i, end_{i-1})

so consecutive windows tile the timeline and a window's length is the time between two step completions:
the real step time whether the host or the GPU is the slower side. A whole-step CUDA graph's host range is
tiny and its GPU work runs long after it; with the GPU lagging behind the host by a step or more, the host
ranges overlap the GPU work of earlier steps. For the first step, ``end_{-1}`` is where the device work that
was launched before the profiled steps (warm-up steps, whose launches are not in the trace) finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from stepscope.analysis.columns import device_columns, launch_columns
from stepscope.analysis.events import DeviceEvent, DeviceEvents, ParsedTrace
from stepscope.analysis.per_trace import per_trace

_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


@dataclass(frozen=True, eq=False)
class StepWindow:
    number: int  # N of ProfilerStep#N
    host_start: float
    host_end: float
    start: float
    end: float
    # the device activity launched by this step: its rows in the trace's (``activity``: trace.device, and
    # columns.device_columns), in trace order, for the passes that read them as columns
    rows: np.ndarray = field(repr=False)
    activity: Sequence[DeviceEvent] = field(repr=False)

    @property
    def dur(self) -> float:
        return self.end - self.start

    @property
    def device(self) -> tuple[DeviceEvent, ...]:
        """The device activity launched by this step, as event tuples (made when asked for)."""
        if isinstance(self.activity, DeviceEvents):
            return tuple(self.activity.at(self.rows))
        return tuple(map(self.activity.__getitem__, self.rows.tolist()))

    def _key(self) -> tuple:
        return self.number, self.host_start, self.host_end, self.start, self.end

    def __eq__(self, other) -> bool:
        if not isinstance(other, StepWindow):
            return NotImplemented
        return self._key() == other._key() and self.device == other.device

    def __hash__(self) -> int:
        return hash(self._key())


def device_rows(windows: list[StepWindow]) -> np.ndarray:
    """The rows (in the trace's device activity) of the windows' activity, window by window, each in trace
    order: ``[d for w in windows for d in w.device]`` as indices."""
    return np.concatenate([w.rows for w in windows]) if windows else _NO_ROWS


def window_bounds(windows: list[StepWindow], host: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The windows' [start, end) (``host``: their host ranges) as two float64 arrays, in the windows' order:
    what IntervalSet.lengths_within and gaps_of take to answer for every step at once."""
    if host:
        return (np.array([w.host_start for w in windows], dtype=np.float64),
                np.array([w.host_end for w in windows], dtype=np.float64))
    return (np.array([w.start for w in windows], dtype=np.float64),
            np.array([w.end for w in windows], dtype=np.float64))


def step_windows(trace: ParsedTrace) -> list[StepWindow]:
    """One window per ProfilerStep, in order. On a CPU-only trace, the windows are the host ranges."""
    return list(_windows(trace))


@per_trace
def _windows(trace: ParsedTrace) -> tuple[StepWindow, ...]:
    """step_windows' windows, made once per trace: the analysis and the tab's step table both ask."""
    return tuple(_make_windows(trace))


def _make_windows(trace: ParsedTrace) -> list[StepWindow]:
    if not trace.has_gpu:
        return [StepWindow(s.number, s.start, s.end, s.start, s.end, _NO_ROWS, ()) for s in trace.steps]
    own, unattributed, last_end = _device_by_step(trace)
    dev = device_columns(trace)

    first = trace.steps[0]
    first_own = float(dev.start[own[0]].min()) if own[0].size else first.end
    # Work launched before the profiled steps (unknown launch, or a launch before step 0) that the GPU
    # was still running when step 0 began.
    prior = unattributed[dev.start[unattributed] < first_own]
    prior_end = float(dev.end[prior].max()) if prior.size else first.start

    windows = []
    prev_end = prior_end
    for step, mine, latest in zip(trace.steps, own, last_end, strict=True):
        end = max(step.end, latest)
        start = max(step.start, prev_end)
        if start >= end:  # the GPU finished this step's work before the previous window closed
            start = step.start
        windows.append(StepWindow(step.number, step.start, step.end, start, end, mine, trace.device))
        prev_end = end
    return windows


def launch_steps(trace: ParsedTrace) -> np.ndarray:
    """Per device activity (trace.device's order), the index of the step whose host range holds its launch
    (the last step begun at or before it, if it has not ended), -1 for none or no launch in the trace; for
    all activities at once."""
    steps = trace.steps
    launched_at = launch_columns(trace).start  # NaN: no launch
    step_ends = np.array([s.end for s in steps], dtype=np.float64)
    i = np.searchsorted(np.array([s.start for s in steps], dtype=np.float64), launched_at, side="right") - 1
    return np.where((i >= 0) & (launched_at < step_ends[np.maximum(i, 0)]), i, -1)  # NaN: no launch, -1


def _device_by_step(trace: ParsedTrace) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
    """Per step, the rows of the device activity whose launch ran inside its host range (``launch_steps``),
    in trace order; the rows of the rest; and per step the latest end of its activity (-inf for
    none). Looked up for all activities at once."""
    steps = trace.steps
    step_of = launch_steps(trace)
    order = np.argsort(step_of, kind="stable")
    order.flags.writeable = False  # the windows' rows are views of it
    bounds = np.searchsorted(step_of[order], np.arange(-1, len(steps) + 1)).tolist()
    groups = [order[a:b] for a, b in zip(bounds, bounds[1:])]
    # each step's latest end at once: a step's activity is one run of ``order``, and the steps without any
    # lie between runs, so each run of a step that has some ends where the next such step's begins
    ends = device_columns(trace).end[order]
    lo, hi = np.asarray(bounds[1:-1]), np.asarray(bounds[2:])
    latest = np.full(len(steps), -np.inf)
    owns = hi > lo
    if owns.any():
        latest[owns] = np.maximum.reduceat(ends, lo[owns])
    return groups[1:], groups[0], latest.tolist()

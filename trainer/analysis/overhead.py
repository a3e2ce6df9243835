"""How much the profiler itself slowed the host in a trace: what was recorded, and a per-event cost model.

    rec = recording(trace)                       # Recording(with_stack=True, record_shapes=True, ...)
    est = host_inflation(trace, windows)         # Inflation(ms_per_step=21.3, low=..., high=...)

Kernels run as fast under the profiler as without it, but every recorded host event costs the host time:
an operator with its input shapes, a Python function frame or a call of a built-in (with_stack traces every
Python call), a CUDA runtime call (CUPTI's callback), an allocation (profile_memory). So a profiled step's host side is longer than the
same step's without the profiler, and read naively a launch-bound step looks more launch-bound and a busy
GPU looks idle. The model charges each recorded event a fixed host cost:

    inflation per step = host speed x sum over kinds k of (events of kind k per step) x COST_US[k]

with one bound the trace itself sets: a call of a built-in cannot have cost the host more than the time
to the next such call, less the least such a call takes without the profiler (MIN_CALL_US). In a
tight Python loop (per-sample metrics, ``acc += math.sqrt(i)``) the recorded calls are a few tenths of a
µs apart and that spacing, which differs from host to host by 2x, is the better measure of their cost.
The same events cost a slower host more: "host speed" is the trace's median kernel-launch call
(``cudaLaunchKernel``) over REFERENCE_LAUNCH_US, the median on the host the costs were fitted on (1 for
CPU-only traces). COST_US was fitted on an H100 host (torch 2.11) against the same steps timed without the
profiler, over several models and causes (BENCHMARKS.md, "Profiler overhead model"); UNCERTAINTY is the
relative spread of that fit, which the analysis turns into a range of unprofiled figures and, where the range
crosses a verdict boundary, a line that says so. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from stepscope.analysis.columns import op_columns, runtime_columns
from stepscope.analysis.events import MemoryColumns, ParsedTrace, sorted_times
from stepscope.analysis.per_trace import per_trace
from stepscope.analysis.steps import StepWindow

# µs of host time per recorded event, with record_shapes, profile_memory and with_stack on (see docstring).
# A Python function frame is dear to record, a call of a built-in cheap; runtime calls and allocations come
# with operators in fixed proportions, so the fit gives them no cost of their own.
COST_US = {"op": 2.28, "frame": 5.22, "builtin": 0.42, "runtime": 0.0, "memory": 0.0}
REFERENCE_LAUNCH_US = 7.0
HOST_SPEED_RANGE = (0.4, 2.5)  # a launch median outside this range says more about the launches than the host
UNCERTAINTY = 0.30  # relative: the fit's residual spread over the calibration set
# µs: a Python loop iteration that calls a built-in, unprofiled, on a fast host (0.09-0.12 µs measured on
# the H100 hosts' Xeons, so this leaves the bound loose)
MIN_CALL_US = 0.05


@dataclass(frozen=True)
class Recording:
    """What the trace was recorded with, as its events show."""

    with_stack: bool  # python_function events
    record_shapes: bool  # "Input Dims" on operators
    profile_memory: bool  # [memory] events

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Inflation:
    """The profiler's estimated host cost per step, in ms, with its range."""

    ms_per_step: float
    low: float
    high: float
    events_per_step: dict  # kind -> mean count per step
    in_data_ms: float = 0.0  # the part of ms_per_step inside data-loading spans (in-process loading)
    host_speed: float = 1.0

    def to_dict(self) -> dict:
        return {"ms_per_step": round(self.ms_per_step, 4), "low": round(self.low, 4),
                "high": round(self.high, 4), "host_speed": round(self.host_speed, 3),
                "events_per_step": {k: round(v, 1) for k, v in self.events_per_step.items()}}


def recording(trace: ParsedTrace) -> Recording:
    return Recording(with_stack=bool(trace.python_calls or trace.python_builtins), record_shapes=trace.recorded_shapes,
                     profile_memory=bool(trace.memory))


def _index_bounds(sorted_starts: np.ndarray, ranges: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """For each range [lo, hi): the positions of its first start and of the first start past it."""
    lo, hi = np.array(ranges, dtype=np.float64).reshape(-1, 2).T
    return np.searchsorted(sorted_starts, lo), np.searchsorted(sorted_starts, hi)


def _count_within(sorted_starts: np.ndarray, ranges: list[tuple[float, float]]) -> int:
    """How many of the starts fall in [lo, hi) of each range, summed."""
    if not ranges:
        return 0
    first, past = _index_bounds(sorted_starts, ranges)
    return int((past - first).sum())


@per_trace
def _kinds(trace: ParsedTrace) -> dict[str, np.ndarray]:
    """The start times of the recorded host events of each kind, sorted."""
    return {"op": sorted_times(op_columns(trace).start), "frame": np.asarray(trace.python_calls, dtype=np.float64),
            "builtin": np.asarray(trace.python_builtins, dtype=np.float64),
            "runtime": sorted_times(runtime_columns(trace).start), "memory": sorted_times(MemoryColumns.of(trace.memory).field("ts"))}


def events_per_step(trace: ParsedTrace, windows: list[StepWindow]) -> dict[str, float]:
    """Mean number of recorded host events of each kind inside the steps' host ranges."""
    n = max(len(windows), 1)
    ranges = [(w.host_start, w.host_end) for w in windows]
    return {k: _count_within(starts, ranges) / n for k, starts in _kinds(trace).items()}


def host_speed(median_launch_us: float | None) -> float:
    """How much slower (>1) or faster (<1) than the fitting host this trace's host records events."""
    if not median_launch_us:
        return 1.0
    lo, hi = HOST_SPEED_RANGE
    return min(hi, max(lo, median_launch_us / REFERENCE_LAUNCH_US))


def _costs_us(starts: np.ndarray, cost_us: float, spaced: bool) -> np.ndarray:
    """Each event's charged cost; `spaced`: at most the time to the next event, less MIN_CALL_US."""
    costs = np.full(len(starts), cost_us)
    if spaced and len(starts) > 1:
        room = np.maximum(np.diff(starts) - MIN_CALL_US, 0.0)
        costs[:-1] = np.minimum(costs[:-1], room)
    return costs


def _sum_within(starts: np.ndarray, cumulative: np.ndarray, ranges: list[tuple[float, float]]) -> float:
    """The costs of the events starting in [lo, hi) of each range, summed (`cumulative` starts at 0)."""
    if not ranges or not len(starts):
        return 0.0
    first, past = _index_bounds(starts, ranges)
    return float((cumulative[past] - cumulative[first]).sum())


def host_inflation(trace: ParsedTrace, windows: list[StepWindow], median_launch_us: float | None,
                   data_ranges=()) -> Inflation:
    """The model's host cost per step; `data_ranges` (start, end) are the data-loading spans, whose share of
    the cost is reported apart."""
    counts = events_per_step(trace, windows)
    speed = host_speed(median_launch_us)
    n = max(len(windows), 1)
    steps = [(w.host_start, w.host_end) for w in windows]
    ms = in_data = 0.0
    for k, starts in _kinds(trace).items():
        if COST_US[k]:
            cumulative = np.concatenate(([0.0], np.cumsum(_costs_us(starts, speed * COST_US[k], k == "builtin"))))
            ms += _sum_within(starts, cumulative, steps) / n / 1e3
            in_data += _sum_within(starts, cumulative, list(data_ranges)) / n / 1e3
    return Inflation(ms, ms * (1 - UNCERTAINTY), ms * (1 + UNCERTAINTY), counts, min(in_data, ms), speed)

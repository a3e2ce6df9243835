"""Analyse only part of a trace: a window of ProfilerStep numbers, or a time range.

    parsed = select(parse_trace_file(path, "w", "1"), StepSelection(steps=(3, 8)))      # #3 .. #7
    parsed = select(parsed, StepSelection(time_ms=(120.0, 480.0)))   # steps starting 120-480 ms in
    stepscope analyze logs/run --steps 3:8 --time-range 120:480       # the same from the command line

``steps=(a, b)`` keeps ProfilerStep#N with a <= N < b, like a Python slice (either side None: open).
``time_ms=(t0, t1)`` keeps the steps whose host range starts at t0 <= start < t1 ms after the trace's first
event. Both together keep the steps that pass both. The events kept are those that can matter to the kept
steps' windows: from the first kept step's host start to the end of the last device work launched in the
kept steps (or the last step's host end, if later). Device work launched before the first kept step is kept
when it still runs then, and counts as work launched before the profiled steps (see steps.py). Python frame
starts are kept within the same range. Raises TraceError when no step is left. Pure, torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from stepscope.analysis.columns import device_columns
from stepscope.analysis.events import DeviceEvents, HostEvents, MemoryColumns, ParsedTrace, Times
from stepscope.analysis.steps import launch_steps
from stepscope.trace.errors import TraceError


@dataclass(frozen=True)
class StepSelection:
    steps: tuple[int | None, int | None] | None = None
    time_ms: tuple[float | None, float | None] | None = None

    def __bool__(self) -> bool:
        return self.steps is not None or self.time_ms is not None

    def describe(self) -> str:
        parts = []
        if self.steps is not None:
            parts.append(f"steps {_side(self.steps[0])}:{_side(self.steps[1])}")
        if self.time_ms is not None:
            parts.append(f"time {_side(self.time_ms[0])}:{_side(self.time_ms[1])} ms")
        return " and ".join(parts)


def _side(v) -> str:
    return "" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def _inside(v: float, lo, hi) -> bool:
    return (lo is None or v >= lo) and (hi is None or v < hi)


def select(trace: ParsedTrace, sel: StepSelection) -> ParsedTrace:
    """``trace`` restricted to the selected steps and the events that matter to them (module docstring)."""
    if not sel:
        return trace
    kept = [i for i, s in enumerate(trace.steps)
            if (sel.steps is None or _inside(s.number, *sel.steps))
            and (sel.time_ms is None or _inside(s.start / 1e3, *sel.time_ms))]
    if not kept:
        numbers = [s.number for s in trace.steps]
        raise TraceError(f"{trace.worker}.{trace.span}: no ProfilerStep#N in {sel.describe()} (the trace has "
                         f"steps {min(numbers)}..{max(numbers)}, {trace.steps[-1].end / 1e3:.1f} ms)")
    steps = tuple(trace.steps[i] for i in kept)
    lo = steps[0].start
    hi = max(s.end for s in steps)
    mine = np.isin(launch_steps(trace), kept)  # the activity launched in the kept steps
    if mine.any():
        hi = max(hi, float(device_columns(trace).end[mine].max()))

    def between(events):
        if isinstance(events, (HostEvents, DeviceEvents)):
            return events.take((events.end >= lo) & (events.start <= hi))
        return tuple(e for e in events if e.end >= lo and e.start <= hi)

    def starts_between(times):
        return Times(times).between(lo, hi)

    return replace(
        trace, steps=steps, ops=between(trace.ops), annotations=between(trace.annotations),
        runtime=between(trace.runtime), device=between(trace.device), data_spans=between(trace.data_spans),
        memory=_memory_between(trace.memory, lo, hi),
        python_calls=starts_between(trace.python_calls), python_builtins=starts_between(trace.python_builtins),
        model_spans=tuple(m for m in trace.model_spans if m[1] >= lo and m[0] <= hi),
        module_frames=between(trace.module_frames))


def _memory_between(memory, lo: float, hi: float) -> MemoryColumns:
    cols = MemoryColumns.of(memory)
    ts = np.asarray(cols.field("ts"), dtype=np.float64)
    return cols.take(np.flatnonzero((ts >= lo) & (ts <= hi)))

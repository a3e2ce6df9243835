"""Keep torch-tb-profiler 0.4.3 from building a zero-length step once it sees runtime events.

Once launches are visible as ``runtime`` events, the plugin stretches each step to the end of the GPU
work that the step launched, and starts the next step no earlier than that
(``profiler/event_parser.py:300-390``). A step that launched no GPU work and ended on the host before
the previous step's kernels finished therefore gets length 0, and the Overview divides by it:
``ZeroDivisionError`` at ``profiler/run_generator.py:87`` (a guard was proposed upstream in kineto
PR #941; no release has it). The untouched trace never got there, because without runtime events the plugin keeps the
host spans (``event_parser.py:353-375``).

``unlink_with`` replays the plugin's step arithmetic and, while some kept step would be
zero-length, unlinks the launches that cause it: those of earlier steps whose GPU work ends at or after
that step's host end. An unlinked launch still counts as Runtime; its kernels are shown the way 0.4.3
showed every kernel before (under the call-tree root, without an operator).

    spans = step_spans_of(host_steps, launches, orphan_ends)  # the (start, end) of each step the plugin keeps
    cut = unlink_with(host_steps, launches_of, runtime)        # indices of runtime events to unlink
    # `runtime`: indices of the events the plugin reads as category "runtime"; launches_of(linked indices,
    # sorted) -> (Launches: columns sorted by start, the ends of the device spans of no linked launch), from
    # stream_plan.py's columns. Both work on columns; the plain loop over launches that they replace is the
    # tests' reference (tests/reference/dict_rewrite.py).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np
from stepscope.trace.vocabulary import OPERATOR_CATEGORIES

HOST_CATEGORIES = OPERATOR_CATEGORIES | {"python"}  # what sets the plugin's cpu_min/max_ts


class Launches(NamedTuple):
    """The linked launches as columns, sorted by start, then by index (a trace holds hundreds of thousands)."""
    index: np.ndarray  # position in the event list
    start: np.ndarray
    end: np.ndarray
    device_start: np.ndarray  # start of the first device event it launched
    device_end: np.ndarray  # end of the last one
    n_device: np.ndarray  # how many: the plugin's tail-step rule counts device events, not launches


def step_spans_of(steps: list[tuple[float, float]], launches: Launches,
                  orphan_ends: np.ndarray) -> list[tuple[float, float]]:
    """The steps the plugin would show (a port of ``StepParser._find_device_steps`` and
    ``_update_steps_duration``, tail removal included), from the host steps, the linked launches and the ends
    of the device spans of no linked launch. The plugin walks steps and launches together: at each launch it
    moves on to the next step while the launch lies past the step's end, and matches the launch to the step
    it stands at where the launch lies within it. So each step is left at the first launch from the one
    that reached it that lies past its end (``_reached``), and each launch is matched or not against the
    last step reached by then."""
    big, small = float(sys.maxsize), float(-sys.maxsize - 1)
    n = len(steps)
    if not n or not len(launches.index):
        return steps
    host_start = np.array([s for s, _ in steps], dtype=np.float64)
    host_end = np.array([e for _, e in steps], dtype=np.float64)
    at = np.searchsorted(_reached(steps, launches.start, launches.end), np.arange(len(launches.index)),
                         side="right") - 1
    step = np.minimum(at, n - 1)
    matched = (at < n) & (launches.start >= host_start[step]) & (launches.end <= host_end[step])
    if not matched.any():
        return steps
    lo, hi = np.full(n, big), np.full(n, small)
    np.fmin.at(lo, step[matched], launches.device_start[matched])
    np.fmax.at(hi, step[matched], launches.device_end[matched])
    count = np.zeros(n, dtype=np.int64)
    np.add.at(count, step[matched], launches.n_device[matched])
    prev_end = steps[0][0]
    if lo[0] != big:
        # Device work launched outside every step (before the trace window) that ended before step 0's.
        ends = np.concatenate((orphan_ends, launches.device_end[~matched]))
        ends = ends[ends < lo[0]]
        if len(ends):
            prev_end = max(prev_end, float(ends.max()))
    out = []
    for (start_h, end_h), dev_start, dev_end in zip(steps, lo.tolist(), hi.tolist()):
        start = max(prev_end, start_h)
        end = max(end_h, start) if dev_start == big else max(end_h, dev_end, start)
        out.append((start, end))
        prev_end = end
    launched = np.flatnonzero(count > 0)
    last = int(launched[-1]) if len(launched) else -1
    if len(out) > 1 and last >= 0:
        keep = last + 1
        if last > 0 and count[last - 1] * 0.8 > count[last]:
            keep = last
        out = out[:keep]
    return out


def _reached(steps: list[tuple[float, float]], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each step k (and one past the last), the first launch (by position in ``start``, sorted) at which
    the plugin's walk stands at it; len(start) where it never does. The walk leaves a step at a launch that
    starts at or after both the step's start and end, and does not end within it: one that starts after its
    end, or at its end and ends later."""
    reached = np.full(len(steps) + 1, len(start), dtype=np.int64)
    reached[0] = 0
    for k, (host_start, host_end) in enumerate(steps):
        here = int(reached[k])
        if here >= len(start):
            break
        if host_end >= host_start:
            after = int(np.searchsorted(start, host_end, side="right"))
            at_end = max(here, int(np.searchsorted(start, host_end, side="left")))
            later = np.flatnonzero(end[at_end:after] > host_end) if at_end < after else ()
            leave = at_end + int(later[0]) if len(later) else after
        else:  # a step that ends before it starts (no host events at all): left once a launch starts after it
            leave = int(np.searchsorted(start, host_start, side="left"))
        reached[k + 1] = max(here, leave)
    return reached


def unlink_with(steps: list[tuple[float, float]], launches_of, runtime: np.ndarray) -> set[int]:
    """Runtime events whose link to their kernels must be cut so that no step the plugin keeps is
    zero-length (empty in the common case: every step launches GPU work), given the host steps, the
    indices of the runtime events (sorted, each once) and ``launches_of(linked indices, sorted)`` ->
    (Launches, the ends of the orphan device spans)."""
    linked = runtime
    cut: set[int] = set()
    while True:
        launches, orphan_ends = launches_of(linked)
        spans = step_spans_of(steps, launches, orphan_ends)
        zero = next((k for k, (s, t) in enumerate(spans) if t <= s), None)
        if zero is None:
            return cut
        host_end = steps[zero][1]
        culprits = launches.index[(launches.device_end >= host_end) & (launches.start < host_end)]
        if not len(culprits):  # a zero-length host step: nothing launches across it, nothing to unlink
            return cut
        cut.update(culprits.tolist())
        linked = np.setdiff1d(linked, culprits, assume_unique=True)

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

    spans = step_spans_of(host_steps, launches, orphans)    # the (start, end) of each step the plugin keeps
    cut = unlink_with(host_steps, launches_of, runtime)      # indices of runtime events to unlink
    # `runtime`: indices of the events the plugin reads as category "runtime"; launches_of(linked indices)
    # -> (Launch tuples sorted by start, device spans of no linked launch), from stream_plan.py's columns
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from stepscope.trace.vocabulary import OPERATOR_CATEGORIES

HOST_CATEGORIES = OPERATOR_CATEGORIES | {"python"}  # what sets the plugin's cpu_min/max_ts


class Launch(NamedTuple):  # a trace holds hundreds of thousands: a tuple is made fastest
    index: int  # position in the event list
    start: float
    end: float
    device_start: float  # start of the first device event it launched
    device_end: float  # end of the last one
    n_device: int  # how many: the plugin's tail-step rule counts device events, not launches


def step_spans_of(steps: list[tuple[float, float]], launches: list[Launch],
                  orphans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The steps the plugin would show (a port of ``StepParser._find_device_steps`` and
    ``_update_steps_duration``, tail removal included), from the host steps, the linked launches (sorted by
    start) and the device spans of no linked launch."""
    big, small = float(sys.maxsize), float(-sys.maxsize - 1)
    device = [(big, small)] * len(steps)
    matched = [0] * len(steps)
    matched_launches: list[Launch] = []
    i_step = i_rt = 0
    lo, hi = big, small
    while i_step < len(steps) and i_rt < len(launches):
        rt = launches[i_rt]
        if rt.start < steps[i_step][0]:
            i_rt += 1
        elif rt.end <= steps[i_step][1]:
            lo, hi = min(lo, rt.device_start), max(hi, rt.device_end)
            matched[i_step] += rt.n_device
            matched_launches.append(rt)
            i_rt += 1
        elif rt.start < steps[i_step][1]:
            i_rt += 1
        else:
            device[i_step] = (lo, hi)
            i_step, lo, hi = i_step + 1, big, small
    if i_step < len(steps):
        device[i_step] = (lo, hi)
    if not matched_launches:
        return steps
    prev_end = steps[0][0]
    if device[0][0] != big:
        # Device work launched outside every step (before the trace window) that ended before step 0's.
        matched_ids = {r.index for r in matched_launches}
        unmatched = orphans + [(r.device_start, r.device_end) for r in launches if r.index not in matched_ids]
        prev_end = max([prev_end] + [end for _, end in unmatched if end < device[0][0]])
    out = []
    for (host_start, host_end), (dev_start, dev_end) in zip(steps, device):
        start = max(prev_end, host_start)
        end = max(host_end, start) if dev_start == big else max(host_end, dev_end, start)
        out.append((start, end))
        prev_end = end
    last = max((k for k in range(len(out)) if matched[k] > 0), default=-1)
    if len(out) > 1 and last >= 0:
        keep = last + 1
        if last > 0 and matched[last - 1] * 0.8 > matched[last]:
            keep = last
        out = out[:keep]
    return out


def unlink_with(steps: list[tuple[float, float]], launches_of, runtime_indices: set[int]) -> set[int]:
    """Runtime events whose link to their kernels must be cut so that no step the plugin keeps is
    zero-length (empty in the common case: every step launches GPU work), given the host steps and
    ``launches_of(linked indices)`` -> (launches sorted by start, orphan device spans)."""
    linked = set(runtime_indices)
    cut: set[int] = set()
    while True:
        launches, orphans = launches_of(linked)
        spans = step_spans_of(steps, launches, orphans)
        zero = next((k for k, (s, t) in enumerate(spans) if t <= s), None)
        if zero is None:
            return cut
        host_end = steps[zero][1]
        culprits = {r.index for r in launches if r.device_end >= host_end and r.start < host_end}
        if not culprits:  # a zero-length host step: nothing launches across it, nothing to unlink
            return cut
        cut |= culprits
        linked -= culprits

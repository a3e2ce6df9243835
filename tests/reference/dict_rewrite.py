"""The dict rewrite: a trace loaded whole and adapted event by event. A reference for the tests only.

    fixed = adapt_trace(trace)     # a new dict; `trace` itself is never modified
    stacks = call_stacks(events)   # {index of a cpu_op event: "a.py(3): f;b.py(9): main"}
    spans = plugin_step_spans(events, runtime)   # the (start, end) of each step the plugin keeps

The export rewrites traces streaming (stepscope.plugin_copy: stream_plan.py, stream_write.py), by the
rules that plugin_copy/rules.py explains; this is the plain reading of the same rules on a whole document, which
the tests hold the streamed copy to.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import NamedTuple

from stepscope.plugin_copy.rules import (
    COLLECTIVES,
    DEVICE_STEP_PREFIX,
    PLUGIN_OPERATOR,
    PLUGIN_RUNTIME,
    ROOT_EXTERNAL_ID,
    UNLINKED_KEY,
    is_dataloader_span,
)
from stepscope.plugin_copy.step_guard import HOST_CATEGORIES
from stepscope.plugin_copy.stream_callstack import PYTHON_FRAME, STACK_SEPARATOR
from stepscope.trace.vocabulary import (
    ANNOTATION_CATEGORIES,
    DEVICE_CATEGORIES,
    OPERATOR_CATEGORIES,
    STEP_PREFIX,
    TORCH_RUNTIME_CATEGORIES,
    category,
)
from stepscope.trace.vocabulary import category as _cat
from stepscope.trace.vocabulary import interval as _span

STEP_CATEGORIES = ANNOTATION_CATEGORIES | OPERATOR_CATEGORIES  # where a ProfilerStep#N may sit


def _external_id(e: dict):
    """The id the plugin reads: "external id" first, then "External id" (``trace.py:72-74``)."""
    args = e.get("args") or {}
    ext = args.get("external id")
    return args.get("External id") if ext is None else ext


def _becomes_tree_node(e: dict) -> bool:
    """Whether the plugin turns this (already rewritten) event into a node of a thread's call tree."""
    if e.get("ph") != "X":
        return False
    cat, name = _cat(e), str(e.get("name", ""))
    if cat in OPERATOR_CATEGORIES or cat == "python":  # "python": the plugin's own name for frames
        return True
    if cat in ANNOTATION_CATEGORIES:
        return name.startswith(STEP_PREFIX) or name in COLLECTIVES
    return cat == "python_function" and (e.get("args") or {}).get("Python module id") is not None


def _outside(span: tuple[float, float], steps: list[tuple[float, float]]) -> bool:
    return not any(a <= span[0] and span[1] <= b for a, b in steps)


def _straddles(inner: tuple[float, float], outer: tuple[float, float]) -> bool:
    (a, b), (c, d) = inner, outer
    return (a < c < b < d) or (c < a < d < b)


def _clean_dataloader_spans(events: list[dict]) -> list[int]:
    """Indices of DataLoader annotations that nest cleanly among their thread's tree nodes."""
    candidates = [i for i, e in enumerate(events) if e.get("ph") == "X" and _cat(e) == "user_annotation"
                  and is_dataloader_span(str(e.get("name", "")))]
    if not candidates:
        return []
    nodes_by_thread: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if _becomes_tree_node(e):
            nodes_by_thread[(e.get("pid"), e.get("tid"))].append(_span(e))
    spans = [(i, _span(events[i])) for i in candidates]
    clean = []
    for i, span in spans:
        thread = (events[i].get("pid"), events[i].get("tid"))
        others = nodes_by_thread[thread] + [s for j, s in spans if j != i and
                                            (events[j].get("pid"), events[j].get("tid")) == thread]
        if not any(_straddles(span, other) for other in others):
            clean.append(i)
    return clean


def _guard_required_fields(e: dict) -> dict:
    if "name" in e and (e.get("ph") != "X" or isinstance(e.get("cat"), str)):
        return e
    e = dict(e)
    e.setdefault("name", "")
    if e.get("ph") == "X" and not isinstance(e.get("cat"), str):
        e["cat"] = ""
    return e


def _with_args(e: dict, cat: str | None = None, **args) -> dict:
    out = dict(e)
    if cat is not None:
        out["cat"] = cat
    out["args"] = {**(out.get("args") or {}), **args}
    return out


def _set_external_id(e: dict, value) -> dict:
    # The plugin reads "external id" first (trace.py:72-74), so set whichever spelling is there.
    key = "external id" if "external id" in (e.get("args") or {}) else "External id"
    return _with_args(e, **{key: value})


def _rewrite_runtimes(events: list[dict]) -> set[int]:
    """Recategorise launches as ``runtime`` (in place in ``events``); return their indices.

    A launch whose External id names no tree node is re-pointed to the root (0), and so are the device
    events it launched: the plugin logs a warning for every kernel whose id differs from its launch's
    (``event_parser.py:142-147``), hundreds for one ``cudaGraphLaunch``.
    """
    node_ids = {_external_id(e) for e in events if _becomes_tree_node(e)}
    node_ids.discard(None)
    launched = {(e.get("args") or {}).get("correlation") for e in events
                if e.get("ph") == "X" and _cat(e) in DEVICE_CATEGORIES}
    steps = host_steps(events)
    runtime_indices, rooted_correlations = set(), set()
    for i, e in enumerate(events):
        if e.get("ph") == "X" and _cat(e) in TORCH_RUNTIME_CATEGORIES:
            if (e.get("args") or {}).get("correlation") not in launched and _outside(_span(e), steps):
                continue  # e.g. the profiler's own flush sync: not step work (see the module docstring)
            runtime_indices.add(i)
            events[i] = dict(e, cat=PLUGIN_RUNTIME)
            if _external_id(e) not in node_ids:
                events[i] = _set_external_id(events[i], ROOT_EXTERNAL_ID)
                rooted_correlations.add((e.get("args") or {}).get("correlation"))
    rooted_correlations.discard(None)
    if rooted_correlations:
        for i, e in enumerate(events):
            if (e.get("ph") == "X" and _cat(e) in DEVICE_CATEGORIES
                    and (e.get("args") or {}).get("correlation") in rooted_correlations
                    and _external_id(e) != ROOT_EXTERNAL_ID):
                events[i] = _set_external_id(e, ROOT_EXTERNAL_ID)
    return runtime_indices


def adapt_trace(trace: dict) -> dict:
    """A new trace dict that torch-tb-profiler 0.4.3 reads correctly (see the module docstring).

    Pure: ``trace`` is not modified. Events that need no change are shared with the input, so treat
    both as read-only.
    """
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        got = type(trace).__name__ if not isinstance(trace, dict) else f"keys {sorted(trace)[:6]}"
        raise ValueError(f"adapt_trace wants a Chrome trace dict with a 'traceEvents' list, got {got}")
    events = [_guard_required_fields(e) for e in trace["traceEvents"] if isinstance(e, dict)]

    for i, e in enumerate(events):
        if _cat(e) == "gpu_user_annotation" and str(e.get("name", "")).startswith(STEP_PREFIX):
            events[i] = dict(e, name=DEVICE_STEP_PREFIX + e["name"])

    for i in _clean_dataloader_spans(events):
        events[i] = _with_args(events[i], cat=PLUGIN_OPERATOR)

    runtime_indices = _rewrite_runtimes(events)

    for i in unlink_for_positive_steps(events, runtime_indices):
        args = dict(events[i].get("args") or {})
        args[UNLINKED_KEY] = args.pop("correlation", None)
        events[i] = dict(events[i], args=args)

    for i, stack in call_stacks(events).items():
        if "Call stack" not in (events[i].get("args") or {}):
            events[i] = _with_args(events[i], **{"Call stack": stack})

    out = dict(trace)
    out["traceEvents"] = events
    return out


def host_steps(events: list[dict]) -> list[tuple[float, float]]:
    """The host spans of the ``ProfilerStep#`` events, or of all host events when there are none."""
    steps = []
    lo, hi = float(sys.maxsize), float(-sys.maxsize - 1)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = category(e)
        if cat in STEP_CATEGORIES and str(e.get("name", "")).startswith(STEP_PREFIX):
            steps.append(_span(e))
        if cat in HOST_CATEGORIES:
            s, t = _span(e)
            lo, hi = min(lo, s), max(hi, t)
    steps.sort()
    return steps or [(lo, hi)]


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


def _launches(events: list[dict], runtime_indices: set[int]) -> tuple[list[Launch], list[tuple[float, float]]]:
    device_by_corr: dict = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and category(e) in DEVICE_CATEGORIES:
            device_by_corr[(e.get("args") or {}).get("correlation")].append(_span(e))
    launches, linked = [], set()
    for i in sorted(runtime_indices):
        corr = (events[i].get("args") or {}).get("correlation")
        spans = device_by_corr.get(corr)
        if spans:
            linked.add(corr)
            start, end = _span(events[i])
            launches.append(Launch(i, start, end, min(s[0] for s in spans), max(s[1] for s in spans), len(spans)))
    orphans = [s for corr, spans in device_by_corr.items() if corr not in linked for s in spans]
    return sorted(launches, key=lambda r: r.start), orphans


def plugin_step_spans(events: list[dict], runtime_indices: set[int]) -> list[tuple[float, float]]:
    """The steps the plugin would show, given which events it reads as runtime (a port of
    ``StepParser._find_device_steps`` and ``_update_steps_duration``, tail removal included)."""
    return step_spans_of(host_steps(events), *_launches(events, runtime_indices))


def unlink_for_positive_steps(events: list[dict], runtime_indices: set[int]) -> set[int]:
    """Runtime events whose link to their kernels must be cut so that no step the plugin keeps is
    zero-length. Empty in the common case (every step launches GPU work)."""
    return unlink_with(host_steps(events), lambda linked: _launches(events, linked), runtime_indices)


def call_stacks(events: list[dict]) -> dict[int, str]:
    """Map the index of each operator event that runs under Python frames to its call-stack string.

    An operator's stack is the chain of ``python_function`` frames open at the operator's start on the
    same (pid, tid), innermost first. Operators with no enclosing Python frame (autograd's backward
    thread, for instance) get no entry, exactly like the old traces.
    """
    frames_by_thread: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    ops_by_thread: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for i, e in enumerate(events):
        if e.get("ph") != "X":
            continue
        cat = category(e)
        key = (e.get("pid"), e.get("tid"))
        if cat == "python_function":
            start, end = _span(e)
            frames_by_thread[key].append((start, end, str(e.get("name", ""))))
        elif cat in OPERATOR_CATEGORIES:
            ops_by_thread[key].append((_span(e)[0], i))

    stacks: dict[int, str] = {}
    for key, ops in ops_by_thread.items():
        frames = frames_by_thread.get(key)
        if not frames:
            continue
        # Outer frames first when two start together, so that the open-frame stack stays nested.
        frames.sort(key=lambda f: (f[0], -f[1]))
        ops.sort()
        open_frames: list[tuple[float, float, str]] = []
        next_frame = 0
        cache: dict[tuple, str] = {}
        for op_start, index in ops:
            while next_frame < len(frames) and frames[next_frame][0] <= op_start:
                frame = frames[next_frame]
                while open_frames and open_frames[-1][1] < frame[0]:
                    open_frames.pop()
                open_frames.append(frame)
                next_frame += 1
            while open_frames and open_frames[-1][1] < op_start:
                open_frames.pop()
            chain = tuple(f[2] for f in reversed(open_frames) if f[1] >= op_start and PYTHON_FRAME.match(f[2]))
            if not chain:
                continue
            if chain not in cache:
                cache[chain] = STACK_SEPARATOR.join(chain)
            stacks[index] = cache[chain]
    return stacks

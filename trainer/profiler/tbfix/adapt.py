"""Rewrite a modern torch.profiler trace so that torch-tb-profiler 0.4.3 reports true numbers.

    from stepscope.profiler.tbfix import adapt_trace
    fixed = adapt_trace(trace)     # a new dict; `trace` itself is never modified

What 0.4.3 gets wrong on torch 2.x traces, and what is rewritten (plugin paths are relative to
``torch_tb_profiler/``, version 0.4.3):

1. Launches are ``cuda_runtime``/``cuda_driver`` events, categories missing from ``EventTypeMap``
   (``profiler/trace.py:38-53``), so ``create_trace_event`` drops them (``trace.py:217-219``). Without
   runtime nodes no kernel reaches an operator (``profiler/event_parser.py:133-160``,
   ``profiler/node.py:113-119``): device self/total time is 0 for every operator, the Runtime bucket is
   empty (``event_parser.py:277-278``) and the launch time falls into "CPU Exec"
   (``event_parser.py:286-290``). Rewritten to the category ``runtime``.
2. A launch outside every operator carries no ``External id`` (``cudaGraphLaunch``,
   ``cudaDeviceSynchronize``), or one of an annotation the plugin drops. The plugin would file it under
   that id and never attach it to a tree (``event_parser.py:86-94``), so its kernels, which 0.4.3
   showed under the call-tree root before, would vanish from the kernel-by-operator table. Its
   ``External id`` becomes 0: the plugin's own convention for "attach to the root"
   (``event_parser.py:156-159``). A call that launched nothing and runs outside every step on the
   host keeps its category, invisible as before: it is not step work (the largest is the profiler's own
   ``cudaDeviceSynchronize`` when it flushes the trace, 14-36 ms on the GPU-bound traces), yet the
   plugin, which moves steps onto the GPU's clock, would file the device-side step time under it, and
   once kernels and runtime cover every step the Overview's split restarts and reports the whole step
   as "Other" (``profiler/overall_parser.py:44-53``: an empty ``slots`` reads as "first role").
3. DataLoader spans (``enumerate(DataLoader)#...__next__``) are ``user_annotation`` events now, and the
   plugin keeps a user annotation only if it is a ``ProfilerStep#`` or a collective
   (``trace.py:189-194``), so the DataLoader bucket (``event_parser.py:279-282``) is 0 and the
   data-loading recommendation (``profiler/data.py:231-239``) never fires. A DataLoader span becomes
   ``cpu_op`` (a ``DataLoaderNode``, ``node.py:296-299``, never listed as an operator) when it nests
   cleanly on its thread; one that straddles an operator would break the thread's call tree
   (``profiler/op_tree.py:446-459``) and is left alone.
4. Operators carry no ``Call stack`` argument (``trace.py:94``); ``with_stack`` now writes separate
   ``python_function`` events. The string is rebuilt from them (see ``callstack.py``).
5. Seeing launches makes the plugin stretch steps to their GPU work, which can leave a step with no GPU
   work of its own zero-length and crash the Overview (see ``step_guard.py``). The few launches that
   would cause it are unlinked from their kernels.
6. Any event without ``name``, or a complete event without ``cat``, fails the whole file
   (``data.py:146``, ``trace.py:188``); such events get an empty name or category, and entries that are
   not JSON objects are dropped.

7. torch 2.11 also records each ``ProfilerStep#N`` on the GPU timeline (``gpu_user_annotation``, seen on
   single-GPU and NCCL DDP runs of our trainer). 0.4.3 takes every event of that name for a step
   (``profiler/event_parser.py``), so it sees steps 17, 17, 18, 18, 19 with zero-length duplicates, and the
   Overview divides by zero (``run_generator.py:87``): the worker does not load at all. The device-side copies
   are renamed ``GPU ProfilerStep#N``; they stay on the GPU timeline of the Trace view.

Everything else passes through unchanged, so every view the plugin showed before is still there. Left
alone on purpose: torch's ``fwdbwd`` flow events. 0.4.3 looks for ``forward_backward``
(``data.py:46``), but renaming them switches on its backward-module builder, which crashes on these
traces (``op_tree.py:292`` -> ``node.py:182``: a backward node without a start time).
"""

from __future__ import annotations

from collections import defaultdict

from ..trace.vocabulary import (
    ANNOTATION_CATEGORIES,
    DEVICE_CATEGORIES,
    OPERATOR_CATEGORIES,
    STEP_PREFIX,
    TORCH_RUNTIME_CATEGORIES,
)
from ..trace.vocabulary import category as _cat
from ..trace.vocabulary import span as _span
from .callstack import call_stacks
from .step_guard import host_steps, unlink_for_positive_steps

PLUGIN_RUNTIME = "runtime"
PLUGIN_OPERATOR = "cpu_op"
ROOT_EXTERNAL_ID = 0
COLLECTIVES = frozenset(f"{lib}:{op}" for lib in ("nccl", "gloo")
                        for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter"))
DEVICE_STEP_PREFIX = "GPU "  # "GPU ProfilerStep#N": no longer read as a host step by the plugin
UNLINKED_KEY = "stepscope unlinked correlation"  # where a cut correlation id is kept, for the reader


def is_dataloader_span(name: str) -> bool:
    """The plugin's own DataLoader test (``event_parser.py:280-281``, ``node.py:297-298``)."""
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#")


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

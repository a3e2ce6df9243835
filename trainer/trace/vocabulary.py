"""The vocabulary of torch.profiler's Chrome traces, in one place: event categories, the names that matter,
and the two accessors every reader of raw events uses. Torch-free.

    from stepscope.trace.vocabulary import category, interval, DEVICE_CATEGORIES
    if category(e) in DEVICE_CATEGORIES: start, end = interval(e)

Categories are compared lower-cased: old traces (torch 1.8/1.9, the plugin's own samples) write
``Operator``/``Runtime``/``Kernel``, current ones ``cpu_op``/``cuda_runtime``/``kernel``.
"""

from __future__ import annotations

# host operators: aten ops, our custom ops, autograd nodes (old traces: "Operator")
OPERATOR_CATEGORIES = frozenset({"cpu_op", "operator"})
# record_function ranges, ProfilerStep#N among them
ANNOTATION_CATEGORIES = frozenset({"user_annotation"})
# CUDA runtime/driver calls as torch 2.x writes them (torch-tb-profiler 0.4.3 does not know these two)
TORCH_RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
# ... and as the plugin (and old traces) write them
RUNTIME_CATEGORIES = TORCH_RUNTIME_CATEGORIES | {"runtime", "driver"}
# work on a GPU stream, and what the analysis calls each kind
DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
                "memset": "memset"}
DEVICE_CATEGORIES = frozenset(DEVICE_KINDS)
PYTHON_FUNCTION = "python_function"  # with_stack's Python frames

STEP_PREFIX = "ProfilerStep#"
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"  # torch's range around every optimizer.step() ("Optimizer.step#SGD.step")
# Where a trace's training steps come from: its ProfilerStep#N ranges; without those, its Optimizer.step#
# ranges; without either, its whole recorded window as one step (analysis/inferred_steps.py)
STEPS_FROM_PROFILER, STEPS_FROM_OPTIMIZER, STEPS_FROM_WINDOW = "ProfilerStep", "Optimizer.step", "window"
DATALOADER_PREFIX = "enumerate(DataLoader)"
DATA_RANGE = "data"  # record_function("data") around fetching the next batch (stepscope.loader, our trainer)
MEMORY_EVENT = "[memory]"  # profile_memory's instant events


def category(e: dict) -> str:
    """The event's category, lower-cased ("" when missing)."""
    return str(e.get("cat", "")).lower()


def interval(e: dict) -> tuple[float, float]:
    """(start, end) in the file's µs; a missing or negative duration counts as 0."""
    ts = float(e.get("ts", 0.0))
    return ts, ts + max(float(e.get("dur", 0.0) or 0.0), 0.0)

"""Training steps of a trace recorded without a schedule: ``torch.profiler.profile()`` around a loop, then
``prof.export_chrome_trace(...)``, has no ``ProfilerStep#N`` ranges. Torch-free.

    steps, source = infer_steps(annotations, [ops, runtime])   # ([(number, start, end), ...], "Optimizer.step")

torch records every optimizer step as an ``Optimizer.step#<Class>.step`` range (``user_annotation``), so
the steps are read from those when there are at least two:

    step k = [end of optimizer step k-1, end of optimizer step k]      k = 1 .. n-1

The boundary is where a scheduled loop calls ``prof.step()``: right after ``optimizer.step()``. What comes
after it (``zero_grad``, fetching the next batch, the forward) is the next step's, as in a ``ProfilerStep``
range, and consecutive steps tile the timeline. The part before the first optimizer step is left out: where
it starts depends on where the profiler was started in the loop, so it is no whole step. With a single
optimizer step, the window from the first recorded host event to its end is the step. Nested ranges (an
optimizer whose ``step`` calls its parent's) count once. A loop that steps several optimizers per iteration
(a GAN's discriminator and generator) has its steps end where the optimizer that stepped last in the trace
steps, which is the iteration's end when their classes differ; two optimizers of one class (two Adams) are
read as two steps per iteration.

Without any optimizer step (inference, a loop with a hand-written update), the whole recorded window is one
step: from the first recorded host event to the last.
"""

from __future__ import annotations

from collections.abc import Iterable

from stepscope.analysis.events import HostEvent
from stepscope.trace.vocabulary import OPTIMIZER_STEP_PREFIX
from stepscope.trace.vocabulary import STEPS_FROM_OPTIMIZER as FROM_OPTIMIZER
from stepscope.trace.vocabulary import STEPS_FROM_PROFILER as FROM_PROFILER
from stepscope.trace.vocabulary import STEPS_FROM_WINDOW as FROM_WINDOW

__all__ = ["FROM_OPTIMIZER", "FROM_PROFILER", "FROM_WINDOW", "NOTES", "infer_steps", "optimizer_steps"]

NOTES = {
    FROM_OPTIMIZER: "steps inferred from Optimizer.step# ranges (the trace has no ProfilerStep#): a step ends "
                    "where an optimizer step ends",
    FROM_WINDOW: "the trace has neither ProfilerStep# nor Optimizer.step# events: the whole recorded window is "
                 "read as one step",
}


def optimizer_steps(annotations: Iterable[HostEvent]) -> list[HostEvent]:
    """The outermost ``Optimizer.step#`` ranges, in time order."""
    ranges = sorted((a for a in annotations if a.name.startswith(OPTIMIZER_STEP_PREFIX)),
                    key=lambda a: (a.start, -a.end))
    outer: list[HostEvent] = []
    for a in ranges:
        if outer and a.start < outer[-1].end and a.tid == outer[-1].tid:
            continue  # inside the previous one
        outer.append(a)
    return outer


def infer_steps(annotations: Iterable[HostEvent],
                host: Iterable[Iterable[HostEvent]]) -> tuple[list[tuple[int, float, float]], str]:
    """Steps (number, start, end) for a trace without ProfilerStep# ranges (module docstring) and where they
    came from; ``host`` are the trace's other host events (operators, runtime calls, data spans). ([], "")
    when the trace records no host event at all."""
    annotations = list(annotations)
    opt = optimizer_steps(annotations)
    if opt:  # several optimizers: the one that steps last ends the iteration
        opt = [a for a in opt if a.name == opt[-1].name]
    if len(opt) >= 2:
        return [(k, opt[k - 1].end, opt[k].end) for k in range(1, len(opt))], FROM_OPTIMIZER
    start = end = None
    for events in (annotations, *host):
        for e in events:
            start = e.start if start is None else min(start, e.start)
            end = e.end if end is None else max(end, e.end)
    if start is None:
        return [], ""
    if opt and opt[0].end > start:
        return [(0, start, opt[0].end)], FROM_OPTIMIZER
    if end <= start:
        return [], ""
    return [(0, start, end)], FROM_WINDOW

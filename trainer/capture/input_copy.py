"""`stepscope.input_copy()`: the step's host-to-device copy of its batch, timed on the GPU for the schedule.

    sched = stepscope.schedule(wait=50, warmup=1, active=3)
    with torch.profiler.profile(schedule=sched, on_trace_ready=stepscope.trace_handler("logs/run")) as prof:
        for x, y in stepscope.loader(train_loader):
            with stepscope.input_copy():                       # the copy, timed on every unprofiled step
                x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
            ...
            prof.step()

Two CUDA events around the block, on the current stream, time the copy as the trainer's StepClock.copy does.
The schedule reads them at the edges of its windows of unprofiled steps, where it synchronizes anyway, so the
loop never waits for them. Each cycle's telemetry then carries ``copy_ms``, the copy's time per unprofiled
step, which the diagnosis takes as the step's host<->device transfer time (as for the trainer's runs, whose
step copies nothing else) instead of the copies of the few profiled steps: a pageable copy's speed drifts by
tens of percent from moment to moment (BENCHMARKS.md). Without a CUDA device, or without a stepscope
schedule, the block runs untimed. Costs two event records a step (a few µs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from stepscope.capture.schedule import StepscopeSchedule, latest


@contextmanager
def input_copy(schedule: StepscopeSchedule | None = None) -> Iterator[None]:
    """Time the block's copies for ``schedule`` (default: the stepscope schedule made last); see the module."""
    sched = schedule or latest()
    if sched is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        yield
        return
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    yield
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    sched.add_copy(start, end)

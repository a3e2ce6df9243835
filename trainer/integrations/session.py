"""A torch profiler driven by a framework's hooks, with stepscope's schedule and trace handler. Used by the
Lightning and Hugging Face callbacks.

    session = ProfilingSession("logs/run", ScheduleArgs(wait=1, warmup=1, active=3))
    session.start()        # when training starts
    session.step()         # after every optimizer step
    session.stop()         # when training ends: the last cycle is written, background work waited for

The schedule is ``stepscope.schedule`` (which also times the steps the profiler does not record) where this
stepscope has it, else ``torch.profiler.schedule`` with the same arguments. The handler is
``stepscope.trace_handler``; if it does work in the background, ``stop`` waits for it at most
``close_timeout`` seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScheduleArgs:
    """torch.profiler.schedule's arguments: skip ``skip_first`` steps, then per cycle wait, warm up, record
    ``active`` steps; ``repeat`` cycles (0: until training ends)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    skip_first: int = 0

    def kwargs(self) -> dict:
        return dict(self.__dict__)


def make_schedule(args: ScheduleArgs):
    """``stepscope.schedule(**args)`` where available, else ``torch.profiler.schedule(**args)``."""
    import stepscope

    schedule = getattr(stepscope, "schedule", None)
    if schedule is None:
        import torch

        schedule = torch.profiler.schedule
    return schedule(**args.kwargs())


def make_handler(dir_name: str | os.PathLike, worker_name: str | None = None, use_gzip: bool = True):
    import stepscope

    return stepscope.trace_handler(dir_name, worker_name=worker_name, use_gzip=use_gzip)


def activities() -> list:
    """CPU, and CUDA when a GPU is there."""
    import torch

    out = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        out.append(torch.profiler.ProfilerActivity.CUDA)
    return out


def close_handler(handler, timeout: float) -> None:
    """Wait for the handler's background work, if it has any, at most ``timeout`` seconds."""
    close = getattr(handler, "close", None)
    if callable(close):
        close(timeout)


# memory is recorded unless the user says otherwise, as stepscope.profile and the trainer do: the memory diagnosis
# beside the time verdict needs the allocator's [memory] events
MEMORY_ON = {"profile_memory": True}


@dataclass
class ProfilingSession:
    dir_name: str | os.PathLike
    schedule_args: ScheduleArgs = field(default_factory=ScheduleArgs)
    worker_name: str | None = None
    use_gzip: bool = True
    profile_options: dict = field(default_factory=dict)  # record_shapes, profile_memory, with_stack, ...
    close_timeout: float = 60.0
    handler: object = None
    prof: object = None
    schedule: object = None  # the schedule of the last start() (stepscope.schedule's keeps its cycles)

    def start(self) -> None:
        import torch

        if self.prof is not None:
            return
        self.handler = make_handler(self.dir_name, self.worker_name, self.use_gzip)
        self.schedule = make_schedule(self.schedule_args)
        self.prof = torch.profiler.profile(activities=activities(), schedule=self.schedule,
                                           on_trace_ready=self.handler, **{**MEMORY_ON, **self.profile_options})
        self.prof.start()

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()

    def stop(self) -> None:
        prof, self.prof = self.prof, None
        if prof is None:
            return
        try:
            prof.stop()
        finally:
            close_handler(self.handler, self.close_timeout)

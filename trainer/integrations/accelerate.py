"""accelerate: ``ProfileKwargs`` whose profiler uses stepscope's schedule and trace handler.

    from accelerate import Accelerator
    from stepscope.integrations.accelerate import profile_kwargs
    kwargs = profile_kwargs("logs/run")                 # wait=1, warmup=1, active=3, repeat=1
    accelerator = Accelerator(kwargs_handlers=[kwargs])
    with accelerator.profile() as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    kwargs.close()                                     # wait for the handler's background work, if any

It is accelerate's own ``ProfileKwargs`` (``schedule_option`` and ``on_trace_ready`` set, the recording
options passed through), whose profiler is built with ``stepscope.schedule`` where this stepscope has it.
"""

from __future__ import annotations

import os
from functools import partial

import torch
from accelerate.utils import ProfileKwargs
from stepscope.integrations.session import MEMORY_ON, ScheduleArgs, close_handler, make_handler, make_schedule


def _build(kwargs: ProfileKwargs) -> torch.profiler.profile:
    """``ProfileKwargs.build``, with the schedule from ``make_schedule``."""
    activities = None
    if kwargs.activities is not None:
        activities = [kwargs._get_profiler_activity(a) for a in kwargs.activities]
    schedule = make_schedule(ScheduleArgs(**kwargs.schedule_option)) if kwargs.schedule_option is not None else None
    return torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=kwargs.on_trace_ready,
                                  record_shapes=kwargs.record_shapes, profile_memory=kwargs.profile_memory,
                                  with_stack=kwargs.with_stack, with_flops=kwargs.with_flops,
                                  with_modules=kwargs.with_modules)


def profile_kwargs(dir_name: str | os.PathLike, *, wait: int = 1, warmup: int = 1, active: int = 3,
                   repeat: int = 1, skip_first: int = 0, worker_name: str | None = None, use_gzip: bool = True,
                   close_timeout: float = 60.0, **profile_options) -> ProfileKwargs:
    """``ProfileKwargs`` for ``Accelerator(kwargs_handlers=[...])``; ``profile_options`` are ProfileKwargs'
    own (activities=["cpu", "cuda"], record_shapes=..., with_stack=...). accelerate accepts only its own
    class, so this is one, whose ``build`` (the profiler it makes) uses ``make_schedule``, with a ``close()``
    that waits for the handler's background work."""
    handler = make_handler(dir_name, worker_name, use_gzip)
    kwargs = ProfileKwargs(schedule_option=ScheduleArgs(wait, warmup, active, repeat, skip_first).kwargs(),
                           on_trace_ready=handler, **{**MEMORY_ON, **profile_options})
    kwargs.build = partial(_build, kwargs)
    kwargs.close = partial(close_handler, handler, close_timeout)
    return kwargs

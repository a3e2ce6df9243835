"""`stepscope.profile(logdir)`: torch.profiler.profile with stepscope's schedule and handler, in one line.

    with stepscope.profile("logs/myrun") as prof:
        for x, y in stepscope.loader(train_loader):
            train_step(x, y)
            prof.step()
    # logs/myrun: traces, diagnosis.md, TensorBoard events; `touch logs/myrun/.capture` asks for a cycle

Defaults: one cycle of 1 warm-up and 3 recorded steps after 10 + 100 unprofiled ones, then a capture whenever a
step slows down (at most 6 an hour; triggers.py) or `<logdir>/.capture` is touched: a baseline, and the stalls
themselves, for the cost of their trace exports only. CPU activities plus CUDA where a GPU is available,
shapes recorded. Keyword arguments that `stepscope.schedule` takes go to the schedule; the others
(record_shapes, profile_memory, with_stack, activities, ...) go to torch.profiler.profile. On exit the
handler gets up to `close_timeout` seconds to finish the last diagnosis.

Hand it the loader too: `for x, y in stepscope.loader(train_loader):` (it reports to the schedule this block
made) times the wait for every batch, and `with stepscope.input_copy(): x = x.to(device, non_blocking=True)`
the copy to the GPU. Without them the diagnosis takes those two from the recorded steps alone, and says so in
one line where the trace shows the step waiting for its DataLoader or its pageable copies. An out-of-memory
error raised in the block is captured under `<logdir>/oom/` (oom.py) and goes on unchanged.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch
from stepscope.capture.handler import StepscopeTraceHandler
from stepscope.capture.oom import is_oom
from stepscope.capture.schedule import schedule as make_schedule
from torch.profiler import ProfilerActivity

SCHEDULE_DEFAULTS = {"wait": 100, "warmup": 1, "active": 3, "repeat": 1, "skip_first": 10, "capture_on_slowdown": True}
SCHEDULE_KEYS = set(inspect.signature(make_schedule).parameters)
CLOSE_TIMEOUT_S = 60.0


class Session:
    """The context manager `profile()` returns; inside it, `prof` is the torch.profiler.profile."""

    def __init__(self, logdir: str | os.PathLike, worker_name: str | None, use_gzip: bool, close_timeout: float,
                 kw: dict) -> None:
        self.logdir = Path(logdir)
        args = {k: kw.pop(k) for k in list(kw) if k in SCHEDULE_KEYS}
        args = {**SCHEDULE_DEFAULTS, "capture_file": self.logdir / ".capture", **args}
        self.schedule = make_schedule(**args)
        self.handler = StepscopeTraceHandler(self.logdir, worker_name, use_gzip)
        if "activities" not in kw:
            kw["activities"] = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        kw.setdefault("record_shapes", True)
        self.prof = torch.profiler.profile(schedule=self.schedule, on_trace_ready=self.handler, **kw)
        self.close_timeout = close_timeout

    def __enter__(self):
        self.logdir.mkdir(parents=True, exist_ok=True)
        return self.prof.__enter__()

    def __exit__(self, *exc) -> None:
        if is_oom(exc[1]):  # written before the error goes on, unchanged (oom.py)
            self.handler.oom.capture(exc[1])
        try:
            self.prof.__exit__(*exc)
        finally:
            self.handler.close(self.close_timeout)


def profile(logdir: str | os.PathLike, *, worker_name: str | None = None, use_gzip: bool = True,
            close_timeout: float = CLOSE_TIMEOUT_S, **kw) -> Session:
    """A `with` block that profiles a loop with `stepscope.schedule` and `stepscope.trace_handler` (see the
    module docstring); `prof.step()` once per step, as with torch.profiler.profile."""
    return Session(logdir, worker_name, use_gzip, close_timeout, kw)

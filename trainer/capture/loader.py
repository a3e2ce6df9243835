"""`stepscope.loader(dl)`: any iterable of batches, with the wait for each batch timed for the schedule.

    sched = stepscope.schedule(wait=50, warmup=1, active=3)
    with torch.profiler.profile(schedule=sched, on_trace_ready=stepscope.trace_handler("logs/run")) as prof:
        for x, y in stepscope.loader(train_loader):      # yields what train_loader yields
            ...
            prof.step()

The time spent in `next()` on the wrapped iterator is the step's wait for data (`data_ms` in the telemetry,
as the trainer's `StepClock.batch_ready` measures it), so a loader that falls behind is measured on the
unprofiled steps, not inferred from a short profiled window. While the profiler records, the wait is also
a `data` range in the trace (the trainer's name for it). Without `schedule=` the wrapper reports to the
stepscope schedule made last, looked up when iteration starts. Costs two perf_counter_ns calls per batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from stepscope.capture.schedule import StepscopeSchedule, clock, latest
from stepscope.trace.vocabulary import DATA_RANGE
from torch.profiler import record_function


class Loader:
    def __init__(self, iterable: Iterable, schedule: StepscopeSchedule | None = None) -> None:
        self.iterable = iterable
        self.schedule = schedule

    def __len__(self) -> int:
        return len(self.iterable)

    def __getattr__(self, name: str):  # dataset, batch_size, sampler, ... of the wrapped loader
        if name == "iterable":
            raise AttributeError(name)
        return getattr(self.iterable, name)

    def __iter__(self) -> Iterator:
        sched = self.schedule or latest()
        if sched is None:
            yield from self.iterable
            return
        now = clock()
        t0 = now()
        it = iter(self.iterable)  # starting worker processes is part of the first wait
        while True:
            if sched.profiling:
                with record_function(DATA_RANGE):
                    try:
                        batch = next(it)
                    except StopIteration:
                        return
            else:
                try:
                    batch = next(it)
                except StopIteration:
                    return
            sched.add_data_wait(now() - t0)
            yield batch
            t0 = now()


def loader(iterable: Iterable, schedule: StepscopeSchedule | None = None) -> Loader:
    """Wrap a DataLoader (or any iterable of batches) so the wait for each batch is timed; see the module."""
    return Loader(iterable, schedule)

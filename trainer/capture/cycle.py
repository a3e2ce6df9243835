"""A profiling cycle as stepscope.schedule records it, and the unprofiled steps timed around it.

    cycle.start, cycle.end, cycle.trigger     # its first and RECORD_AND_SAVE steps, what started it
    cycle.telemetry()                         # {"steps", "step_ms", "data_ms", "copy_ms", "mem_*"}: the kept steps around it
    cycle.done                                # those steps are all in

The shape of the telemetry is the trainer's (trainer/demo/timing.py Throughput.telemetry): means in ms. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the allocator's counters a telemetry may carry (memory_stats.py reads them; the trainer's run.json has room)
MEMORY_KEYS = ("mem_peak_allocated_mib", "mem_peak_reserved_mib", "mem_allocated_mib", "mem_reserved_mib",
               "mem_alloc_retries", "mem_ooms", "mem_creep_mib_per_step")


@dataclass
class Sums:
    """Kept steps: how many, their total time and their total wait for data, in ns; and the input copies
    timed in them (stepscope.input_copy): how many there were, how many the GPU had done when read, and the
    time of those on the GPU's stream (ns)."""
    n: int = 0
    ns: int = 0
    data: int = 0
    copies: int = 0
    copies_timed: int = 0
    copy: int = 0

    def add(self, other: Sums) -> None:
        self.n += other.n
        self.ns += other.ns
        self.data += other.data
        self.copies += other.copies
        self.copies_timed += other.copies_timed
        self.copy += other.copy


def telemetry_of(s: Sums, with_data: bool) -> dict | None:
    """The trainer's telemetry shape (trainer/demo/timing.py Throughput.telemetry): means in ms; None if no step.
    ``copy_ms``: the input copy's time per step on the GPU's stream, where copies were timed."""
    if s.n == 0:
        return None
    out = {"steps": s.n, "step_ms": s.ns / s.n / 1e6}
    if with_data:
        out["data_ms"] = s.data / s.n / 1e6
    if s.copies_timed:
        out["copy_ms"] = s.copy / s.copies_timed * s.copies / s.n / 1e6
    return out


@dataclass
class Cycle:
    """One profiling cycle: its steps, why it ran, and the kept steps around it."""
    index: int
    start: int  # first step of the cycle (warming up or recording)
    trigger: str  # "schedule", or what started it (triggers.py)
    end: int | None = None  # its RECORD_AND_SAVE step
    before: Sums = field(default_factory=Sums)
    after: Sums = field(default_factory=Sums)
    done: bool = False  # the kept steps after it are all in (or the next cycle began)
    with_data: bool = False
    memory: dict = field(default_factory=dict)  # the allocator's counters around it (memory_stats.KEYS), CUDA only

    def telemetry(self) -> dict | None:
        s = Sums()
        s.add(self.before)
        s.add(self.after)
        out = telemetry_of(s, self.with_data)
        if out is not None:
            out.update(self.memory)
        return out

"""A profiling cycle as stepscope.schedule records it, and the unprofiled steps timed around it.

    cycle.start, cycle.end, cycle.trigger     # its first and RECORD_AND_SAVE steps, what started it
    cycle.telemetry()                         # a Telemetry (telemetry.py): the kept steps around it
    cycle.done                                # those steps are all in

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stepscope.report.telemetry import MEMORY_FIELDS, Telemetry

MEMORY_KEYS = MEMORY_FIELDS  # the allocator's counters a telemetry may carry (memory_stats.py reads them)


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


def telemetry_of(s: Sums, with_data: bool) -> Telemetry | None:
    """The schedule's producer of a Telemetry: means in ms of the kept steps in ``s``; None if none.
    ``data_ms`` where a stepscope.loader reported waits (``with_data``); ``copy_ms``: the input copy's time per
    step on the GPU's stream, where stepscope.input_copy timed copies."""
    if s.n == 0:
        return None
    return Telemetry(steps=s.n, step_ms=s.ns / s.n / 1e6, data_ms=s.data / s.n / 1e6 if with_data else None,
                     copy_ms=s.copy / s.copies_timed * s.copies / s.n / 1e6 if s.copies_timed else None)


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

    def telemetry(self) -> Telemetry | None:
        s = Sums()
        s.add(self.before)
        s.add(self.after)
        out = telemetry_of(s, self.with_data)
        return out.with_memory(self.memory) if out is not None else None

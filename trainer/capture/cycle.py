"""A profiling cycle as stepscope.schedule records it, and the unprofiled steps timed around it.

    cycle.start, cycle.end, cycle.trigger     # its first and RECORD_AND_SAVE steps, what started it
    cycle.telemetry()                         # a Telemetry (telemetry.py): the kept steps around it
    cycle.done                                # those steps are all in

Torch-free.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from stepscope.report.telemetry import BLOCK_STEPS, MEMORY_FIELDS, Telemetry, middle_blocks

MEMORY_KEYS = MEMORY_FIELDS  # the allocator's counters a telemetry may carry (memory_stats.py reads them)


MAX_BLOCKS = 1 << 16  # blocks a long-lived Sums keeps (the loop's total); past it, neighbours merge


@dataclass
class Sums:
    """Kept steps: how many, their total time and their total wait for data, in ns; and the input copies
    timed in them (stepscope.input_copy): how many there were, how many the GPU had done when read, and the
    time of those on the GPU's stream (ns). ``blocks`` holds (steps, ns, data ns) of each block of consecutive
    kept steps (report.telemetry.BLOCK_STEPS of them, fewer at a window's end), for the robust step; steps
    no block covers (a slowdown's trigger steps) count as one block. ``steps`` holds each kept step's ns, for
    the spread; None where they are not kept (the loop's total, whose blocks merge pairwise past MAX_BLOCKS)."""
    n: int = 0
    ns: int = 0
    data: int = 0
    copies: int = 0
    copies_timed: int = 0
    copy: int = 0
    blocks: list = field(default_factory=list)
    steps: list | None = field(default_factory=list)

    def add(self, other: Sums) -> None:
        self.n += other.n
        self.ns += other.ns
        self.data += other.data
        self.copies += other.copies
        self.copies_timed += other.copies_timed
        self.copy += other.copy
        self.blocks += other.whole_blocks()
        if other.steps is None and other.n:
            self.steps = None  # not every step's time is known
        elif self.steps is not None and other.steps is not None:
            self.steps += other.steps
        if self.steps is None and len(self.blocks) > MAX_BLOCKS:
            b = self.blocks
            self.blocks = [tuple(map(sum, zip(*b[i:i + 2]))) for i in range(0, len(b), 2)]

    def whole_blocks(self) -> list:
        """``blocks``, plus the steps no block covers as one block of their own."""
        n, ns, data = self.n, self.ns, self.data
        for bn, bns, bdata in self.blocks:
            n, ns, data = n - bn, ns - bns, data - bdata
        return self.blocks + [(n, ns, data)] if n > 0 else list(self.blocks)


def blocks_of(steps: list[int], waits: list[int]) -> list[tuple[int, int, int]]:
    """(steps, ns, data ns) of each BLOCK_STEPS consecutive steps of one window (the last may hold fewer)."""
    return [(len(steps[i:i + BLOCK_STEPS]), sum(steps[i:i + BLOCK_STEPS]), sum(waits[i:i + BLOCK_STEPS]))
            for i in range(0, len(steps), BLOCK_STEPS)]


def telemetry_of(s: Sums, with_data: bool, robust: bool = True) -> Telemetry | None:
    """The schedule's producer of a Telemetry from the kept steps in ``s``; None if none. ``step_ms`` and
    ``data_ms`` (where a stepscope.loader reported waits, ``with_data``) are means over the blocks the robust
    step keeps (report.telemetry.middle_blocks), or over every step where not ``robust`` (a slowdown's
    capture, whose steps are the slowdown); ``step_ms_mean`` and the quartiles of single steps give the
    spread where they differ. ``copy_ms``: the input copy's time per step on the GPU's stream, where
    stepscope.input_copy timed copies."""
    if s.n == 0:
        return None
    blocks = s.whole_blocks()
    if robust:
        blocks = [blocks[i] for i in middle_blocks([ns / n for n, ns, _ in blocks])]
    n = sum(b[0] for b in blocks)
    spread = {}
    if robust and len(s.steps or ()) > 1:
        q = statistics.quantiles(s.steps, n=4)
        spread = dict(step_ms_mean=s.ns / s.n / 1e6, step_ms_median=q[1] / 1e6, step_ms_p25=q[0] / 1e6,
                      step_ms_p75=q[2] / 1e6)
    return Telemetry(steps=s.n, step_ms=sum(b[1] for b in blocks) / n / 1e6,
                     data_ms=sum(b[2] for b in blocks) / n / 1e6 if with_data else None,
                     copy_ms=s.copy / s.copies_timed * s.copies / s.n / 1e6 if s.copies_timed else None, **spread)


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
    robust: bool = True  # its telemetry is the robust step (a slowdown's capture: every step, as it is the slowdown)

    def telemetry(self) -> Telemetry | None:
        s = Sums()
        s.add(self.before)
        s.add(self.after)
        out = telemetry_of(s, self.with_data, self.robust)
        return out.with_memory(self.memory) if out is not None else None

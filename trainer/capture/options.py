"""The profiler options stepscope supports, as one flat dataclass: a training loop never sees profiler keywords."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileConfig:
    enabled: bool = False
    # schedule: skip the first steps (cudnn autotune, allocator warm-up), then wait, warm up, record
    skip_first: int = 10
    wait: int = 5
    warmup: int = 2
    active: int = 3
    repeat: int = 1  # one cycle: profiler overhead stays out of the other steps (0 = repeat until the end)
    record_shapes: bool = True
    profile_memory: bool = True
    with_stack: bool = True
    with_flops: bool = False
    with_modules: bool = False
    gzip: bool = True
    export_chrome_trace: bool = False
    flamegraph: bool = False
    memory_timeline: bool = False

    def first_recorded_step(self) -> int:
        """0-based index of the first step the schedule records."""
        return self.skip_first + self.wait + self.warmup

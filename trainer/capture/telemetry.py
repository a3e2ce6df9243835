"""`Telemetry`: the unprofiled steps of a loop, as the loop runs without the profiler. One type, whoever measured it.

    t = sched.telemetry()                  # stepscope.schedule: every kept step so far (or cycle.telemetry())
    t = thr.telemetry()                    # the demonstration trainer's Throughput (stepscope.demo.timing)
    t.step_ms, t.data_ms, t["step_ms"], "copy_ms" in t      # a field that was not measured is None / absent
    t.to_dict()                            # {"steps", "step_ms", ...}: run.json, cycles.jsonl, stepscope.analyze

Every figure is a mean in ms over the kept steps (``steps`` of them); a field is None where its source did not
measure it, and `to_dict()` leaves it out. One producer per source fills each field:

    steps, step_ms           the step clock: stepscope.schedule's (time between prof.step() calls), or the
                             trainer's StepClock (CUDA events at each step boundary)
    data_ms                  the wait for the next batch: stepscope.loader, or the trainer's StepClock.batch_ready
    copy_ms                  the input copy on the GPU's stream: stepscope.input_copy, or StepClock.copy
    copy_host_ms, dispatch_ms, cpu_ms, step_ms_mean/median/p25/p75
                             the trainer's StepClock only (the host's share of each step, the spread of steps)
    mem_*                    the caching allocator's counters at window edges (memory_stats.MemoryWindows)

It is a read-only mapping of the fields that were measured, so code written for the dict it replaces
(``t["step_ms"]``, ``t.get("data_ms")``) reads it unchanged; `stepscope.analyze(..., telemetry=)` takes it or
such a dict. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Telemetry(Mapping):
    steps: int
    step_ms: float
    data_ms: float | None = None
    copy_ms: float | None = None
    copy_host_ms: float | None = None
    dispatch_ms: float | None = None
    cpu_ms: float | None = None
    step_ms_mean: float | None = None
    step_ms_median: float | None = None
    step_ms_p25: float | None = None
    step_ms_p75: float | None = None
    mem_peak_allocated_mib: float | None = None
    mem_peak_reserved_mib: float | None = None
    mem_allocated_mib: float | None = None
    mem_reserved_mib: float | None = None
    mem_alloc_retries: float | None = None
    mem_ooms: float | None = None
    mem_creep_mib_per_step: float | None = None

    def to_dict(self) -> dict:
        """The measured fields, in the order above (the JSON form: run.json, cycles.jsonl)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, d: Mapping) -> Telemetry:
        """A telemetry from its JSON form (or the dict a caller wrote by hand); other keys are left out."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def with_memory(self, memory: Mapping) -> Telemetry:
        """The same, with the allocator's counters (memory_stats.MemoryWindows.telemetry) added."""
        return replace(self, **memory) if memory else self

    # the mapping of the measured fields
    def __getitem__(self, key: str):
        v = getattr(self, key, None) if key in FIELDS else None
        if v is None:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


FIELDS = frozenset(f.name for f in fields(Telemetry))
MEMORY_FIELDS = tuple(f.name for f in fields(Telemetry) if f.name.startswith("mem_"))


def as_dict(telemetry: Mapping | None) -> dict | None:
    """The JSON form of a Telemetry, or of a dict standing for one (as it is); None stays None."""
    if telemetry is None or isinstance(telemetry, dict):
        return telemetry
    if isinstance(telemetry, Telemetry):
        return telemetry.to_dict()
    return dict(telemetry)

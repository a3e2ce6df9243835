"""The one timing module, used by training (`StepClock`) and by the benchmarks (`time_fn`, scripts/bench_ops.py).

On CUDA everything asynchronous is timed with CUDA events, never with a host clock around it; the host reads
the events only when asked (`StepClock.drain`, at the logging cadence), which is the one sync point. On the
CPU the same interface uses `time.perf_counter`.

`StepClock` records one boundary per step, so step i's time is boundary[i+1] - boundary[i]: in steady
state that is the true throughput time, whether the GPU or the host is the bottleneck, and it includes
data loading between steps.

It also keeps, for every step, the phases that decide a verdict, measured on the run as it runs (the
profiler is not involved): the host's wait for the next batch (`data_ms`, perf_counter), the host-to-device
input copy (`copy_ms`: CUDA events around it, i.e. its time on the GPU's stream; `copy_host_ms`: how long
the host was held, long for a pageable copy), the host's time to dispatch the step (`dispatch_ms`), and the
CPU time the training process spent on the step, all its threads together (`cpu_ms`, from waiting for the batch
to the end of dispatch; DataLoader worker processes are not in it). `cpu_ms` over wall time says how many cores
the step keeps busy, which bounds what moving work to other processes can gain.
Their cost is a few perf_counter and process_time reads (about 1 us each) and, only where a batch is copied, two
CUDA events per step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from stepscope.capture import machine_load
from stepscope.report.telemetry import BLOCK_STEPS, Telemetry, middle_blocks

PHASES = ("data_ms", "copy_ms", "copy_host_ms", "dispatch_ms", "cpu_ms")  # Telemetry's fields that StepClock times


@dataclass(frozen=True)
class StepTime:
    ms: float
    excluded: bool  # warm-up, profiled (warm-up, recording, trace export) or evaluation: not in throughput
    phases: dict | None = None  # PHASES of this step, where measured


class StepClock:
    """``schedule``: a stepscope.schedule to report each step's wait for data and input copy to, as
    stepscope.loader and stepscope.input_copy do in a user's loop (the copy's CUDA events are shared)."""

    def __init__(self, device: torch.device, schedule=None) -> None:
        self.cuda = device.type == "cuda"
        self.schedule = schedule
        self._marks: list = []  # (event or perf_counter seconds, excluded flag of the step that starts here)
        self._phases: list = []  # one dict per started step: host ms, and CUDA events of the copy
        self._t0 = self._t1 = self._cpu0 = 0.0

    def begin(self) -> None:
        """The step's host work starts: waiting for its batch."""
        self._cpu0 = time.process_time()
        self._t0 = time.perf_counter()
        self._phases.append({})

    def batch_ready(self) -> None:
        self._t1 = time.perf_counter()
        self._phases[-1]["data_ms"] = (self._t1 - self._t0) * 1e3
        if self.schedule is not None:
            self.schedule.add_data_wait(int((self._t1 - self._t0) * 1e9))

    def copy(self, fn: Callable[[], object]):
        """Run `fn` (the input copy to the device) and time it; returns what `fn` returns."""
        t0 = time.perf_counter()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            self._phases[-1]["copy_events"] = (start, end)
            if self.schedule is not None:
                self.schedule.add_copy(start, end)
        else:
            out = fn()
        self._phases[-1]["copy_host_ms"] = (time.perf_counter() - t0) * 1e3
        self._t1 = time.perf_counter()
        return out

    def dispatched(self) -> None:
        """The host has queued the whole step (forward, backward, optimizer)."""
        self._phases[-1]["dispatch_ms"] = (time.perf_counter() - self._t1) * 1e3
        self._phases[-1]["cpu_ms"] = (time.process_time() - self._cpu0) * 1e3

    def mark(self, excluded: bool = False) -> None:
        """A step boundary; `excluded` tags the step that starts here."""
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._marks.append((ev, excluded))
        else:
            self._marks.append((time.perf_counter(), excluded))

    def exclude_since_last_mark(self) -> None:
        """Keep the interval that started at the last mark (e.g. evaluation) out of throughput."""
        if self.schedule is not None:
            self.schedule.skip_step()
        if self._marks:
            self._marks[-1] = (self._marks[-1][0], True)
            self._phases.append(None)  # the interval that starts there is not a step: it has no phases

    def drain(self) -> list[StepTime]:
        """Times of the steps completed since the last drain; the last mark is kept as the next start."""
        if len(self._marks) < 2:
            return []
        n = len(self._marks) - 1
        phases, self._phases = self._phases[:n], self._phases[n:]
        phases += [None] * (n - len(phases))
        if self.cuda:
            self._marks[-1][0].synchronize()  # sync point: waits for the GPU to reach the last boundary
            ms = [a.elapsed_time(b) for (a, _), (b, _) in zip(self._marks, self._marks[1:])]
        else:
            ms = [(b - a) * 1e3 for (a, _), (b, _) in zip(self._marks, self._marks[1:])]
        out = [StepTime(t, ex, _finished(p)) for t, (_, ex), p in zip(ms, self._marks, phases)]
        self._marks = self._marks[-1:]
        return out


def _finished(p: dict | None) -> dict | None:
    """A step's phases in ms; the copy's CUDA events were passed by the drain's sync."""
    if not p:
        return None
    out = {k: v for k, v in p.items() if k != "copy_events"}
    if "copy_events" in p:
        start, end = p["copy_events"]
        out["copy_ms"] = start.elapsed_time(end)
    return out


def _middle_blocks(n: int, ms: list[float]) -> list[int]:
    """The indices of the steps in the blocks of BLOCK_STEPS that the robust step keeps (middle_blocks)."""
    blocks = [range(i, min(i + BLOCK_STEPS, n)) for i in range(0, n, BLOCK_STEPS)]
    kept = middle_blocks([statistics.fmean(ms[i] for i in b) for b in blocks])
    return [i for k in kept for i in blocks[k]]


@dataclass
class Throughput:
    """Running totals of the steps that count towards reported throughput."""

    batch_size: int
    steps: int = 0
    total_ms: float = 0.0
    all_ms: list | None = None
    phases: list | None = None  # the timed steps' phase dicts

    def __post_init__(self) -> None:
        self.all_ms = []
        self.phases = []
        self.machine_start = machine_load.sample()  # the machine's CPU use from here (contention)
        self.memory: dict = {}  # the allocator's counters at the log windows' edges (memory_stats.KEYS), CUDA only

    def add(self, times: list[StepTime]) -> None:
        for t in times:
            if not t.excluded:
                self.steps += 1
                self.total_ms += t.ms
                self.all_ms.append(t.ms)
                self.phases.append(t.phases or {})  # one per timed step, aligned with all_ms

    def telemetry(self) -> Telemetry | None:
        """The trainer's producer of a Telemetry (stepscope.report.telemetry): the timed (unprofiled, warm)
        steps' step and phases, in ms; None if none.

        The steps are cut into blocks of BLOCK_STEPS, and step and phases are means over the blocks that
        the robust step keeps (report.telemetry.middle_blocks, the rule every producer uses).
        ``step_ms_mean``, ``step_ms_median``, ``step_ms_p25`` and ``step_ms_p75`` of single steps give the
        spread."""
        if not self.all_ms:
            return None
        kept = _middle_blocks(len(self.all_ms), self.all_ms)
        phases = {}
        for name in PHASES:
            values = [self.phases[i][name] for i in kept if name in self.phases[i]]
            if values:
                phases[name] = statistics.fmean(values)
        q = statistics.quantiles(self.all_ms, n=4) if len(self.all_ms) > 1 else [self.all_ms[0]] * 3
        return Telemetry(steps=self.steps, step_ms=statistics.fmean(self.all_ms[i] for i in kept), **phases,
                         step_ms_mean=statistics.fmean(self.all_ms), step_ms_median=q[1], step_ms_p25=q[0],
                         step_ms_p75=q[2]).with_memory(self.memory)

    def contention(self) -> machine_load.Contention | None:
        """What the run shared its CPUs with since it began (capture/machine_load.py); None off Linux."""
        return machine_load.contention(self.machine_start, machine_load.sample())

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.steps if self.steps else float("nan")

    @property
    def median_ms(self) -> float:
        return statistics.median(self.all_ms) if self.all_ms else float("nan")

    @property
    def images_per_s(self) -> float:
        return self.batch_size * self.steps / (self.total_ms / 1e3) if self.total_ms else float("nan")


def time_fn(fn: Callable[[], object], device: torch.device, warmup: int = 10, reps: int = 50,
            before_each: Callable[[], object] | None = None) -> list[float]:
    """Milliseconds per call of `fn`, `reps` times after `warmup` calls: CUDA events on GPU, perf_counter on CPU.

    `before_each` (e.g. an L2 flush) runs before every timed call, outside the timed region.
    """
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        out = []
        for _ in range(reps):
            if before_each is not None:
                before_each()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        if before_each is not None:
            before_each()
        s.record()
        fn()
        e.record()
    ends[-1].synchronize()  # sync point: once, after all reps were queued
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]

"""The one timing module, used by training (`StepClock`) and by the benchmarks (`time_fn`, scripts/bench_ops.py).

On CUDA everything is timed with CUDA events, never with a host clock around asynchronous work; the
host reads the events only when asked (`StepClock.drain`, at the logging cadence), which is the one
sync point. On the CPU the same interface uses `time.perf_counter`.

`StepClock` records one boundary per step, so step i's time is boundary[i+1] - boundary[i]: in steady
state that is the true throughput time, whether the GPU or the host is the bottleneck, and it includes
data loading between steps.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepTime:
    ms: float
    excluded: bool  # warm-up, profiled (warm-up, recording, trace export) or evaluation: not in throughput


class StepClock:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._marks: list = []  # (event or perf_counter seconds, excluded flag of the step that starts here)

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
        if self._marks:
            self._marks[-1] = (self._marks[-1][0], True)

    def drain(self) -> list[StepTime]:
        """Times of the steps completed since the last drain; the last mark is kept as the next start."""
        if len(self._marks) < 2:
            return []
        if self.cuda:
            self._marks[-1][0].synchronize()  # sync point: waits for the GPU to reach the last boundary
            out = [StepTime(a.elapsed_time(b), ex) for (a, ex), (b, _) in zip(self._marks, self._marks[1:])]
        else:
            out = [StepTime((b - a) * 1e3, ex) for (a, ex), (b, _) in zip(self._marks, self._marks[1:])]
        self._marks = self._marks[-1:]
        return out


@dataclass
class Throughput:
    """Running totals of the steps that count towards reported throughput."""

    batch_size: int
    steps: int = 0
    total_ms: float = 0.0
    all_ms: list | None = None

    def __post_init__(self) -> None:
        self.all_ms = []

    def add(self, times: list[StepTime]) -> None:
        for t in times:
            if not t.excluded:
                self.steps += 1
                self.total_ms += t.ms
                self.all_ms.append(t.ms)

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

"""What starts a profiling cycle outside the fixed schedule: a slowdown, a file, a signal.

    rule = SlowdownRule(factor=1.5, patience=5, max_per_hour=6)
    stepscope.schedule(wait=1000, warmup=1, active=3, capture_on_slowdown=True, slowdown=rule,
                       capture_file="logs/run/.capture", capture_signal=signal.SIGUSR1)

A slowdown is `patience` kept steps in a row that each take more than `factor` times the median of the last
`norm_steps` kept steps and at least `min_extra_ms` more than it, or that each wait for their batch
(stepscope.loader) more than `factor` times the median wait and more than `data_floor_ms` and 2% of the median
step (the threshold at which the analysis calls a step paced by its loader) while taking at least
`min_extra_ms` more than the median step: a wait that does not make the step slower is no slowdown. The
absolute floor and the patience keep a shared machine's scheduling hiccups out: a millisecond step doubles whenever
another process takes the core for a moment, three steps in a row as readily (docs/loops.md's loop, 0.15 ms a
step, fired on three steps of 0.31 ms without a floor; with a 5 ms floor, on a 2-core machine at a load of 12,
on 3 steps 5.7 to 12.3 ms longer than the median 16 times in 30 runs), but a stall that matters lasts longer
(scripts/capture_noise.py measures both: BENCHMARKS.md). The median is refreshed every `norm_steps` steps, so a new normal becomes the norm. While
the trace handler's thread analyses a cycle, the loop shares the interpreter with it and may run at half its
speed: a step then counts as slow only beyond twice the thresholds, so that the analysis of one capture does not
look like the next slowdown, while a real stall (a loader that stops for 20 ms) is still seen. One
slowdown gives one capture: the detector re-arms after `patience` ordinary steps. At most `max_per_hour`
slowdown captures start in any hour. Touching the file or sending the signal always starts one (after the
cycle in progress, if any); the signal handler only sets a flag, and the file is looked for at most every
`FILE_CHECK_S` seconds.
"""

from __future__ import annotations

import math
import os
import signal as signal_module
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

FILE_CHECK_S = 0.5
FIRED, ENDED = 1, 2  # SlowdownDetector.observe: a capture is due; a run of slow steps is over
PACED_SHARE = 0.02  # analysis/unprofiled.py's PACING_WAIT_SHARE
NEVER = 1 << 62  # ns (146 years): no step is over it, as no step is over an infinite threshold


@dataclass(frozen=True)
class SlowdownRule:
    factor: float = 1.5
    patience: int = 5
    norm_steps: int = 64
    max_per_hour: int = 6
    data_floor_ms: float = 0.5
    min_extra_ms: float = 10.0

    def __post_init__(self) -> None:
        if (self.factor <= 1 or self.patience < 1 or self.norm_steps < 4 or self.max_per_hour < 0
                or not self.min_extra_ms >= 0):
            raise ValueError(f"{self}: need factor > 1, patience >= 1, norm_steps >= 4, max_per_hour >= 0, "
                             "min_extra_ms >= 0")


class SlowdownDetector:
    """The slowdown rule, step by step. `observe` takes one kept step. The schedule's hot path splits it in two
    to spend a comparison on an ordinary step: it appends the step to `durs` and `waits` itself (never the step
    that fills them to norm_steps, which refreshes the norm: `due()` says which that is), and calls `judge` only
    when the step is over `gate_ns` or `gate_data` (see __init__); a step within both changes nothing else."""

    def __init__(self, rule: SlowdownRule) -> None:
        self.rule = rule
        self.durs: list[int] = []  # the kept steps since the norm was last refreshed (ns); cleared in place
        self.waits: list[int] = []  # their waits for data (ns)
        self._norm = 0  # median kept step (ns); 0 until norm_steps steps were seen
        self._norm_data = 0
        # slow / waiting beyond these (ns; see _renorm), floored: an int is over x exactly when over floor(x)
        self._slow_over = self._wait_over = NEVER
        self._longer = NEVER  # a waiting step is slow only beyond this (ns): the median plus min_extra_ms
        # the gates: the same, while the detector is armed with no slow steps running (a step within both is
        # ordinary, shared or not); otherwise -1, so that every step is judged (it may re-arm or end a run)
        self.gate_ns = self.gate_data = NEVER
        self._run = [0, 0, 0, False]  # the current run of slow steps: count, ns, data ns, any waited for data
        self._calm = 0
        self._armed = True
        self.fired: str | None = None
        self._times: deque[float] = deque()  # when the captures of the last hour started (monotonic s)
        self.suppressed = 0  # slowdowns that the hourly limit left uncaptured

    def observe(self, ns: int, data: int, step: int, shared: bool = False) -> int:
        """One kept step; FIRED when it completes a slowdown to capture, ENDED when it ends a run of slow
        steps, else 0. `shared`: the trace handler's thread was working, so the step is slow only beyond twice
        the thresholds (see the module docstring)."""
        self.durs.append(ns)
        self.waits.append(data)
        if len(self.durs) >= self.rule.norm_steps:
            self._renorm()
        return self.judge(ns, data, step, shared)

    def due(self) -> int:
        """How many kept steps from now the one is that refreshes the norm (1: the next one)."""
        return self.rule.norm_steps - len(self.durs)

    def judge(self, ns: int, data: int, step: int, shared: bool = False) -> int:
        """observe's answer for a kept step already in `durs` and `waits`."""
        if shared:
            ns, data = ns >> 1, data >> 1
        waits = data > self._wait_over and ns > self._longer
        run = self._run
        if waits or ns > self._slow_over:
            run[0] += 1
            run[1] += ns
            run[2] += data
            run[3] = run[3] or waits
            self._calm = 0
            self.gate_ns = self.gate_data = -1  # judge every step of the run, and the one that ends it
            if run[0] >= self.rule.patience and self._armed:
                self._armed = False
                if self._allowed():
                    self.fired = self._describe(step)
                    return FIRED
                self.suppressed += 1
            return 0
        verdict = 0
        if not self._armed:
            self._calm += 1
            if self._calm >= self.rule.patience:
                self._armed = True
        if run[0]:
            self._run = [0, 0, 0, False]
            verdict = ENDED
        if self._armed:
            self.gate_ns, self.gate_data = self._slow_over, self._wait_over
        return verdict

    def _renorm(self) -> None:
        """The norm from the last norm_steps kept steps: what counts as slow, and as waiting for data."""
        r = self.rule
        self._norm = statistics.median(self.durs)
        self._norm_data = statistics.median(self.waits)
        self.durs.clear()  # in place: the schedule holds the lists
        self.waits.clear()
        self._longer = math.floor(self._norm + r.min_extra_ms * 1e6)
        self._slow_over = max(math.floor(r.factor * self._norm), self._longer)
        self._wait_over = math.floor(max(r.data_floor_ms * 1e6, r.factor * self._norm_data, PACED_SHARE * self._norm))
        if self._armed and not self._run[0]:
            self.gate_ns, self.gate_data = self._slow_over, self._wait_over

    def _allowed(self) -> bool:
        now = time.monotonic()
        while self._times and now - self._times[0] > 3600:
            self._times.popleft()
        if len(self._times) >= self.rule.max_per_hour:
            return False
        self._times.append(now)
        return True

    def _describe(self, step: int) -> str:
        n, ns, data, waited = self._run
        step_ms, norm_ms = ns / n / 1e6, self._norm / 1e6
        if waited:
            return (f"loader wait: {n} steps up to step {step} waited {data / n / 1e6:.2f} ms for their batch "
                    f"(median wait {self._norm_data / 1e6:.2f} ms) and took {step_ms:.2f} ms "
                    f"(median {norm_ms:.2f} ms)")
        return (f"slowdown: {n} steps up to step {step} took {step_ms:.2f} ms, over {self.rule.factor:g}x "
                f"the median step of {norm_ms:.2f} ms")

    def take(self) -> str | None:
        fired, self.fired = self.fired, None
        return fired

    def run(self) -> tuple[int, int, int]:
        """The slow steps that set off the capture: how many, their total time and wait for data (ns)."""
        n, ns, data, _ = self._run
        return n, ns, data


class OnDemand:
    """A cycle asked for by touching a file or by a signal."""

    def __init__(self, path: Path | None, signum: int | None, wake) -> None:
        self.path = Path(path) if path is not None else None
        self.pending: str | None = None
        self._wake = wake
        if signum is not None:
            if threading.current_thread() is not threading.main_thread():
                raise ValueError("capture_signal: a signal handler can only be installed from the main thread")
            name = signal_module.Signals(signum).name
            signal_module.signal(signum, lambda *_: self._request(f"signal {name}"))

    def _request(self, why: str) -> None:
        self.pending = why  # all a signal handler does
        self._wake()

    def next_check(self, now_ns: int) -> float:
        """When to look for the file next (perf_counter_ns); never without one."""
        return now_ns + FILE_CHECK_S * 1e9 if self.path is not None else float("inf")

    def poll(self, now_ns: int) -> float:
        """Look for the file; returns when to look next."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return self.next_check(now_ns)
        except OSError:
            pass  # a file we may not remove still asks for one capture, which its presence keeps asking for
        self._request(f"file {self.path}")
        return self.next_check(now_ns)

    def take(self) -> str | None:
        pending, self.pending = self.pending, None
        return pending

    @staticmethod
    def asked(trigger: str) -> bool:
        """The trigger of a cycle was a request (file or signal), not a slowdown."""
        return trigger.startswith(("file ", "signal "))


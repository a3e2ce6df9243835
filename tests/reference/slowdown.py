"""The slowdown detector as a plain ring of the last norm_steps kept steps, judged in full at every step. A
reference for the tests only.

    det = SlowdownDetector(SlowdownRule())
    verdict = det.observe(ns, data, step, shared)      # FIRED, ENDED or 0, as stepscope's detector answers

stepscope's detector (stepscope.capture.triggers) is split for the schedule's hot path: the schedule
appends each kept step to its lists and asks for a verdict only past an integer gate. This is the same rule
written whole, that the tests hold it to: the same verdict at every step, the same capture descriptions, the
same count of slowdowns left uncaptured.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

from stepscope.capture.triggers import ENDED, FIRED, PACED_SHARE, SlowdownRule

__all__ = ["ENDED", "FIRED", "SlowdownDetector", "SlowdownRule"]


class SlowdownDetector:
    def __init__(self, rule: SlowdownRule) -> None:
        self.rule = rule
        self._dur = [0] * rule.norm_steps
        self._data = [0] * rule.norm_steps
        self._i = 0
        self._norm = 0  # median kept step (ns); 0 until norm_steps steps were seen
        self._norm_data = 0
        self._slow_over = self._wait_over = float("inf")  # slow / waiting beyond these (ns); see _renorm
        self._longer = float("inf")  # a waiting step counts only when longer than this (ns)
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
        i = self._i
        self._dur[i] = ns
        self._data[i] = data
        i += 1
        if i == self.rule.norm_steps:
            i = 0
            self._renorm()
        self._i = i
        if shared:
            ns, data = ns >> 1, data >> 1
        waits = data > self._wait_over and ns > self._longer
        if waits or ns > self._slow_over:
            return self._slow(ns, data, waits, step)
        if self._armed and not self._run[0]:
            return 0
        if not self._armed:
            self._calm += 1
            if self._calm >= self.rule.patience:
                self._armed = True
        if self._run[0]:
            self._run = [0, 0, 0, False]
            return ENDED
        return 0

    def _renorm(self) -> None:
        """The norm from the last norm_steps kept steps: what counts as slow, and as waiting for data."""
        r = self.rule
        self._norm = statistics.median(self._dur)
        self._norm_data = statistics.median(self._data)
        self._longer = self._norm + r.min_extra_ms * 1e6
        self._slow_over = max(r.factor * self._norm, self._longer)
        self._wait_over = max(r.data_floor_ms * 1e6, r.factor * self._norm_data, PACED_SHARE * self._norm)

    def _slow(self, ns: int, data: int, waits: bool, step: int) -> int:
        run = self._run
        run[0] += 1
        run[1] += ns
        run[2] += data
        run[3] = run[3] or waits
        self._calm = 0
        if run[0] >= self.rule.patience and self._armed:
            self._armed = False
            if self._allowed():
                self.fired = self._describe(step)
                return FIRED
            self.suppressed += 1
        return 0

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


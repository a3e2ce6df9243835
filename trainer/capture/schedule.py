"""`stepscope.schedule`: torch.profiler.schedule that also times every step the profiler does not record.

    sched = stepscope.schedule(wait=50, warmup=1, active=3)          # same arguments as torch.profiler.schedule
    with torch.profiler.profile(schedule=sched, on_trace_ready=stepscope.trace_handler("logs/run")) as prof:
        for x, y in stepscope.loader(data):                          # optional: times the wait for each batch
            train_step(x, y)
            prof.step()
    sched.telemetry()        # Telemetry(steps=812, step_ms=9.84, data_ms=0.12, ...): the unprofiled step

It returns the same ProfilerAction for every step as `torch.profiler.schedule` with the same arguments. The
profiler calls it once per `prof.step()`, with the step number; step k is the time from call k to call k+1
(`time.perf_counter_ns`), which in steady state is the loop's true time per step whether the host or the GPU
sets the pace. Only steps the profiler leaves alone are kept: not a warming-up or recording step, not the
step after a cycle (it holds the trace's export), and not the first `warm_steps` of the loop (compilation,
autotuning, the allocator's growth). Each kept step costs a perf_counter_ns call and a few additions.

`sync=True` (the default) adds `torch.cuda.synchronize()` where a run of kept steps begins and ends (after a
cycle, before the next, and every `window` kept steps), where the GPU may otherwise still be working through
earlier steps: a window of steps then measures exactly the work queued in it. That is a handful of syncs per
profiling cycle, beside the profiler's own; `sync=False` makes none and reads the wall time between calls.

Each profiling cycle gets its own telemetry (`Cycle.telemetry()`): the kept steps just before the cycle (the
last `window` to `2 * window`, or the steps that triggered a capture) and the first `window` kept steps after
it. Its step is the robust step (report/telemetry.py `middle_blocks`, the trainer's rule too): the mean over the
middle half of its blocks of 8 consecutive steps, so that a few steps stalled by other work on the machine do
not drag it, with the plain mean and quartiles of single steps beside it for the spread; a slowdown's capture
keeps every step's mean, as those steps are the slowdown. `stepscope.trace_handler` diagnoses each cycle with it, so the verdict and figures describe the loop as it
runs without the profiler. Triggers (capture_on_slowdown, a file, a signal) are in triggers.py. On CUDA, each
window edge also reads the caching allocator's counters (memory_stats.py: peaks per window, retries, OOMs,
allocated across windows), which a cycle's telemetry carries.
"""

from __future__ import annotations

import os
import signal as signal_module
import threading
import time
from collections import deque
from pathlib import Path
from warnings import warn

import torch
from stepscope.capture.cupti import detach_after_cycles, quiet_kineto
from stepscope.capture.cycle import Cycle, Sums, blocks_of, telemetry_of
from stepscope.capture.memory_stats import MemoryWindows, merge
from stepscope.capture.triggers import OnDemand, SlowdownDetector, SlowdownRule
from stepscope.report.telemetry import Telemetry
from torch.profiler import ProfilerAction

NONE, WARMUP, RECORD, SAVE = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                              ProfilerAction.RECORD_AND_SAVE)
WINDOW = 50  # kept steps per telemetry window: means over 50 steps are steady to a few percent
WARM_STEPS = 3  # the loop's first steps are cold (compilation, autotuning, first allocations)
_clock = time.perf_counter_ns  # module-level, for speed (and for tests, which may set a clock of their own)
KEPT_CYCLES = 256  # cycle records kept for the handler to find (it asks within a cycle or two)


class StepscopeSchedule:
    """The callable that `schedule(...)` returns; see the module docstring."""

    # what the hot path (__call__) reads and writes at every step, in slots: faster than an instance dict
    # of this many attributes (the rest stay in __dict__)
    __slots__ = ("_fast_until", "_last_step", "_last_ns", "_data", "_copies", "_seg_n", "_seg_ns", "_seg_data",
                 "_seg_copies", "_seg_steps", "_seg_waits", "_durs", "_waits", "_gate_ns", "_gate_data",
                 "_next_check", "__dict__", "__weakref__")

    def __init__(self, *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0, capture_on_slowdown: bool = False, slowdown: SlowdownRule | None = None,
                 capture_file: str | os.PathLike | None = None, capture_signal: int | None = None,
                 sync: bool = True, window: int = WINDOW, warm_steps: int = WARM_STEPS) -> None:
        if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
            raise AssertionError(
                f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
                f"active={active} (need > 0), repeat={repeat} (need >= 0), skip_first={skip_first} (need >= 0).")
        if warmup == 0:
            warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=3)
        if window < 1:
            raise ValueError(f"window={window}: need at least 1 step")
        self.wait, self.warmup, self.active, self.repeat = wait, warmup, active, repeat
        self.skip_first, self.skip_first_wait = skip_first, skip_first_wait
        self.window, self.warm_steps, self.sync = window, warm_steps, sync
        self.detector = det = SlowdownDetector(slowdown or SlowdownRule()) if capture_on_slowdown else None
        # the hot path's share of the detector (see SlowdownDetector): its lists, and its gates
        self._durs, self._waits = (det.durs, det.waits) if det is not None else (None, None)
        self._gate_ns, self._gate_data = (det.gate_ns, det.gate_data) if det is not None else (0, 0)
        self.on_demand = OnDemand(capture_file, capture_signal, self._wake)
        self.cycles: deque[Cycle] = deque(maxlen=KEPT_CYCLES)
        self.cycle_count = 0
        self.total = Sums(steps=None)  # every kept step of the loop, up to the last window edge
        self.with_data = False  # a stepscope.loader reported a wait
        self._data = 0  # this step's wait for data so far (ns), from stepscope.loader
        self._copies: list = []  # this step's input copies so far, (start, end) CUDA events (input_copy.py)
        self._seg_copies: list = []  # those of the kept steps since the last window edge, read at the edge
        self._last_step = -2
        self._last_ns = 0
        self._prev = NONE  # the action returned for the previous step
        self._kept_prev = False  # the previous step was kept
        self._seg_n = self._seg_ns = self._seg_data = 0  # kept steps since the last window edge
        self._seg_steps: list[int] = []  # each of their times and waits for data (ns), for the robust step
        self._seg_waits: list[int] = []
        self._first_kept = max(1, warm_steps)
        self._quiet_from, self._quiet_until = 0, 0  # steps known to be NONE in the base schedule
        self._fast_until = 0  # calls before this step may take the hot path (see __call__)
        self._special = False  # take the slow path (_action) for the next step: a trigger may be due
        self._next_check = self.on_demand.next_check(0)
        self._gap: deque[Sums] = deque(maxlen=3)  # closed windows since the last cycle (for the next one's before)
        self._awaiting: list[Cycle] = []  # ended cycles still collecting their after-window
        self._extra: Cycle | None = None  # a triggered cycle in progress
        self._starting: Cycle | None = None  # a triggered cycle that begins at this step
        self._suppress = False  # after a triggered cycle: no base cycle until the base schedule says NONE
        self._trigger_sums: Sums | None = None  # the steps that set off a capture
        self.observer_busy = False  # the trace handler's thread works (triggers.py: the loop may run at half speed)
        self._lock = threading.Lock()  # the handler's thread reads cycles while the loop appends
        self.memory = MemoryWindows()  # the allocator's counters at the window edges (memory_stats.py)

    # the base sequence: torch.profiler.schedule's, line for line
    def base_action(self, step: int) -> ProfilerAction:
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < self.skip_first:
            return NONE
        step -= self.skip_first
        if self.skip_first_wait != 0:
            step += self.wait
        num_steps = self.wait + self.warmup + self.active
        if self.repeat > 0 and step / num_steps >= self.repeat:
            return NONE
        mod_step = step % num_steps
        if mod_step < self.wait:
            return NONE
        if mod_step < self.wait + self.warmup:
            return WARMUP
        return RECORD if mod_step < num_steps - 1 else SAVE

    def _base(self, step: int) -> ProfilerAction:
        """base_action, noting the steps ahead that are surely NONE (so the hot path need not ask)."""
        action = self.base_action(step)
        if action is NONE:
            self._quiet_from, self._quiet_until = step, self._quiet_end(step)
        return action

    def _quiet_end(self, step: int) -> float:
        """A step up to which (excluded) base_action stays NONE, given that it is NONE at ``step``."""
        if step < self.skip_first:
            return self.skip_first
        s = step - self.skip_first + (self.wait if self.skip_first_wait != 0 else 0)
        num_steps = self.wait + self.warmup + self.active
        if self.repeat > 0 and s / num_steps >= self.repeat:
            return float("inf")
        return step + (self.wait - s % num_steps)

    def __call__(self, step: int) -> ProfilerAction:
        # the hot path: a kept step after a kept step, inside a window, where the base schedule says NONE
        if step < self._fast_until and step == self._last_step + 1:
            now = _clock()
            ns = now - self._last_ns
            data = self._data
            self._seg_n += 1
            self._seg_ns += ns
            self._seg_data += data
            self._seg_steps.append(ns)
            self._seg_waits.append(data)
            self._data = 0
            if self._copies:
                self._seg_copies += self._copies
                self._copies = []
            self._last_ns = now
            self._last_step = step
            durs = self._durs
            if durs is not None:
                durs.append(ns)
                self._waits.append(data)
                if ns > self._gate_ns or data > self._gate_data:  # else an ordinary step: nothing to judge
                    det = self.detector
                    if det.judge(ns, data, step, self.observer_busy):
                        self._detected()
                    self._gate_ns, self._gate_data = det.gate_ns, det.gate_data
            if now >= self._next_check:
                self._next_check = self.on_demand.poll(now)
            return NONE
        return self._step(step)

    def _step(self, step: int) -> ProfilerAction:
        """Any step: see the module docstring for which are kept and where windows begin and end."""
        follows = step == self._last_step + 1
        if self._special:
            action = self._action(step, follows)
        elif self._quiet_from <= step < self._quiet_until:
            action = NONE
        else:
            action = self._base(step)
        prev = self._prev
        prev_kept = self._kept_prev and follows
        kept = action is NONE and prev is NONE and follows and step >= self._first_kept
        window_full = kept and self._seg_n + 1 >= self.window
        if self.sync and (kept is not prev_kept or window_full):
            _synchronize()  # a window of kept steps begins or ends: the GPU has done all work queued so far
        now = _clock()
        if prev_kept:
            ns = now - self._last_ns
            data = self._data
            self._seg_n += 1
            self._seg_ns += ns
            self._seg_data += data
            self._seg_steps.append(ns)
            self._seg_waits.append(data)
            det = self.detector
            if det is not None:
                if det.observe(ns, data, step, self.observer_busy):
                    self._detected()
                self._gate_ns, self._gate_data = det.gate_ns, det.gate_data
        self._data = 0
        if self._copies:  # a kept step's copies are its own; a profiled step's are left out, as its time is
            if prev_kept:
                self._seg_copies += self._copies
            self._copies = []
        if kept is not prev_kept or window_full:
            self._close_window()
        if action is not NONE:
            if prev is NONE or prev is SAVE:
                self._begin_cycle(step)
            if action is SAVE:
                self._end_cycle(step)
        if now >= self._next_check:
            self._next_check = self.on_demand.poll(now)
        self._kept_prev, self._last_ns, self._last_step, self._prev = kept, now, step, action
        # the calls after this one that the hot path may take: up to the next window edge, while nothing can act,
        # and short of the step that refreshes the detector's norm (observe, above, sees that one)
        if kept and not self._special:
            fast_until = min(self._quiet_until, step + self.window - self._seg_n)
            self._fast_until = fast_until if self.detector is None else min(fast_until, step + self.detector.due())
        else:
            self._fast_until = 0
        return action

    def _action(self, step: int, follows: bool) -> ProfilerAction:
        """The base action, or a triggered cycle's (the slow path, taken while a trigger may act)."""
        base = action = self._base(step)
        extra = self._extra
        if extra is not None:
            k = step - extra.start
            if k < self.warmup:
                action = WARMUP
            elif k < self.warmup + self.active - 1:
                action = RECORD
            else:
                self._extra = None
                self._suppress = base is not NONE
                action = SAVE
        elif self._suppress and base is not NONE:
            action = NONE
        else:
            self._suppress = False
            if base is NONE and self._prev is NONE and step > 0 and follows:
                action = self._start_triggered(step)
        det = self.detector
        self._special = (self._extra is not None or self._suppress or self.on_demand.pending is not None
                         or (det is not None and det.fired is not None))
        return action

    def _start_triggered(self, step: int) -> ProfilerAction:
        trigger, run = self.on_demand.take(), None
        if trigger is None and self.detector is not None:
            trigger, run = self.detector.take(), self.detector.run()
        if trigger is None:
            return NONE
        self._trigger_sums = Sums(*run, steps=None) if run else None
        self._starting = Cycle(self.cycle_count, step, trigger)
        if self.warmup + self.active == 1:
            return SAVE
        self._extra = self._starting
        return WARMUP if self.warmup else RECORD

    def _close_window(self) -> None:
        """A sync point between kept steps: the window since the last one is complete."""
        self.memory.edge(self._last_step + 1, closing=self._seg_n > 0)  # a window's peaks end or begin here
        if self._seg_n:
            copies = self._seg_copies
            # the schedule synchronized just before this edge, unless sync=False: a copy not yet done is
            # counted, not timed
            timed = [a.elapsed_time(b) for a, b in copies if b.query()] if copies else ()
            seg = Sums(self._seg_n, self._seg_ns, self._seg_data, len(copies), len(timed), int(sum(timed) * 1e6),
                       blocks_of(self._seg_steps, self._seg_waits), self._seg_steps)
            self.total.add(seg)
            for c in self._awaiting:
                c.after.add(seg)
                c.memory = merge(c.memory, self.memory.telemetry(windows=1))
                c.with_data = self.with_data
                c.done = True
            self._awaiting = []
            self._gap.append(seg)
        self._seg_n = self._seg_ns = self._seg_data = 0
        self._seg_copies, self._seg_steps, self._seg_waits = [], [], []

    def _begin_cycle(self, step: int) -> None:
        self._close_window()
        for c in self._awaiting:  # the next cycle began before a whole window after it was kept
            c.done = True
        self._awaiting = []
        starting, self._starting = self._starting, None
        cycle = starting if starting is not None and starting.start == step else Cycle(self.cycle_count, step,
                                                                                       "schedule")
        if self._trigger_sums is not None and cycle.trigger != "schedule":
            cycle.before, cycle.robust = self._trigger_sums, False
        else:
            taken = Sums()
            for w in reversed(self._gap):  # the last `window` to `2 * window` kept steps
                if taken.n >= self.window:
                    break
                taken.add(w)
            cycle.before = taken
        self._trigger_sums = None
        self._gap.clear()
        cycle.memory = self.memory.telemetry()
        self.memory.take()
        cycle.with_data = self.with_data
        self.cycle_count += 1
        with self._lock:
            self.cycles.append(cycle)

    def _end_cycle(self, step: int) -> None:
        with self._lock:
            cycle = self.cycles[-1] if self.cycles else None
        if cycle is not None and cycle.end is None:
            cycle.end = step
            self._awaiting.append(cycle)

    def _detected(self) -> None:
        """The detector fired, or a run of slow steps ended: a capture of that slowdown has all its steps. Either
        leaves the hot path to _step from the next call on, where there is something to act on."""
        if self.detector.fired is not None:
            self._special, self._fast_until = True, 0
        elif self._awaiting and any(c.trigger != "schedule" and not self.on_demand.asked(c.trigger)
                                    for c in self._awaiting):
            self._close_window()
            self._fast_until = 0

    def _wake(self) -> None:
        self._special, self._fast_until = True, 0  # a trigger is pending: the next step takes the slow path

    # for stepscope.loader
    def add_data_wait(self, ns: int) -> None:
        self._data += ns
        self.with_data = True

    # for stepscope.input_copy
    def add_copy(self, start, end) -> None:
        """An input copy of this step, between two recorded CUDA events; read at the next window edge."""
        self._copies.append((start, end))

    def skip_step(self) -> None:
        """The time from the last step boundary to the next (an evaluation, a checkpoint) is no step of the
        loop: it is kept out of the telemetry and the slowdown detector."""
        self._kept_prev = False
        self._fast_until = 0  # the next call takes _step, which sees that the step before it was not kept

    @property
    def profiling(self) -> bool:
        """The profiler warms up or records this step."""
        return self._prev is not NONE

    # for the handler and the user
    def cycle_at(self, step: int) -> Cycle | None:
        """The cycle that `on_trace_ready` is called for at profiler step `step` (`prof.step_num`): the one that
        ended at the step before (prof.step()) or at this one (the profiler's exit), else the last one begun,
        which the exit cut short there. A cycle that begins at `step` (wait=0) is the next one, not this."""
        with self._lock:
            for c in reversed(self.cycles):
                if c.end is not None and step - 1 <= c.end <= step:
                    return c
            for c in reversed(self.cycles):
                if c.end is None and c.start <= step:
                    c.end = step
                    c.done = True
                    return c
        return None

    def telemetry(self) -> Telemetry | None:
        """Every kept step of the loop so far (telemetry.py): steps, step_ms, data_ms (with stepscope.loader),
        copy_ms (with stepscope.input_copy), and on CUDA the allocator's counters (mem_*)."""
        s = Sums(steps=None)
        s.add(self.total)
        s.add(Sums(self._seg_n, self._seg_ns, self._seg_data, len(self._seg_copies),  # the open window too
                   blocks=blocks_of(self._seg_steps, self._seg_waits), steps=None))
        out = telemetry_of(s, self.with_data)
        return out.with_memory(self.memory.telemetry(windows=len(self.memory.edges))) if out is not None else None

    def finish(self) -> None:
        """The loop is over: every cycle's telemetry is as complete as it will get."""
        self._close_window()
        for c in self._awaiting:
            c.done = True
        self._awaiting = []




def _synchronize() -> None:
    if torch.cuda.is_initialized():  # no CUDA work was ever queued otherwise (and no driver call is made)
        torch.cuda.synchronize()  # sync point: a window edge (see the module docstring)


def clock():
    """The clock the schedule reads (time.perf_counter_ns), for what times steps beside it (loader.py)."""
    return _clock


_latest: list[StepscopeSchedule] = []  # the schedule a stepscope.loader without one reports to


def latest() -> StepscopeSchedule | None:
    return _latest[-1] if _latest else None


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0, skip_first_wait: int = 0,
             capture_on_slowdown: bool = False, slowdown: SlowdownRule | None = None,
             capture_file: str | os.PathLike | None = None, capture_signal: int | signal_module.Signals | None = None,
             sync: bool = True, window: int = WINDOW, warm_steps: int = WARM_STEPS) -> StepscopeSchedule:
    """A drop-in for `torch.profiler.schedule` (same arguments, same actions) that times the unprofiled steps.

    capture_on_slowdown: also start a cycle when the unprofiled step slows down or starts waiting for data
        (`slowdown`: the rule and the rate limit, triggers.SlowdownRule).
    capture_file: start a cycle when this file appears (checked at most every 0.5 s; it is removed).
    capture_signal: start a cycle on this signal (e.g. signal.SIGUSR1; installed from the main thread).
    sync, window, warm_steps: see the module docstring."""
    detach_after_cycles(wait, repeat)  # the loop between cycles runs at its own speed, and is timed at it (cupti.py)
    quiet_kineto(torch.cuda.is_available())  # no Kineto log lines in the loop's output on a CPU-only machine
    s = StepscopeSchedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first,
                          skip_first_wait=skip_first_wait, capture_on_slowdown=capture_on_slowdown, slowdown=slowdown,
                          capture_file=Path(capture_file) if capture_file is not None else None,
                          capture_signal=capture_signal, sync=sync, window=window, warm_steps=warm_steps)
    _latest[:] = [s]
    return s

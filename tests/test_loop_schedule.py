"""stepscope.schedule, stepscope.loader and the capture triggers, driven step by step without a profiler.

    pytest tests/test_loop_schedule.py -q      # a few seconds

Most tests set the schedule's clock to a fake one (schedule._clock), so step times are exact whatever the
machine is doing; one test times the real per-step cost with a generous bound (scripts/bench_schedule.py
times it precisely).
"""

from __future__ import annotations

import os
import random
import signal
import time
import warnings

import pytest
import stepscope
import torch
from stepscope.capture import schedule as schedule_module
from stepscope.capture.triggers import SlowdownRule
from torch.profiler import ProfilerAction

NONE, WARMUP, RECORD, SAVE = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                              ProfilerAction.RECORD_AND_SAVE)


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, ms: float) -> None:
        self.ns += int(ms * 1e6)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(schedule_module, "_clock", c)
    return c


def drive(sched, step_ms, steps: int, clock: FakeClock, data_ms=None) -> list:
    """Call the schedule as torch.profiler.profile does (step 0 at construction, then one per prof.step()),
    going on from where the last call left it; step k lasts step_ms(k, action) ms, of which data_ms(k)
    waiting for its batch. Returns the actions of the steps from the last one called before."""
    first = sched._last_step if sched._last_step >= 0 else 0
    actions = [sched(0)] if first == 0 else [sched._prev]
    for k in range(first, first + steps):
        if data_ms is not None:
            sched.add_data_wait(int(data_ms(k) * 1e6))
        clock.advance(step_ms(k, actions[-1]))
        actions.append(sched(k + 1))
    return actions


ARGS = [dict(wait=1, warmup=1, active=3, repeat=1), dict(wait=2, warmup=0, active=1),
        dict(wait=0, warmup=1, active=2, repeat=3, skip_first=5), dict(wait=5, warmup=2, active=4, skip_first=3),
        dict(wait=3, warmup=1, active=1, repeat=2, skip_first=2, skip_first_wait=1),
        dict(wait=1000, warmup=1, active=3, repeat=1, skip_first=10)]


@pytest.mark.parametrize("args", ARGS)
def test_same_actions_as_torch_schedule(args):
    warnings.simplefilter("ignore")  # warmup=0 warns, in both
    ours, theirs = stepscope.schedule(**args), torch.profiler.schedule(**args)
    assert [ours(i) for i in range(1200)] == [theirs(i) for i in range(1200)]


def test_same_actions_as_torch_schedule_random_arguments():
    warnings.simplefilter("ignore")
    rng = random.Random(0)
    for _ in range(200):
        args = dict(wait=rng.randint(0, 6), warmup=rng.randint(0, 3), active=rng.randint(1, 4),
                    repeat=rng.randint(0, 3), skip_first=rng.randint(0, 8), skip_first_wait=rng.randint(0, 1))
        ours, theirs = stepscope.schedule(**args), torch.profiler.schedule(**args)
        assert [ours(i) for i in range(90)] == [theirs(i) for i in range(90)], args


def test_invalid_arguments_fail_as_torch_does():
    with pytest.raises(AssertionError, match="Invalid profiler schedule arguments"):
        stepscope.schedule(wait=1, warmup=1, active=0)


def test_only_unprofiled_warm_steps_are_timed(clock):
    # profiled steps (warm-up, recording, and the step holding the export) take 50 ms, the others 2 ms
    sched = stepscope.schedule(wait=6, warmup=1, active=2, window=4)
    torch_actions = torch.profiler.schedule(wait=6, warmup=1, active=2)
    acts = [torch_actions(k) for k in range(201)]
    profiled = {k for k in range(200) if acts[k] is not NONE or (k and acts[k - 1] is not NONE)}
    drive(sched, lambda k, a: 50.0 if k in profiled else 2.0, 200, clock)
    t = sched.telemetry()
    expected = [k for k in range(200) if k >= 3 and k not in profiled]
    assert t["steps"] == len(expected) and t["step_ms"] == pytest.approx(2.0)
    assert "data_ms" not in t
    cycles = list(sched.cycles)
    assert [(c.start, c.end, c.trigger) for c in cycles[:2]] == [(6, 8, "schedule"), (15, 17, "schedule")]
    # each cycle's telemetry: the kept steps just before it and the first window after it
    assert cycles[1].done and cycles[1].telemetry()["step_ms"] == pytest.approx(2.0)
    assert cycles[1].before.n == 5 and cycles[1].after.n == 4  # steps 10-14 before, 19-22 after


def test_a_few_stalled_steps_do_not_drag_the_unprofiled_step(clock):
    # a 10 ms loop whose unprofiled steps 150-152 and 230 are stalled to 400 ms by other work on the machine;
    # data: 2 ms of each step waits for the batch, 300 of the stalled steps' 400
    stalled = {150, 151, 152, 230}
    sched = stepscope.schedule(wait=200, warmup=1, active=2, repeat=1)
    drive(sched, lambda k, a: 400.0 if k in stalled else 10.0, 300, clock,
          data_ms=lambda k: 300.0 if k in stalled else 2.0)
    (cycle,) = sched.cycles
    t = cycle.telemetry()
    kept = t["steps"]
    # the plain mean of the same steps is dragged far off (what the cycle read before the robust step)
    assert t["step_ms_mean"] == pytest.approx((4 * 400 + (kept - 4) * 10) / kept)
    assert t["step_ms_mean"] > 1.5 * 10
    assert t["step_ms"] == pytest.approx(10.0) and t["data_ms"] == pytest.approx(2.0)
    assert t["step_ms_median"] == pytest.approx(10.0) and t["step_ms_p25"] == t["step_ms_p75"] == pytest.approx(10)
    whole = sched.telemetry()  # the loop's total: robust too, without the single steps' spread
    assert whole["step_ms"] == pytest.approx(10.0) and "step_ms_median" not in whole


def test_a_slowdown_capture_keeps_every_step_of_the_slowdown(clock):
    # the slowdown's own steps are what its capture describes: no step of them is left out as a stall
    sched, _ = slow_loader_run(clock, SlowdownRule())
    (cycle,) = sched.cycles
    s = cycle.before.n + cycle.after.n
    t = cycle.telemetry()
    assert t["steps"] == s and "step_ms_mean" not in t
    assert t["step_ms"] == pytest.approx((cycle.before.ns + cycle.after.ns) / s / 1e6)


def test_the_loops_total_keeps_its_blocks_bounded(clock):
    from stepscope.capture import cycle as cycle_module
    from stepscope.capture.cycle import Sums
    total = Sums(steps=None)
    for _ in range(cycle_module.MAX_BLOCKS + 10):
        total.add(Sums(8, 8_000_000, 0, blocks=[(8, 8_000_000, 0)]))
    assert len(total.blocks) <= cycle_module.MAX_BLOCKS // 2 + 10
    assert sum(b[0] for b in total.blocks) == total.n and sum(b[1] for b in total.blocks) == total.ns


@pytest.mark.parametrize("wait", [0, 2])
def test_the_handler_finds_the_cycle_that_just_ended(clock, wait):
    sched = stepscope.schedule(wait=wait, warmup=1, active=2, repeat=3)
    acts = drive(sched, lambda k, a: 1.0, 3 * (wait + 3) + 2, clock)
    saves = [k for k, a in enumerate(acts) if a is SAVE]
    # on_trace_ready runs in the prof.step() after each save, with prof.step_num one past it
    assert [sched.cycle_at(k + 1).end for k in saves] == saves
    # the profiler's exit during a cycle: that cycle, ended there
    cut = stepscope.schedule(wait=wait, warmup=1, active=5)
    drive(cut, lambda k, a: 1.0, wait + 3, clock)
    assert (cut.cycle_at(wait + 3).start, cut.cycle_at(wait + 3).end) == (wait, wait + 3)


def test_syncs_only_at_the_edges_of_windows_of_timed_steps(clock, monkeypatch):
    synced = []
    sched = stepscope.schedule(wait=12, warmup=1, active=2, window=5)
    monkeypatch.setattr(schedule_module, "_synchronize", lambda: synced.append(sched._last_step + 1))
    drive(sched, lambda k, a: 1.0, 30, clock)
    # timed from step 3: windows 3-7 and 8-11, which ends where the cycle (12-14) begins; after it (step 15
    # holds the export) 16-20, 21-25 and 26, which ends where the next cycle begins (27)
    assert synced == [3, 8, 12, 16, 21, 26, 27]
    off = stepscope.schedule(wait=12, warmup=1, active=2, window=5, sync=False)
    synced.clear()
    monkeypatch.setattr(schedule_module, "_synchronize", lambda: synced.append(off._last_step + 1))
    drive(off, lambda k, a: 1.0, 30, clock)
    assert synced == [] and off.telemetry()["steps"] == sched.telemetry()["steps"]


def test_loader_wait_is_the_telemetry_data_ms(clock):
    sched = stepscope.schedule(wait=10, warmup=1, active=1)
    batches = []

    def slow_batches():
        for i in range(60):
            clock.advance(3.0)  # 3 ms to make each batch
            yield i

    actions = [sched(0)]
    for b in stepscope.loader(slow_batches(), schedule=sched):
        batches.append(b)
        clock.advance(1.0)  # the step's own work
        actions.append(sched(len(batches)))
    assert batches == list(range(60))
    t = sched.telemetry()
    assert t["data_ms"] == pytest.approx(3.0) and t["step_ms"] == pytest.approx(4.0)


def test_loader_without_a_schedule_reports_to_the_latest_and_passes_len():
    sched = stepscope.schedule(wait=10, warmup=1, active=1)
    wrapped = stepscope.loader([1, 2, 3])
    assert len(wrapped) == 3 and list(wrapped) == [1, 2, 3]
    assert sched.with_data


def slow_loader_run(clock, rule: SlowdownRule, stall=range(200, 231), steps: int = 400):
    sched = stepscope.schedule(wait=10_000, warmup=1, active=3, repeat=1, capture_on_slowdown=True, slowdown=rule)
    actions = drive(sched, lambda k, a: 2.0 + (20.0 if k in stall else 0.0), steps, clock,
                    data_ms=lambda k: 20.0 if k in stall else 0.01)
    return sched, actions


def test_a_loader_stall_starts_one_capture_during_it(clock):
    sched, actions = slow_loader_run(clock, SlowdownRule())
    (cycle,) = sched.cycles
    # 5 slow steps (200-204) set it off; it starts at the next step but one, recorded while the stall lasts
    assert cycle.start == 206 and cycle.end == 209 and cycle.trigger.startswith("loader wait: 5 steps")
    assert [actions[k] for k in range(206, 211)] == [WARMUP, RECORD, RECORD, SAVE, NONE]
    # its telemetry: the steps that set it off (200-204) and those after it until the stall ended (211-231)
    t = cycle.telemetry()
    assert t["steps"] == 5 + 21 and t["data_ms"] > 18 and t["step_ms"] > 20


def test_slowdown_captures_are_rate_limited(clock):
    stalls = [range(s, s + 10) for s in range(100, 400, 50)]
    in_stall = {k for r in stalls for k in r}
    sched = stepscope.schedule(wait=10_000, warmup=1, active=1, repeat=1, capture_on_slowdown=True,
                               slowdown=SlowdownRule(max_per_hour=2))
    drive(sched, lambda k, a: 25.0 if k in in_stall else 1.0, 420, clock)
    assert [c.trigger.split(":")[0] for c in sched.cycles] == ["slowdown", "slowdown"]
    assert sched.detector.suppressed == len(stalls) - 2


def test_a_slowdown_is_captured_once(clock):
    sched = stepscope.schedule(wait=10_000, warmup=1, active=1, repeat=1, capture_on_slowdown=True)
    drive(sched, lambda k, a: 25.0 if k >= 100 else 1.0, 150, clock)  # slower for good from step 100
    assert len(sched.cycles) == 1


def test_touching_the_capture_file_starts_a_cycle(clock, tmp_path):
    flag = tmp_path / ".capture"
    sched = stepscope.schedule(wait=10_000, warmup=1, active=2, repeat=1, capture_file=flag)
    acts = drive(sched, lambda k, a: 1.0, 100, clock)  # 0.1 s: looked for once at most
    assert not sched.cycles and set(acts) == {NONE}
    flag.touch()
    acts = drive(sched, lambda k, a: 100.0, 12, clock)[1:]
    (cycle,) = sched.cycles
    assert cycle.trigger == f"file {flag}" and not flag.exists()
    assert acts[cycle.start - 101: cycle.start - 101 + 3] == [WARMUP, RECORD, SAVE]


def test_a_signal_starts_a_cycle(clock):
    sched = stepscope.schedule(wait=10_000, warmup=0, active=2, repeat=1, capture_signal=signal.SIGUSR1)
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        drive(sched, lambda k, a: 1.0, 20, clock)
        signal.raise_signal(signal.SIGUSR1)
        acts = [sched(k) for k in range(21, 25)]
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert acts == [RECORD, SAVE, NONE, NONE] and sched.cycles[0].trigger == "signal SIGUSR1"


def test_a_triggered_cycle_never_overlaps_the_fixed_schedule(clock, tmp_path):
    flag = tmp_path / ".capture"
    sched = stepscope.schedule(wait=8, warmup=1, active=2, capture_file=flag)
    theirs = torch.profiler.schedule(wait=8, warmup=1, active=2)
    drive(sched, lambda k, a: 1.0, 30, clock)
    flag.touch()
    acts = drive(sched, lambda k, a: 600.0, 60, clock)  # steps 30-90
    # every cycle, fixed or triggered, is whole: warm-up, record, save
    runs = "".join({NONE: "n", WARMUP: "w", RECORD: "r", SAVE: "s"}[a] for a in acts)
    assert all(c == "wrs" for c in runs.replace("n", " ").split()), runs
    assert [c.trigger.split(" ")[0] for c in sched.cycles].count("file") == 1
    assert acts != [theirs(k) for k in range(30, 91)]


def test_per_step_cost_is_about_a_microsecond():
    # the real clock; the bound is generous for a shared 2-core machine (scripts/bench_schedule.py: precise)
    sched = stepscope.schedule(wait=10**9, warmup=1, active=1)
    n = 200_000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for k in range(n):
            sched(k)
        best = min(best, (time.perf_counter() - t0) / n)
    assert best < 5e-6, f"{best * 1e6:.2f} us per step"
    assert sched.telemetry()["steps"] > n


def test_bench_schedule_reports_each_variant_and_refuses_bad_flags():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_schedule.py"
    p = subprocess.run([sys.executable, str(script), "--steps", "2000", "--rounds", "1", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    ns = json.loads(p.stdout)["ns_per_call"]
    assert {"torch.profiler.schedule", "stepscope.schedule", "stepscope.loader (per batch)"} <= set(ns)
    bad = subprocess.run([sys.executable, str(script), "--steps", "10"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_the_schedule_asks_kineto_to_detach_cupti_after_each_cycle(monkeypatch):
    """After a cycle CUPTI would stay attached to every kernel launch (capture/cupti.py): the schedule asks
    for the teardown unless the user's environment already says either way."""
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    stepscope.schedule(wait=1, warmup=1, active=1)
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    stepscope.schedule(wait=1, warmup=1, active=1)
    assert os.environ["TEARDOWN_CUPTI"] == "0"


@pytest.mark.parametrize("wait, repeat, asks", [(0, 0, False), (0, 3, False), (0, 1, True), (1, 0, True)])
def test_no_teardown_between_back_to_back_cycles(monkeypatch, wait, repeat, asks):
    """Cycles with no step between them: the teardown would fall inside the next cycle and leave it with no
    GPU events (tests/test_schedule_cuda.py), so the schedule does not ask for it there."""
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    stepscope.schedule(wait=wait, warmup=1, active=1, repeat=repeat)
    assert os.environ.get("TEARDOWN_CUPTI") == ("1" if asks else None)


def test_the_copy_time_is_the_mean_timed_copy_times_copies_a_step():
    """telemetry_of: a window's copies that the GPU had not finished when read count, but are not timed."""
    from stepscope.capture.cycle import Sums, telemetry_of

    one = Sums(n=4, ns=40_000_000, copies=4, copies_timed=2, copy=2_000_000)
    assert telemetry_of(one, False)["copy_ms"] == pytest.approx(1.0)
    two = Sums(n=4, ns=40_000_000, copies=8, copies_timed=8, copy=8_000_000)  # two copies a step
    assert telemetry_of(two, False)["copy_ms"] == pytest.approx(2.0)
    assert "copy_ms" not in telemetry_of(Sums(n=4, ns=40_000_000, copies=4), False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the copy is timed: tests/test_schedule_cuda.py")
def test_input_copy_without_a_gpu_runs_the_block_untimed():
    sched = stepscope.schedule(wait=2, warmup=1, active=1, repeat=1)
    x = torch.ones(8)
    for step in range(12):
        with stepscope.input_copy():
            y = x.to("cpu", copy=True)
        sched(step)
    assert torch.equal(y, x)
    assert sched._copies == [] and "copy_ms" not in sched.telemetry()


def test_a_skipped_step_stays_out_of_the_telemetry_and_the_actions(clock):
    """An evaluation every 10th step (200 ms on top of a 2 ms step), announced with skip_step() as the
    demonstration trainer does: the telemetry is the 2 ms step's, the actions those of torch's schedule."""
    warnings.simplefilter("ignore")
    args = dict(wait=30, warmup=1, active=2, repeat=2)
    sched, theirs = stepscope.schedule(**args, window=8), torch.profiler.schedule(**args)
    actions = [sched(0)]
    for k in range(200):
        clock.advance(2.0)
        if k % 10 == 9:
            sched.skip_step()
            clock.advance(200.0)
        actions.append(sched(k + 1))
    assert actions == [theirs(i) for i in range(201)]
    assert sched.telemetry().step_ms == pytest.approx(2.0) and sched.telemetry().steps > 100
    assert all(c.telemetry().step_ms == pytest.approx(2.0) for c in sched.cycles)
    plain = stepscope.schedule(**args, window=8)  # the same loop without skip_step: the evaluations count
    plain(0)
    for k in range(200):
        clock.advance(202.0 if k % 10 == 9 else 2.0)
        plain(k + 1)
    assert plain.telemetry().step_ms > 10

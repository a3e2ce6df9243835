"""The slowdown detector as the schedule's hot path drives it, against the plain rule (tests/reference/slowdown.py).

    pytest tests/test_slowdown_detector.py -q      # a few seconds

The hot path appends each kept step to the detector's lists and asks for a verdict only past its integer gates;
the reference keeps a ring of the last norm_steps steps and judges every step in full. Fed the same steps
(random paces, lasting changes of pace, stalls, loader waits, steps on the thresholds to the nanosecond, the
trace handler's thread at work), both give the same verdict at every step, the same capture descriptions and
the same count of slowdowns left uncaptured; a whole schedule gives the same actions and cycles as one that
takes its general path at every step with the reference detector.
"""

from __future__ import annotations

import random

import pytest
import stepscope
from reference.slowdown import SlowdownDetector as ReferenceDetector
from stepscope.capture import schedule as schedule_module
from stepscope.capture.schedule import StepscopeSchedule
from stepscope.capture.triggers import FIRED, SlowdownDetector, SlowdownRule

RULES = [SlowdownRule(), SlowdownRule(patience=1, norm_steps=4, max_per_hour=1000, min_extra_ms=0.0),
         SlowdownRule(factor=2.0, patience=5, norm_steps=16, max_per_hour=2, min_extra_ms=1.0),
         SlowdownRule(factor=1.1, patience=2, norm_steps=7, max_per_hour=0, min_extra_ms=0.0),
         SlowdownRule(factor=1.5, patience=3, norm_steps=8, max_per_hour=1000, data_floor_ms=0.0,
                      min_extra_ms=0.0005)]
# a median of 1000 ns makes 1.5x exactly 1500.0 ns: steps on either side of it, alone and halved when shared
EDGE_NS = [1000, 1000, 1000, 999, 1001, 1499, 1500, 1501, 2999, 3000, 3001, 3002, 3003]
EDGE_DATA = [0, 0, 0, 499_999, 500_000, 500_001, 999_999, 1_000_000, 1_000_001, 1_000_002, 1_000_003]


def steps(seed: int, n: int) -> list[tuple[int, int, bool]]:
    """n kept steps (ns, data ns, trace handler busy), in stretches of one kind each."""
    rng = random.Random(seed)
    level = rng.choice([2e6, 10e6, 700.0])  # a loop's ms steps, or a bench's sub-µs calls
    busy = False
    out: list[tuple[int, int, bool]] = []
    while len(out) < n:
        if rng.random() < 0.1:
            level = max(200.0, level * rng.choice([0.5, 0.8, 1.3, 2.0, 3.0]))  # a lasting change of pace
        if rng.random() < 0.1:
            busy = not busy
        kind = rng.random()
        for _ in range(rng.randint(1, 40)):
            ns, data = int(level * rng.uniform(0.9, 1.1)), rng.choice([0, 0, 10_000, int(level * 0.03)])
            if kind < 0.15:  # a stall
                ns = int(ns * rng.uniform(1.2, 4.0))
            elif kind < 0.25:  # a loader that falls behind
                data = int(rng.uniform(0.2e6, 30e6))
                ns += data
            elif kind < 0.4:  # on the thresholds
                ns, data = rng.choice(EDGE_NS), rng.choice(EDGE_DATA)
            out.append((ns, data, busy or rng.random() < 0.02))
    return out[:n]


def hot_path_verdicts(det: SlowdownDetector, seq) -> tuple[list[int], list[tuple], int]:
    """What the schedule's hot path and its general path do with each kept step (schedule.py)."""
    verdicts, fired, judged = [], [], 0
    for step, (ns, data, busy) in enumerate(seq):
        due = det.due()
        assert due >= 1
        if due == 1:  # the step that refreshes the norm is the general path's: observe
            v = det.observe(ns, data, step, busy)
        else:
            det.durs.append(ns)
            det.waits.append(data)
            v = 0
            if ns > det.gate_ns or data > det.gate_data:
                judged += 1
                v = det.judge(ns, data, step, busy)
        verdicts.append(v)
        if v == FIRED:
            fired.append((step, det.run(), det.take()))
    return verdicts, fired, judged


def reference_verdicts(det: ReferenceDetector, seq) -> tuple[list[int], list[tuple]]:
    verdicts, fired = [], []
    for step, (ns, data, busy) in enumerate(seq):
        v = det.observe(ns, data, step, busy)
        verdicts.append(v)
        if v == FIRED:
            fired.append((step, det.run(), det.take()))
    return verdicts, fired


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"f{r.factor}-p{r.patience}-n{r.norm_steps}-h{r.max_per_hour}")
def test_the_hot_path_gives_the_references_verdict_at_every_step(rule):
    fired_total = 0
    for seed in range(12):
        seq = steps(seed, 3000)
        ours, ref = SlowdownDetector(rule), ReferenceDetector(rule)
        verdicts, fired, judged = hot_path_verdicts(ours, seq)
        ref_verdicts, ref_fired = reference_verdicts(ref, seq)
        first = next((k for k, (a, b) in enumerate(zip(verdicts, ref_verdicts)) if a != b), None)
        assert first is None, (seed, first, seq[max(0, first - 5):first + 1], verdicts[first], ref_verdicts[first])
        assert fired == ref_fired and ours.suppressed == ref.suppressed, seed
        assert 0 < judged < len(seq), (seed, judged)  # some steps took the gate, some were judged
        fired_total += len(fired) + ours.suppressed
    assert fired_total >= 12  # the sequences do have slowdowns


def test_a_steady_loop_asks_for_no_verdict(monkeypatch):
    calls = {"judge": 0, "observe": 0}
    for name in calls:
        def counted(self, *a, _name=name, _real=getattr(SlowdownDetector, name)):
            calls[_name] += 1
            return _real(self, *a)
        monkeypatch.setattr(SlowdownDetector, name, counted)
    clock = Clock()
    monkeypatch.setattr(schedule_module, "_clock", clock)
    sched = stepscope.schedule(wait=10_000, warmup=1, active=1, capture_on_slowdown=True)
    drive(sched, [(2_000_000 + 1000 * (k % 7), 0, False) for k in range(2000)], clock)
    # every judge is observe's (the general path's: window edges and norm refreshes), none the hot path's
    assert calls["judge"] == calls["observe"] < 2000 // 64 + 2000 // 50 + 4 and not sched.cycles
    assert sched.detector._norm == 2_003_000  # the norm was refreshed all the same (the median of 0..6 us more)


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def drive(sched, seq, clock: Clock) -> list:
    """torch.profiler.profile's calls (step 0 at construction, then one per prof.step()); the step before call
    k + 1 lasts seq[k][0] ns, of which seq[k][1] waiting for its batch, with the trace handler busy or not."""
    actions = [sched(0)]
    for k, (ns, data, busy) in enumerate(seq):
        if data:
            sched.add_data_wait(data)
        clock.ns += ns
        sched.observer_busy = busy
        actions.append(sched(k + 1))
    sched.finish()
    return actions


class ReferenceSchedule(StepscopeSchedule):
    """Every step through the general path (_step), with the reference detector: the schedule without its hot
    path, which only ever shortcuts _step."""

    def __call__(self, step: int):
        return self._step(step)


class Oracle(ReferenceDetector):
    gate_ns = gate_data = -1  # read by _step for the hot path, which ReferenceSchedule never takes

    def due(self) -> int:
        return 1


def run_schedule(cls, seq, monkeypatch, **kw):
    clock = Clock()
    monkeypatch.setattr(schedule_module, "_clock", clock)
    sched = cls(capture_on_slowdown=True, **kw)
    if cls is ReferenceSchedule:
        sched.detector = Oracle(sched.detector.rule)
    actions = drive(sched, seq, clock)
    cycles = [(c.start, c.end, c.trigger, c.telemetry()) for c in sched.cycles]
    return actions, cycles, sched.detector.suppressed


@pytest.mark.parametrize("seed", range(4))
def test_the_schedule_captures_the_same_steps_as_with_the_reference_detector(seed, monkeypatch):
    seq = steps(100 + seed, 4000)
    kw = dict(wait=700, warmup=1, active=2, slowdown=SlowdownRule(patience=2 + seed % 2, max_per_hour=1000))
    ours = run_schedule(StepscopeSchedule, seq, monkeypatch, **kw)
    ref = run_schedule(ReferenceSchedule, seq, monkeypatch, **kw)
    assert ours[0] == ref[0]
    assert ours[1] == ref[1] and ours[2] == ref[2]
    triggered = [c for c in ours[1] if c[2] != "schedule"]
    assert len(triggered) >= 3 and len(ours[1]) > len(triggered), ours[1]


def _fires(seq, rule=SlowdownRule()) -> list[str]:
    det, out = SlowdownDetector(rule), []
    for k, (ns, data) in enumerate(seq):
        if det.observe(ns, data, k) == FIRED:
            out.append(det.take())
    return out


def test_a_slowdown_needs_steps_longer_by_the_absolute_floor_too():
    """A 0.15 ms loop whose steps double for a moment on a shared machine (5 steps of 0.31 ms, over 1.5x
    the median), or run 9 ms longer while other processes hold the cores, is no slowdown; 5 steps 20 ms
    longer are one."""
    norm = [(150_000 + k % 3, 0) for k in range(64)]
    assert _fires(norm + [(310_000, 0)] * 5 + [(150_000, 0)] * 10) == []
    assert _fires(norm + [(9_150_000, 0)] * 5 + [(150_000, 0)] * 10) == []
    assert len(_fires(norm + [(20_150_000, 0)] * 5 + [(150_000, 0)] * 10)) == 1


def test_a_wait_that_does_not_make_the_step_slower_is_no_slowdown():
    """Waits for the batch while the steps take no longer than the median (the loop's own work shrank by as
    much): nothing fires; the same waits making each step 20 ms longer fire a loader-wait capture."""
    norm = [(10_000_000, 0)] * 64
    assert _fires(norm + [(9_000_000, 3_000_000)] * 5) == []
    (fired,) = _fires(norm + [(30_000_000, 20_000_000)] * 5)
    assert fired.startswith("loader wait: 5 steps")

"""Telemetry scales time, it never reclassifies it: a differential test over every trace in tests/data.

Each trace is read with telemetry of two kinds:
- synthesised from its own profiled steps: the profiled step scaled by SCALES, with no optional field. The
  verdict must be the one of an independent reference (`scaled`): the trace's own buckets, the GPU's as
  they are and the host's grown or shrunk together to the measured step. A bucket may change only with
  the scale of the step, never vanish because a field was not measured;
- the same with each optional field added, at the value the trace itself shows (`data_ms`: its wait for
  data, scaled with the host; `copy_ms`: its copy time on the GPU). A field that only confirms the trace
  must not change the verdict; where it does, the field's absence could flip the verdict, and ABSENCE_FLIPS
  names it;
- where a real measured twin exists (a trace handler's cycles.jsonl row, a suite's telemetry.json), the
  twin with and without each of its optional fields; any difference must be in ABSENCE_FLIPS too.

tests/data/loader_main_process is the case that made this test: a DataLoader working in the main process,
profiled through stepscope.schedule + stepscope.trace_handler without stepscope.loader (so no data_ms); its
removal truth says data_bound, and torch's own handler's trace of the same loop reads data_bound.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from few_by_default import few_by_default
from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.findings import verdict
from stepscope.analysis.span import analyze_selected
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.report.telemetry import trace_telemetry, valid
from stepscope.trace.discover import discover

DATA = Path(__file__).parent / "data"
SCALES = (0.6, 1.0, 1.25)  # a longer measured step contradicts the trace (span.LOAD_CHANGED_FACTOR)
FIELDS = ("data_ms", "copy_ms")
DEVICE = ("gpu_busy", "transfer", "device_idle", "communication")
# (trace folder relative to tests/data, field): where the field's absence flips the verdict, and why. Only
# data_ms, and only on GPU traces whose DataLoader is fed by worker processes: whether the workers keep up
# cannot be read from a few recorded steps (they may run on prefetched batches), so the measured mean wait
# decides whether the loader paces the step. Without it the trace alone reads launch_bound and says that
# data_bound is possible (span.WORKERS_UNSEEN). The real twins of loader_two_workers, loader_catching_up and
# convnext_loader read data_bound, their truth; loader_ahead's synthesised wait (the profiled 0.72 ms a step,
# its twin measured 0.10 ms) crosses the pacing threshold where the real one does not. loops_h200/vit_pageable
# (a profiled "wait" of 23 ms a step that holds its pageable copies, its twin's measured wait 0.01 ms) reads the
# same either way: a measured step is set aside as contradicted only when the whole steps contradict too.
ABSENCE_FLIPS = {("suite/loader_ahead", "data_ms"), ("suite/loader_two_workers", "data_ms"),
                 ("suite/loader_catching_up", "data_ms"), ("holdout/convnext_loader", "data_ms")}


def _traces():
    return [t for t in discover(DATA).traces if "golden" not in t.run]


def _id(t) -> str:
    return f"{t.run}/{t.worker}"


@cache
def _parsed(path: Path, worker: str, span: str):
    return parse_trace_file(path, worker, span)


def _twin(t) -> dict | None:
    """The trace's measured telemetry: its cycle's row, or the telemetry.json beside it."""
    row = trace_telemetry([t], None)[0]
    if row is None and (t.path.parent / "telemetry.json").is_file():
        row = valid(json.loads((t.path.parent / "telemetry.json").read_text()))
    return row


def scaled(profiled: Breakdown, step_ms: float) -> Breakdown:
    """The reference: the profiled steps' own buckets (ms per step), the step made `step_ms` long. Device
    time stays (scaled down only where the step is shorter than it); the host's buckets keep their
    proportions (all to the first host bucket where the trace shows no host time)."""
    p = {b: profiled.ms_per_step(b) for b in profiled.buckets}
    dev = sum(p.get(b, 0.0) for b in DEVICE)
    out = dict(p)
    host = [b for b in p if b not in DEVICE]
    if step_ms <= dev:
        for b in p:
            out[b] = p[b] * step_ms / dev if b in DEVICE else 0.0
    else:
        total = sum(p[b] for b in host)
        for b in host:
            out[b] = (step_ms - dev) * (p[b] / total if total > 0 else float(b == ("launch" if dev else "cpu_ops")))
    n = profiled.steps
    return Breakdown({b: v * 1e3 * n for b, v in out.items()}, max(step_ms, dev) * 1e3 * n, n)


def _field_value(profiled: Breakdown, step_ms: float, field: str) -> float:
    ref = scaled(profiled, step_ms)
    return ref.ms_per_step("data") if field == "data_ms" else ref.ms_per_step("transfer")


def _flips_of(t) -> set[tuple[str, str]]:
    parsed = _parsed(t.path, t.worker, t.span)
    alone = analyze_selected(parsed)
    prof = alone.breakdown_profiled
    gpu = alone.gpu
    fields = FIELDS if gpu else ("data_ms",)
    p_step = prof.total_us / prof.steps / 1e3
    flips = set()
    for f in SCALES:
        step = f * p_step
        base = analyze_selected(parsed, {"step_ms": step})
        ref = verdict(scaled(prof, step), gpu, alone.loader_paced)
        assert base.verdict == ref, (f"{_id(t)} at {f}x the profiled step: {base.verdict}, but the trace's own "
                                     f"time scaled to the step reads {ref}")
        for field in fields:
            with_field = analyze_selected(parsed, {"step_ms": step, field: _field_value(prof, step, field)})
            if with_field.verdict != base.verdict:
                flips.add((t.run, field))
    twin = _twin(t)
    if twin is not None:
        real = analyze_selected(parsed, twin).verdict
        for field in set(twin) & set(FIELDS):
            without = {k: v for k, v in twin.items() if k != field}
            if analyze_selected(parsed, without).verdict != real:
                flips.add((t.run, field))
    return flips


# By default, every trace whose verdict a field's absence flips, every CPU trace, and GPU traces of each verdict
# read with and without a real twin; the others (more of the same kinds, about two thirds of the time) run in
# the slow set.
DEFAULT_TRACES = [
    "suite/loader_ahead/loader_ahead", "suite/loader_two_workers/loader_two_workers",
    "suite/loader_catching_up/loader_catching_up", "holdout/convnext_loader/convnext_loader",
    "cpu_resnet/cpu_resnet", "ddp_gloo/ddp_gloo_rank0", "ddp_gloo/ddp_gloo_rank1",
    "lightning_cpu/fit-profile-[Strategy]SingleDeviceStrategy.training_step",
    "loader_main_process/dropin/loader_main_process", "loader_main_process/light_dropin/loader_main_process",
    "loader_main_process/light_plain/loader_main_process", "loader_main_process/plain/loader_main_process",
    "loops_h200/vit_pageable/vit_pageable", "suite/pageable_copy/pageable_copy",
    "suite/loader_in_process/loader_in_process", "slow_dataset/slow_dataset", "cuda_graph/cuda_graph",
    "eager_bs32/eager_bs32", "eager_bs128/eager_bs128", "hf_trainer/hf",
    "suite/compile_reduce_overhead/compile_reduce_overhead", "holdout/mlp_adamw_loop/mlp_adamw_loop",
    "suite_ddp/balanced/balanced_rank0", "suite_ddp/balanced/balanced_rank1",
    "suite_ddp/balanced_skew/balanced_rank0", "suite_ddp/balanced_skew/balanced_rank1",
    "suite_ddp/comm/comm_rank0", "suite_ddp/comm/comm_rank1",
    "suite_ddp/straggler/straggler_rank0", "suite_ddp/straggler/straggler_rank1",
]


def test_the_differential_reads_every_trace():
    traces = _traces()
    assert len(traces) >= 40  # every trace of tests/data, the suites' included
    runs = {t.run for t in traces}
    assert {run for run, _ in ABSENCE_FLIPS} <= runs


@pytest.mark.parametrize("t", few_by_default(_traces(), DEFAULT_TRACES, ids=[_id(t) for t in _traces()]))
def test_telemetry_changes_a_verdict_only_through_the_scale_of_the_step(t):
    assert _flips_of(t) == {(run, field) for run, field in ABSENCE_FLIPS if run == t.run}


@pytest.mark.parametrize("prefix, device", [("", "cpu"), ("cuda_", "NVIDIA H100 80GB HBM3")])
def test_a_main_process_loader_reads_data_bound_through_the_half_adopted_drop_in(prefix, device):
    """The schedule and the handler swapped in, the loader not wrapped: the trace's wait for the DataLoader
    stands, as in torch's own handler's trace of the same loop and as its removal truth says (the loop on the
    2-core CPU, and the same loop with its model on an H100, where reusing one batch made the step 9.2x faster)."""
    folder = DATA / "loader_main_process"
    truth = json.loads((folder / f"{prefix}truth.json").read_text())
    assert truth["load_share"] > 0.5 and truth["expected"] == "data_bound"
    assert truth.get("device", "cpu") == device
    by_kind = {}
    for t in (t for t in discover(folder).traces if t.run in (f"{prefix}dropin", f"{prefix}plain")):
        twin = _twin(t)
        by_kind[t.run.removeprefix(prefix)] = (twin, analyze_selected(_parsed(t.path, t.worker, t.span), twin))
    (dropin_twin, dropin), (plain_twin, plain) = by_kind["dropin"], by_kind["plain"]
    assert dropin_twin is not None and "data_ms" not in dropin_twin and plain_twin is None
    assert dropin.verdict == plain.verdict == "data_bound"
    assert dropin.basis == "telemetry" and not dropin.loader_paced  # num_workers=0: the wait adds, it paces nothing
    assert dropin.gpu == (device != "cpu")


@pytest.mark.parametrize("share,expected", [(0.04, "cpu_bound"), (0.60, "data_bound")])
def test_a_serial_wait_on_a_cpu_is_weighed_by_its_share(share, expected):
    """A CPU loop's wait for its batch runs one after the step's compute: measured at 4% of the step it is
    not the verdict, at 60% it is (a real CPU trace, its wait set through the measured data_ms)."""
    t = next(t for t in discover(DATA / "loader_main_process").traces if t.run == "light_dropin")
    parsed = _parsed(t.path, t.worker, t.span)
    step = 20.0
    report = analyze_selected(parsed, {"step_ms": step, "data_ms": share * step})
    assert report.verdict == expected and not report.loader_paced


def test_a_small_serial_wait_is_not_the_verdict_through_either_path():
    """The same loop whose loader only draws a small sample (light_*): its wait, a fraction of the step's
    compute, adds to the step and reads cpu_bound through the drop-in and through torch's handler."""
    folder = DATA / "loader_main_process"
    assert json.loads((folder / "light_truth.json").read_text())["expected"] == "cpu_bound"
    reports = {t.run: analyze_selected(_parsed(t.path, t.worker, t.span), _twin(t))
               for t in discover(folder).traces if t.run.startswith("light_")}
    assert set(reports) == {"light_dropin", "light_plain"}
    for r in reports.values():
        assert r.verdict == "cpu_bound" and not r.loader_paced
        assert 0 < r.breakdown.pct("data") < r.breakdown.pct("cpu_ops")


def _report(folder: Path, telemetry=None, drop=()):
    t = discover(folder).traces[0]
    twin = _twin(t) if telemetry is None else telemetry
    return analyze_selected(_parsed(t.path, t.worker, t.span),
                            {k: v for k, v in twin.items() if k not in drop} if twin else None)


def test_the_half_adopted_drop_in_gets_its_one_line_fix():
    """The schedule ran without stepscope.loader while the trace shows the step waiting for its DataLoader:
    the report says so with the fix; read with the trace alone, or with the wait measured, it does not."""
    def hint(r):
        return [e for e in r.evidence if "stepscope.loader(loader)" in e]
    assert len(hint(_report(DATA / "loader_main_process" / "dropin"))) == 1
    assert hint(_report(DATA / "loader_main_process" / "plain")) == []
    assert hint(_report(DATA / "loader_main_process" / "dropin", {"step_ms": 70.0, "data_ms": 40.0})) == []


def test_untimed_pageable_copies_get_their_one_line_fix():
    folder = DATA / "loops_h200" / "vit_pageable"  # pageable copies, timed by stepscope.input_copy
    assert not [e for e in _report(folder).evidence if "stepscope.input_copy()" in e]
    assert len([e for e in _report(folder, drop=("copy_ms",)).evidence if "stepscope.input_copy()" in e]) == 1


def test_a_measured_wait_the_trace_does_not_show_is_said():
    """Two workers that fell behind unprofiled, recorded while they had batches ready: the measured wait
    (21.7 ms a step) and the trace's (0.8 ms) disagree, and the evidence says which one the figures use."""
    folder = DATA / "suite" / "loader_two_workers"
    r = _report(folder, json.loads((folder / "telemetry.json").read_text()))
    assert r.verdict == "data_bound"
    assert any(e.startswith("the run's unprofiled steps waited 21.68 ms for each batch, the profiled steps 0.")
               for e in r.evidence)


def test_unprofiled_steps_slower_than_the_profiled_ones_are_not_used():
    """A measured step 1.5 times the profiled one contradicts it (the profiler only slows steps): the report
    says the load changed and takes its figures from the trace and the overhead model, as with no telemetry."""
    folder = DATA / "eager_bs128"
    alone = _report(folder, {})
    slow = _report(folder, {"step_ms": 1.5 * alone.profiled.step_ms})
    assert slow.basis == "overhead_model" and slow.metrics.step_ms == alone.metrics.step_ms
    assert "the machine's load changed between them" in slow.evidence[1]
    assert _report(folder, {"step_ms": 1.2 * alone.profiled.step_ms}).basis == "telemetry"
    # a CPU trace's shares do not depend on the step's length: the line, and the measured step kept
    cpu = DATA / "loader_main_process" / "dropin"
    profiled = _report(cpu, {}).profiled.step_ms
    r = _report(cpu, {"step_ms": 1.5 * profiled})
    assert r.basis == "telemetry" and any("the machine's load changed between them" in e for e in r.evidence)


def test_the_trainers_unprofiled_step_is_not_dragged_by_a_few_stalls():
    """The trainer's telemetry (trainer/demo/timing.py): 96 steps of 10 ms, 8 of them stalled to 500 ms by the
    machine's load, and a loader that makes every other step wait 4 ms: the step is ~12 ms (the mean of
    every step would be 52 ms), the wait its 2 ms mean, and the spread is reported."""
    from stepscope.demo.timing import StepTime, Throughput

    thr = Throughput(batch_size=1)
    times = []
    for i in range(96):
        wait = 4.0 if i % 2 else 0.0
        ms = (500.0 if i in range(40, 48) else 10.0) + wait
        times.append(StepTime(ms=ms, excluded=False, phases={"data_ms": wait}))
    thr.add(times)
    t = thr.telemetry()
    assert t["step_ms"] == pytest.approx(12.0) and t["data_ms"] == pytest.approx(2.0)
    assert t["step_ms_mean"] == pytest.approx(12.0 + 490 * 8 / 96)
    assert (t["step_ms_p25"], t["step_ms_median"], t["step_ms_p75"]) == (10.0, 14.0, 14.0)

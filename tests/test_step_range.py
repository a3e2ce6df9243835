"""A trace from elsewhere (no telemetry): the unprofiled step as a range from the overhead model's measured
error, and an ``alternative`` verdict where the range crosses a verdict boundary.

    pytest tests/test_step_range.py -q        # about 30 s on 2 idle cores (the suite's calibration runs)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepscope.profiler.analysis import step_range as sr
from stepscope.profiler.analysis.render import render_console, render_markdown
from stepscope.profiler.analysis.step_range import BANDS, loop_style
from stepscope.profiler.analysis.stream_parse import parse_trace_file
from stepscope.profiler.front import analyze
from stepscope.profiler.trace.discover import discover

DATA = Path(__file__).parent / "data"
# worker-fed loaders that fall behind outside the profiled window: the trace cannot show them at all (the
# analysis names that case apart, span.WORKERS_UNSEEN), so they are no measure of the overhead model
UNSEEN_LOADERS = {"loader_two_workers", "convnext_loader"}
# predicted vs measured unprofiled step on an H100, 80 rows (step_range.py's docstring)
CALIBRATION = DATA / "calibration" / "h100_2026-11-25.json"


def _calibration_runs() -> list[Path]:
    runs = sorted([*(DATA / "suite").iterdir(), *(DATA / "holdout").iterdir()])
    return [r for r in runs if (r / "truth.json").is_file() and r.name not in UNSEEN_LOADERS]


def test_eager_bs128_reads_gpu_bound_but_cannot_rule_out_launch_bound():
    (s,) = analyze(DATA / "eager_bs128").spans
    d = s.to_dict()
    assert d["verdict"] == "gpu_bound" and d["alternative"] == "launch_bound"
    lo, hi = d["step_range"]["step_ms"]
    assert lo < d["metrics"]["step_ms"] < hi  # the point estimate is the model's, inside its range
    assert d["step_range"]["verdicts"] == ["gpu_bound", "launch_bound"]
    assert d["step_range"]["loop_style"] == "eager"


def test_the_report_says_the_trace_cannot_decide_and_what_settles_it():
    report = analyze(DATA / "eager_bs128")
    console = render_console(report)
    assert "cannot decide between gpu_bound and launch_bound" in console
    assert "stepscope.schedule(" in console
    md = render_markdown(report)
    assert "**Undecided:** Without the profiler the step is" in md and "stepscope.schedule(" in md


def test_a_clear_verdict_has_no_alternative():
    (s,) = analyze(DATA / "tiny_ops").spans
    d = s.to_dict()
    assert d["alternative"] is None and d["step_range"]["verdicts"] == ["launch_bound", "launch_bound"]
    assert "launch_bound at both ends" in render_console(analyze(DATA / "tiny_ops"))


def test_a_run_with_telemetry_needs_no_range():
    run = DATA / "suite" / "hf_gpt2_small"
    telemetry = json.loads((run / "telemetry.json").read_text())
    (s,) = analyze(run, telemetry=telemetry).spans
    assert s.basis == "telemetry" and s.step_range is None and "alternative" not in s.to_dict()


def test_loop_styles_are_read_from_the_trace():
    def style(run: Path) -> str:
        tf = discover(run).traces[0]
        return loop_style(parse_trace_file(tf.path, tf.worker, tf.span))

    assert style(DATA / "suite" / "lightning_resnet18") == "lightning"
    assert style(DATA / "suite" / "compile_default") == "compiled"
    assert style(DATA / "suite" / "hf_gpt2_small") == "eager"


@pytest.mark.parametrize("run", _calibration_runs(), ids=lambda p: p.name)
def test_every_measured_step_of_the_calibration_set_lies_in_its_range(run):
    truth = json.loads((run / "truth.json").read_text())
    (s,) = analyze(run).spans
    lo, hi = s.step_range.low_ms, s.step_range.high_ms
    assert lo <= truth["step_ms"] <= hi, (lo, truth["step_ms"], hi)


def _calibration_rows() -> list[dict]:
    return json.loads(CALIBRATION.read_text())


def _row_breakdowns(row: dict) -> tuple:
    """A row's profiled and estimated steps as breakdowns: the GPU's own time (gpu_busy_pct of the estimate)
    and host-caused idle for the rest. The range depends on nothing else: the estimated step, the GPU path
    that floors it and the profiled step that caps it."""
    gpu = row["gpu_busy_pct"] / 100 * row["predicted_ms"]
    return (_bd({"gpu_busy": gpu, "launch": row["profiled_ms"] - gpu}, steps=5),
            _bd({"gpu_busy": gpu, "launch": row["predicted_ms"] - gpu}, steps=5))


def test_the_calibration_rows_are_the_published_measurement():
    rows = _calibration_rows()
    assert len(rows) == 80
    assert {(r["style"], r["recording"]) for r in rows} == {
        (s, o) for s in ("eager", "compiled", "lightning", "hf") for o in ("none", "shapes", "memory", "stacks", "all")}
    assert all(r["ratio"] == pytest.approx(r["measured_ms"] / r["predicted_ms"], rel=1e-3) for r in rows)


def test_the_profiler_never_made_a_calibration_step_faster():
    # the cap's premise: the step unprofiled is at most the profiled one (the margin covers a pageable copy
    # of the suite that measured 1.04x its profiled step)
    assert all(r["measured_ms"] <= r["profiled_ms"] for r in _calibration_rows())
    assert sr.PROFILED_MARGIN >= 1.0


@pytest.mark.parametrize("row", _calibration_rows(), ids=lambda r: f"{r['family']}-{r['style']}-{r['recording']}")
def test_every_measured_step_of_the_h100_calibration_lies_in_its_range(row):
    stack = row["recording"] in ("stacks", "all")
    band = sr.error_band_for(row["loop_style_read"], stack)
    profiled, estimate = _row_breakdowns(row)
    rng = sr.step_range(profiled, estimate, band, gpu=True, loader_paced=False)
    assert rng.low_ms <= row["measured_ms"] <= rng.high_ms, (rng.low_ms, row["measured_ms"], rng.high_ms)
    assert rng.high_ms <= row["profiled_ms"] * sr.PROFILED_MARGIN + 1e-9


def test_the_bands_are_the_measured_extremes_widened_a_little():
    # per (style read from the trace, with_stack): every measured/estimated ratio inside its band, and the
    # band no more than 10% beyond the extremes (so it follows the data rather than a guess)
    groups: dict = {}
    for r in _calibration_rows():
        groups.setdefault((r["loop_style_read"], r["recording"] in ("stacks", "all")), []).append(r["ratio"])
    for run in _calibration_runs():  # the suite's runs, all recorded with with_stack
        truth = json.loads((run / "truth.json").read_text())
        (s,) = analyze(run).spans
        groups.setdefault((s.step_range.band.style, True), []).append(truth["step_ms"] / s.metrics.step_ms)
    assert set(groups) == set(BANDS)
    for key, ratios in groups.items():
        lo, hi = BANDS[key]
        assert 0.9 * min(ratios) <= lo <= min(ratios) and max(ratios) <= hi <= 1.1 * max(ratios), (key, ratios)


def _bd(ms: dict, steps: int = 2):
    from stepscope.profiler.analysis.breakdown import GPU_BUCKETS, Breakdown

    buckets = {b: ms.get(b, 0.0) * 1e3 * steps for b in GPU_BUCKETS}
    return Breakdown(buckets, sum(buckets.values()), steps)


def test_the_ends_are_rebuilt_around_the_estimate_and_judged_by_the_verdict_function():
    from stepscope.profiler.analysis.findings import verdict

    # 6 ms of kernels in a 10 ms step, 4 ms of launch gaps: gpu_bound at 60%; x1.35 = 13.5 ms: 44%, launch_bound
    est = _bd({"gpu_busy": 6.0, "launch": 4.0})
    profiled = _bd({"gpu_busy": 6.0, "launch": 14.0})
    rng = sr.step_range(profiled, est, sr.Band("eager", False, 0.5, 1.35), gpu=True, loader_paced=False)
    assert rng.low_ms == pytest.approx(6.0)  # never below the GPU's own time
    assert rng.high_ms == pytest.approx(13.5)
    assert (rng.low_verdict, rng.high_verdict, rng.alternative) == ("gpu_bound", "launch_bound", "launch_bound")
    assert verdict(est, True) == "gpu_bound"
    # well inside gpu_bound at both ends: no alternative
    est = _bd({"gpu_busy": 9.0, "launch": 1.0})
    profiled = _bd({"gpu_busy": 9.0, "launch": 11.0})
    rng = sr.step_range(profiled, est, sr.Band("eager", False, 0.5, 1.35), gpu=True, loader_paced=False)
    assert rng.alternative is None and rng.line("gpu_bound").endswith("gpu_bound at both ends")


def test_the_high_end_is_capped_at_the_profiled_step():
    # x15 of a 1 ms estimate would be 15 ms, but the profiled step was 4 ms: the profiler does not make a step
    # faster, so the step unprofiled is at most 4 ms (x PROFILED_MARGIN)
    est = _bd({"gpu_busy": 0.2, "launch": 0.8, "data": 0.0})
    profiled = _bd({"gpu_busy": 0.2, "launch": 3.8})
    rng = sr.step_range(profiled, est, sr.Band("eager", True, 0.5, 15.0), gpu=True, loader_paced=False)
    assert rng.high_ms == pytest.approx(4.0 * sr.PROFILED_MARGIN)
    assert rng.low_ms == pytest.approx(0.5)
    # a low end above the profiled step is capped too, and the GPU's time still floors both
    rng = sr.step_range(profiled, est, sr.Band("lightning", True, 5.0, 20.0), gpu=True, loader_paced=False)
    assert rng.low_ms == pytest.approx(4.0 * sr.PROFILED_MARGIN) == pytest.approx(rng.high_ms)

"""A trace from elsewhere (no telemetry): the unprofiled step as a range from the overhead model's measured
error, and an ``alternative`` verdict where the range crosses a verdict boundary.

    pytest tests/test_step_range.py -q        # about 30 s on 2 idle cores (the suite's calibration runs)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepscope.profiler.analysis import analyze_run
from stepscope.profiler.analysis.render import render_console, render_markdown
from stepscope.profiler.analysis.step_range import BANDS, loop_style
from stepscope.profiler.analysis.stream_parse import parse_trace_file
from stepscope.profiler.trace.files import find_traces

DATA = Path(__file__).parent / "data"
# worker-fed loaders that fall behind outside the profiled window: the trace cannot show them at all (the
# analysis names that case apart, span.WORKERS_UNSEEN), so they are no measure of the overhead model
UNSEEN_LOADERS = {"loader_two_workers", "convnext_loader"}


def _calibration_runs() -> list[Path]:
    runs = sorted([*(DATA / "suite").iterdir(), *(DATA / "holdout").iterdir()])
    return [r for r in runs if (r / "truth.json").is_file() and r.name not in UNSEEN_LOADERS]


def test_eager_bs128_reads_gpu_bound_but_cannot_rule_out_launch_bound():
    (s,) = analyze_run(DATA / "eager_bs128").spans
    d = s.to_dict()
    assert d["verdict"] == "gpu_bound" and d["alternative"] == "launch_bound"
    lo, hi = d["step_range"]["step_ms"]
    assert lo < d["metrics"]["step_ms"] < hi  # the point estimate is the model's, inside its range
    assert d["step_range"]["verdicts"] == ["gpu_bound", "launch_bound"]
    assert d["step_range"]["loop_style"] == "eager"


def test_the_report_says_the_trace_cannot_decide_and_what_settles_it():
    report = analyze_run(DATA / "eager_bs128")
    console = render_console(report)
    assert "cannot decide between gpu_bound and launch_bound" in console
    assert "stepscope.schedule(" in console
    md = render_markdown(report)
    assert "**Undecided:** Without the profiler the step is" in md and "stepscope.schedule(" in md


def test_a_clear_verdict_has_no_alternative():
    (s,) = analyze_run(DATA / "tiny_ops").spans
    d = s.to_dict()
    assert d["alternative"] is None and d["step_range"]["verdicts"] == ["launch_bound", "launch_bound"]
    assert "launch_bound at both ends" in render_console(analyze_run(DATA / "tiny_ops"))


def test_a_run_with_telemetry_needs_no_range():
    run = DATA / "suite" / "hf_gpt2_small"
    telemetry = json.loads((run / "telemetry.json").read_text())
    (s,) = analyze_run(run, telemetry=telemetry).spans
    assert s.basis == "telemetry" and s.step_range is None and "alternative" not in s.to_dict()


def test_loop_styles_are_read_from_the_trace():
    def style(run: Path) -> str:
        tf = find_traces(run)[0]
        return loop_style(parse_trace_file(tf.path, tf.worker, tf.span))

    assert style(DATA / "suite" / "lightning_resnet18") == "lightning"
    assert style(DATA / "suite" / "compile_default") == "compiled"
    assert style(DATA / "suite" / "hf_gpt2_small") == "eager"


@pytest.mark.parametrize("run", _calibration_runs(), ids=lambda p: p.name)
def test_every_measured_step_of_the_calibration_set_lies_in_its_range(run):
    truth = json.loads((run / "truth.json").read_text())
    (s,) = analyze_run(run).spans
    lo, hi = s.step_range.low_ms, s.step_range.high_ms
    assert lo <= truth["step_ms"] <= hi, (lo, truth["step_ms"], hi)


def test_bands_hold_the_measured_extremes():
    # measured / estimated unprofiled step on the H100 (step_range.py's docstring): each lies in its band
    measured = {("eager", False): [0.51, 0.59, 0.60, 0.66, 1.28], ("lightning", False): [3.54],
                ("lightning", True): [1.63], ("eager", True): [0.68, 1.33], ("compiled", True): [0.83, 1.26]}
    for key, ratios in measured.items():
        lo, hi = BANDS[key]
        assert all(lo <= r <= hi for r in ratios), key


def _bd(ms: dict, steps: int = 2):
    from stepscope.profiler.analysis.breakdown import GPU_BUCKETS, Breakdown

    buckets = {b: ms.get(b, 0.0) * 1e3 * steps for b in GPU_BUCKETS}
    return Breakdown(buckets, sum(buckets.values()), steps)


def test_the_ends_are_rebuilt_around_the_estimate_and_judged_by_the_verdict_function():
    from stepscope.profiler.analysis import step_range as sr
    from stepscope.profiler.analysis.findings import verdict

    # 6 ms of kernels in a 10 ms step, 4 ms of launch gaps: gpu_bound at 60%; x1.35 = 13.5 ms: 44%, launch_bound
    est = _bd({"gpu_busy": 6.0, "launch": 4.0})
    rng = sr.step_range(est, est, sr.Band("eager", False, 0.5, 1.35), gpu=True, loader_paced=False)
    assert rng.low_ms == pytest.approx(6.0)  # never below the GPU's own time
    assert rng.high_ms == pytest.approx(13.5)
    assert (rng.low_verdict, rng.high_verdict, rng.alternative) == ("gpu_bound", "launch_bound", "launch_bound")
    assert verdict(est, True) == "gpu_bound"
    # well inside gpu_bound at both ends: no alternative
    est = _bd({"gpu_busy": 9.0, "launch": 1.0})
    rng = sr.step_range(est, est, sr.Band("eager", False, 0.5, 1.35), gpu=True, loader_paced=False)
    assert rng.alternative is None and rng.line("gpu_bound").endswith("gpu_bound at both ends")

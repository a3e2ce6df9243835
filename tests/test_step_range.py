"""A trace from elsewhere (no telemetry): the unprofiled step as a range from the overhead model's measured
error, and an ``alternative`` verdict where the range crosses a verdict boundary.

    pytest tests/test_step_range.py -q        # about 30 s on 2 idle cores (the suite's calibration runs and
                                              # a Hugging Face Trainer recorded on the CPU)
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from few_by_default import few_by_default
from stepscope.analysis import step_range as sr
from stepscope.analysis.overhead import recording
from stepscope.analysis.render import render_console, render_markdown
from stepscope.analysis.step_range import BANDS, loop_style
from stepscope.analysis.stream_collect import decode
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.analysis.stream_ranges import collect_ranges, first_base
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.jsonstream import split_near
from stepscope.trace.sources import HF_TRAINER, by_kind

DATA = Path(__file__).parent / "data"
# worker-fed loaders that fall behind outside the profiled window: the trace cannot show them at all (the
# analysis names that case apart, span.WORKERS_UNSEEN), so they are no measure of the overhead model
UNSEEN_LOADERS = {"loader_two_workers", "convnext_loader"}
# predicted vs measured unprofiled step on an H100, 80 rows (step_range.py's docstring)
CALIBRATION = DATA / "calibration" / "h100_2026-11-25.json"


@functools.cache
def _analyzed(run: Path):
    """A committed run's report as a stranger's trace (no telemetry), made once per module: several tests read
    the same report, and none changes it."""
    return analyze(run)


def _calibration_runs() -> list[Path]:
    runs = sorted([*(DATA / "suite").iterdir(), *(DATA / "holdout").iterdir()])
    return [r for r in runs if (r / "truth.json").is_file() and r.name not in UNSEEN_LOADERS]


def test_eager_bs128_reads_gpu_bound_but_cannot_rule_out_launch_bound():
    (s,) = _analyzed(DATA / "eager_bs128").spans
    d = s.to_dict()
    assert d["verdict"] == "gpu_bound" and d["alternative"] == "launch_bound"
    lo, hi = d["step_range"]["step_ms"]
    assert lo < d["metrics"]["step_ms"] < hi  # the point estimate is the model's, inside its range
    assert d["step_range"]["verdicts"] == ["gpu_bound", "launch_bound"]
    assert d["step_range"]["loop_style"] == "eager"


def test_the_report_says_the_trace_cannot_decide_and_what_settles_it():
    report = _analyzed(DATA / "eager_bs128")
    console = render_console(report)
    assert "cannot decide between gpu_bound and launch_bound" in console
    assert "stepscope.schedule(" in console
    md = render_markdown(report)
    assert "**Undecided:** Without the profiler the step is" in md and "stepscope.schedule(" in md


def test_a_clear_verdict_has_no_alternative():
    (s,) = _analyzed(DATA / "tiny_ops").spans
    d = s.to_dict()
    assert d["alternative"] is None and d["step_range"]["verdicts"] == ["launch_bound", "launch_bound"]
    assert "launch_bound at both ends" in render_console(_analyzed(DATA / "tiny_ops"))


def test_a_run_with_telemetry_needs_no_range():
    run = DATA / "suite" / "hf_gpt2_small"
    telemetry = json.loads((run / "telemetry.json").read_text())
    (s,) = analyze(run, telemetry=telemetry).spans
    assert s.basis == "telemetry" and s.step_range is None and "alternative" not in s.to_dict()


@functools.cache
def _style(run: Path) -> str:
    tf = discover(run).traces[0]
    return loop_style(parse_trace_file(tf.path, tf.worker, tf.span))


def test_loop_styles_are_read_from_the_trace():
    assert _style(DATA / "suite" / "lightning_resnet18") == "lightning"
    assert _style(DATA / "suite" / "compile_default") == "compiled"
    assert _style(DATA / "suite" / "hf_gpt2_small") == "eager"  # a Hugging Face model in a loop of its own


_COMMITTED = sorted([*(DATA / "suite").iterdir(), *(DATA / "holdout").iterdir()])


@pytest.mark.parametrize("run", few_by_default(_COMMITTED, keep=("lightning_resnet18", "compile_default",
                                                                 "hf_gpt2_small", "resnet18_bs32"),
                                               ids=[p.name for p in _COMMITTED]))
def test_no_committed_run_reads_as_hugging_face(run):
    # none was recorded under Hugging Face's Trainer: each keeps the style it read before there was an hf one
    expected = {"lightning_resnet18": "lightning", "compile_default": "compiled",
                "compile_reduce_overhead": "compiled"}.get(run.name, "eager")
    assert _style(run) == expected


def test_lightning_frames_are_not_hugging_faces():
    # Lightning's long frames (of its own trainer/ folder among them) are no transformers/trainer.py's
    tf = discover(DATA / "suite" / "lightning_resnet18").traces[0]
    parsed = parse_trace_file(tf.path, tf.worker, tf.span)
    assert any(n.startswith("lightning/pytorch/trainer/") for n in parsed.long_frames)
    assert loop_style(parsed) == "lightning" and loop_style(replace(parsed, annotations=())) == "eager"


def test_hugging_face_frames_are_told_by_their_file():
    assert by_kind(HF_TRAINER).frame_marked("transformers/trainer.py(1660): _inner_training_loop")
    assert by_kind(HF_TRAINER).frame_marked("/home/me/src/transformers/src/transformers/trainer.py(2051): training_step")
    assert by_kind(HF_TRAINER).frame_marked("C:\\venv\\Lib\\site-packages\\transformers\\trainer.py(2051): training_step")
    assert not by_kind(HF_TRAINER).frame_marked("transformers/models/gpt2/modeling_gpt2.py(144): forward")
    assert not by_kind(HF_TRAINER).frame_marked("mytransformers/trainer.py(10): train")
    assert not by_kind(HF_TRAINER).frame_marked("lightning/pytorch/trainer/trainer.py(1079): _run")


@pytest.fixture(scope="module")
def hf_traces(tmp_path_factory) -> dict:
    """Hugging Face's Trainer on the CPU, profiled as the calibration's hf rows were (bench/calibration.py's
    run_hf: a TrainerCallback steps torch.profiler), with and without with_stack: the parsed traces."""
    pytest.importorskip("transformers")  # the integrations extra, which CI installs
    import torch
    from bench import calibration

    out = {}
    for stack in (True, False):
        folder = tmp_path_factory.mktemp(f"hf_stack_{stack}")
        torch.manual_seed(0)
        make, shape = calibration.families()["tiny"]
        calibration.run_hf(calibration.Loss(make()), shape, torch.device("cpu"), 0,
                           calibration.Clock(torch.device("cpu")), {"dir": folder, "options": {"with_stack": stack}})
        (tf,) = discover(folder).traces
        out[stack] = parse_trace_file(tf.path, tf.worker, tf.span)
        out[stack, "folder"] = folder
    return out


def test_a_hugging_face_trainer_recorded_with_stack_reads_as_hf(hf_traces):
    parsed = hf_traces[True]
    assert loop_style(parsed) == "hf"
    frames = {n.split(": ")[-1] for n in parsed.long_frames if by_kind(HF_TRAINER).frame_marked(n)}
    assert {"_inner_training_loop", "training_step"} <= frames
    band = sr.error_band(parsed, recording(parsed))
    assert (band.style, band.with_stack, (band.low, band.high)) == ("hf", True, BANDS[("hf", True)])
    assert band.label == "Hugging Face Trainer loops recorded with with_stack"
    # the long frames are few: a with_stack trace's Python frames are mostly short calls
    assert 0 < len(parsed.long_frames) < len(parsed.python_calls) / 10
    # and the report of the trace, as a stranger's, gives its range from that band
    report = analyze(hf_traces[True, "folder"])
    assert report.spans[-1].to_dict()["step_range"]["band"] == list(BANDS[("hf", True)])
    assert "measured error on Hugging Face Trainer loops recorded with with_stack" in render_console(report)


def test_a_hugging_face_trainer_without_stack_reads_as_eager(hf_traces):
    # nothing of the Trainer's own is in such a trace: no frames, no range of its own
    parsed = hf_traces[False]
    assert parsed.python_calls == () and parsed.long_frames == ()
    assert loop_style(parsed) == "eager"
    assert sr.error_band(parsed, recording(parsed)).label == "eager loops recorded without with_stack"


def test_the_parse_in_byte_ranges_keeps_the_same_long_frames(tmp_path):
    # the streamed parse's helpers send their ranges' long frames back (stream_ranges.py)
    tf = discover(DATA / "suite" / "lightning_resnet18").traces[0]
    path = tmp_path / "plain.pt.trace.json"
    path.write_bytes(gzip.decompress(tf.path.read_bytes()))
    whole = parse_trace_file(path, "w", "1")
    near = split_near(path, 3, decode, 1.0)
    assert len(near.ranges) == 3
    c, _ = collect_ranges(path, near, first_base(path, 1 << 16), 1 << 16)
    assert tuple(sorted(c.long_frames)) == whole.long_frames != ()


@pytest.mark.parametrize("run", _calibration_runs(), ids=lambda p: p.name)
def test_every_measured_step_of_the_calibration_set_lies_in_its_range(run):
    truth = json.loads((run / "truth.json").read_text())
    (s,) = _analyzed(run).spans
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


def _stack(row: dict) -> bool:
    return row["recording"] in ("stacks", "all")


def _read_style(row: dict) -> str:
    """The loop style the analysis reads from the row's trace. The rows were read before Hugging Face's Trainer
    had a style of its own (as eager then): recorded with with_stack, it reads as hf now (its frames;
    test_a_hugging_face_trainer_recorded_with_stack_reads_as_hf records one), without, still as eager."""
    if row["style"] == "hf" and _stack(row):
        assert row["loop_style_read"] == "eager"
        return "hf"
    return row["loop_style_read"]


@pytest.mark.parametrize("row", _calibration_rows(), ids=lambda r: f"{r['family']}-{r['style']}-{r['recording']}")
def test_every_measured_step_of_the_h100_calibration_lies_in_its_range(row):
    band = sr.error_band_for(_read_style(row), _stack(row))
    profiled, estimate = _row_breakdowns(row)
    rng = sr.step_range(profiled, estimate, band, gpu=True, loader_paced=False)
    assert rng.low_ms <= row["measured_ms"] <= rng.high_ms, (rng.low_ms, row["measured_ms"], rng.high_ms)
    assert rng.high_ms <= row["profiled_ms"] * sr.PROFILED_MARGIN + 1e-9


def test_the_bands_are_the_measured_extremes_widened_5_percent():
    # per (style read from the trace, with_stack): the calibration rows' measured/estimated ratios and the
    # suite's (all recorded with with_stack), their extremes widened 5% outwards to the hundredth
    groups: dict = {}
    for r in _calibration_rows():
        groups.setdefault((_read_style(r), _stack(r)), []).append(r["ratio"])
    for run in _calibration_runs():
        truth = json.loads((run / "truth.json").read_text())
        (s,) = _analyzed(run).spans
        groups.setdefault((s.step_range.band.style, True), []).append(truth["step_ms"] / s.metrics.step_ms)
    derived = {key: (math.floor(min(ratios) * 95) / 100, math.ceil(max(ratios) * 105) / 100)
               for key, ratios in groups.items()}
    assert derived == BANDS
    # Hugging Face's Trainer apart, plain loops recorded with with_stack stay close to the estimate
    assert BANDS[("eager", True)][1] < 2.5 < 10 < BANDS[("hf", True)][1]
    assert ("hf", False) not in BANDS  # without with_stack it reads as eager


def _bd(ms: dict, steps: int = 2):
    from stepscope.analysis.breakdown import GPU_BUCKETS, Breakdown

    buckets = {b: ms.get(b, 0.0) * 1e3 * steps for b in GPU_BUCKETS}
    return Breakdown(buckets, sum(buckets.values()), steps)


def test_the_ends_are_rebuilt_around_the_estimate_and_judged_by_the_verdict_function():
    from stepscope.analysis.findings import verdict

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

"""Traces recorded without a schedule (``torch.profiler.profile()`` around a loop, then
``prof.export_chrome_trace``): no ProfilerStep#, so the steps come from the Optimizer.step# ranges, or the
whole window is one step. Real traces of tiny loops on the CPU, made here.

    pytest tests/test_schedule_less.py -q        # about 15 s on 2 idle cores
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from on_disk import analyze_trace
from reference.dict_parse import parse_trace
from stepscope.analysis.events import HostEvent
from stepscope.analysis.inferred_steps import infer_steps
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace
from torch import nn

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
STEPS = 5
# a tiny CPU loop's step is mostly inside torch ops, but on a busy machine the time between them can outweigh it
CPU_VERDICTS = ("cpu_bound", "host_bound")


def _kept(steps: int, findings: list[dict]) -> range:
    """The steps analysed: all, but steps that a busy machine stretched past 3x the others are left out as cold
    (the cold_start finding then names them)."""
    return range(1, steps + 1) if any(f["id"] == "cold_start" for f in findings) else range(steps, steps + 1)


def _loop(prof_kwargs: dict, optimizer: bool, steps: int = STEPS, handler=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if optimizer else None
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with torch.profiler.profile(on_trace_ready=handler, **prof_kwargs) as prof:
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(x), y)
            if opt is not None:
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:  # a hand-written update: no Optimizer.step# range
                model.zero_grad()
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.01 * p.grad
    return prof


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("schedule_less")
    out = {"optimizer": d / "optimizer" / "trace.json", "no_optimizer": d / "no_optimizer" / "trace.json",
           "gz": d / "gz" / "trace.json.gz"}
    for p in out.values():
        p.parent.mkdir()
    _loop({}, optimizer=True).export_chrome_trace(str(out["optimizer"]))
    _loop({}, optimizer=False).export_chrome_trace(str(out["no_optimizer"]))
    _loop({"record_shapes": True}, optimizer=True).export_chrome_trace(str(out["gz"]))
    return out


def test_the_trace_really_has_no_profiler_steps(traces):
    text = traces["optimizer"].read_text()
    assert "ProfilerStep#" not in text and text.count('"Optimizer.step#SGD.step"') == STEPS


def test_steps_come_from_the_optimizer_steps(traces):
    trace = json.loads(traces["optimizer"].read_text())
    parsed = parse_trace(trace, "w", "1")
    assert parsed.steps_from == "Optimizer.step"
    assert len(parsed.steps) == STEPS - 1  # the part before the first optimizer step is no whole step
    opt = sorted((e for e in trace["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"),
                 key=lambda e: e["ts"])
    ends = [e["ts"] + e["dur"] - parsed.base_us for e in opt]
    assert [t for s in parsed.steps for t in (s.start, s.end)] == pytest.approx(
        [t for pair in zip(ends, ends[1:]) for t in pair], abs=1e-3)
    # each step holds one forward (the addmm of the first Linear) and one optimizer step
    for s in parsed.steps:
        assert sum(1 for o in parsed.ops if o.name == "aten::addmm" and s.start <= o.start < s.end) == 2


def test_streamed_and_dict_parse_agree(traces):
    for key in ("optimizer", "no_optimizer"):
        path = traces[key]
        assert parse_trace_file(path, "w", "1") == parse_trace(json.loads(path.read_text()), "w", "1")


def test_analyze_reads_an_export_chrome_trace_file(traces):
    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(traces["optimizer"]), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["found 1 trace (1 export_chrome_trace)"]
    (span,) = json.loads(p.stdout)["spans"]
    assert span["verdict"] in CPU_VERDICTS and span["metrics"]["steps"] in _kept(STEPS - 1, span["findings"])
    assert span["steps_from"] == "Optimizer.step" and "Optimizer.step#" in span["steps_note"]
    console = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(traces["gz"])],
                             capture_output=True, text=True, timeout=120, cwd=REPO)
    assert console.returncode == 0, console.stderr
    assert "note: steps inferred from Optimizer.step# ranges" in console.stdout


def test_without_an_optimizer_the_window_is_one_step(traces):
    report = analyze(traces["no_optimizer"])
    (span,) = report.spans
    assert span.metrics.steps == 1 and span.steps_from == "window"
    assert span.verdict in CPU_VERDICTS
    assert "whole recorded window is read as one step" in span.to_dict()["steps_note"]
    assert report.spans[0].profiled.step_ms > 0


def test_a_directory_of_them_is_discovered_and_analysed(traces):
    root = traces["optimizer"].parent.parent
    assert sorted(t.path.name for t in discover(root).traces) == ["trace.json", "trace.json", "trace.json.gz"]
    runs = analyze(root).runs  # each folder is a run of its own
    assert [name for name, _ in runs] == ["gz", "no_optimizer", "optimizer"]
    assert [r.spans[0].steps_from for _, r in runs] == ["Optimizer.step", "window", "Optimizer.step"]


def test_tensorboard_trace_handler_without_schedule(tmp_path):
    _loop({}, optimizer=True, handler=torch.profiler.tensorboard_trace_handler(str(tmp_path)))
    (found,) = discover(tmp_path).traces
    assert found.kind == "tensorboard_trace_handler"
    (span,) = analyze(tmp_path).spans
    assert span.steps_from == "Optimizer.step"
    assert span.metrics.steps in _kept(STEPS - 1, [f.to_dict() for f in span.findings])


def test_lightning_action_without_steps_is_still_skipped(tmp_path, traces):
    # Lightning's PyTorchProfiler also writes traces of actions without steps (validation_step): not a step
    name = "fit-profile-[LightningModule]Model.validation_step.1.pt.trace.json"
    (tmp_path / name).write_bytes(traces["no_optimizer"].read_bytes())
    (tmp_path / "trace.json").write_bytes(traces["optimizer"].read_bytes())
    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [f"found 1 trace (1 export_chrome_trace); skipped 1 file: {name} "
                                     "(no ProfilerStep# or Optimizer.step# events)"]


def _ev(name, start, end, tid=1):
    return HostEvent(name, tid, start, end)


def test_nested_optimizer_ranges_count_once_and_steps_tile():
    ann = [_ev("Optimizer.step#Mine.step", 10, 20), _ev("Optimizer.step#SGD.step", 11, 19),
           _ev("Optimizer.step#Mine.step", 40, 50), _ev("Optimizer.step#SGD.step", 41, 49),
           _ev("Optimizer.step#Mine.step", 80, 95), _ev("Optimizer.zero_grad#Mine.zero_grad", 21, 22)]
    steps, source = infer_steps(ann, [[_ev("aten::mm", 0, 5)]])
    assert source == "Optimizer.step" and steps == [(1, 20, 50), (2, 50, 95)]


def test_with_two_optimizers_the_one_that_steps_last_ends_the_iteration():
    ann = [_ev("Optimizer.step#Adam.step", 10, 12), _ev("Optimizer.step#SGD.step", 20, 22),
           _ev("Optimizer.step#Adam.step", 30, 32), _ev("Optimizer.step#SGD.step", 40, 42),
           _ev("Optimizer.step#Adam.step", 50, 52), _ev("Optimizer.step#SGD.step", 60, 62)]
    assert infer_steps(ann, []) == ([(1, 22, 42), (2, 42, 62)], "Optimizer.step")


def test_one_optimizer_step_runs_from_the_window_start():
    steps, source = infer_steps([_ev("Optimizer.step#SGD.step", 30, 40)], [[_ev("aten::mm", 3, 5)]])
    assert (steps, source) == ([(0, 3, 40)], "Optimizer.step")
    assert infer_steps([], [[_ev("aten::mm", 3, 5), _ev("aten::add", 7, 9)]]) == ([(0, 3, 9)], "window")
    assert infer_steps([], [[]]) == ([], "")


def test_a_gzip_export_is_found_by_its_sniff(traces):
    assert gzip.open(traces["gz"]).read(64).lstrip().startswith(b"{")
    (found,) = discover(traces["gz"]).traces
    assert found.kind == "export_chrome_trace"


@pytest.mark.parametrize("run", ["suite/hf_gpt2_small", "suite/resnet18_bs128", "slow_dataset", "big_batch",
                                 "cpu_resnet"])
def test_a_committed_trace_without_its_profiler_steps_reads_the_same(run):
    # GPU traces of the suite with their ProfilerStep# events (host and GPU) taken out: the steps inferred from
    # the optimizer steps give the step time of the scheduled steps and the same verdict
    tf = discover(DATA / run).traces[0]
    trace = load_trace(tf.path)
    scheduled = analyze_trace(trace, "w", "1")
    stripped = {**trace, "traceEvents": [e for e in trace["traceEvents"]
                                         if not str(e.get("name", "")).startswith("ProfilerStep#")]}
    inferred = analyze_trace(stripped, "w", "1")
    assert inferred.steps_from == "Optimizer.step" and inferred.metrics.steps == scheduled.metrics.steps - 1
    assert inferred.profiled.step_ms == pytest.approx(scheduled.profiled.step_ms, rel=0.1)
    assert inferred.verdict == scheduled.verdict
    if scheduled.gpu:
        assert inferred.metrics.kernels_per_step == pytest.approx(scheduled.metrics.kernels_per_step, rel=0.02)

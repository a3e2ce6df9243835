"""The model's own Python counts as dispatching its ops (breakdown.py ``model_scope``): a GPU gap during which the
host runs an ``nn.Module`` call, the autograd engine's backward or an optimizer's range is ``launch``; the loop's
own code outside them is ``other_host``. On a real Hugging Face Trainer trace this decides the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepscope.analysis.breakdown import breakdown
from stepscope.analysis.steps import step_windows
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.analysis.verdicts import LAUNCH_BOUND
from stepscope.report.front import analyze

DATA = Path(__file__).parent / "data"


def _kernel(corr: int, launch: float, start: float, dur: float) -> list[dict]:
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch, "dur": 3, "tid": 1,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": f"k{corr}", "ts": start, "dur": dur, "pid": 0, "tid": 7,
             "args": {"device": 0, "stream": 7, "correlation": corr}}]


def _buckets(tmp_path: Path, frame: dict) -> dict:
    """One 100 µs step: kernels at 10-20, 50-60 and 90-95 µs, each launched 5 µs before it starts; ``frame``
    covers 15-48 µs, across the first gap (20-50), which the second kernel's launch (45-48) ends."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 1000, "dur": 100, "tid": 1},
              *_kernel(1, 1005, 1010, 10), *_kernel(2, 1045, 1050, 10), *_kernel(3, 1085, 1090, 5),
              {"ph": "X", "ts": 1015, "dur": 33, "tid": 1, **frame}]
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = parse_trace_file(path, "w", "1")
    bd = breakdown(trace, step_windows(trace))
    return {k: round(v, 3) for k, v in bd.buckets.items()}


@pytest.mark.parametrize("frame", [{"cat": "python_function", "name": "nn.Module: Block_0"},
                                   {"cat": "python_function", "name": "<built-in method run_backward of "
                                                                      "torch._C._EngineBase object at 0x7f>"},
                                   {"cat": "user_annotation", "name": "Optimizer.step#AdamW.step"}])
def test_a_gap_inside_the_models_own_work_is_launch(tmp_path, frame):
    outside = _buckets(tmp_path, {"cat": "python_function", "name": "train.py(12): log_metrics"})
    inside = _buckets(tmp_path, frame)
    # 20-45 µs: the host in the frame, no op, no runtime call; the step's other gaps are the same either way
    assert inside["launch"] - outside["launch"] == pytest.approx(25.0)
    assert outside["other_host"] - inside["other_host"] == pytest.approx(25.0)
    assert sum(inside.values()) == sum(outside.values()) == pytest.approx(100.0)


def test_a_hugging_face_trainer_loop_reads_launch_bound():
    """Recorded on an H100 by scripts/verdict_integrations.py (truth.json): removing the Trainer saves 1.5 ms
    of the 9.75 ms step, a CUDA graph of the step 6.7 ms more. Counting the model's Python between its ops as
    other host work read it host_bound (5.11 ms other host vs 4.60 ms launch)."""
    run = DATA / "hf_trainer"
    truth = json.loads((run / "truth.json").read_text())
    telemetry = json.loads((run / "telemetry.json").read_text())
    assert truth["expected"] == LAUNCH_BOUND.name
    assert truth["step_ms"] - truth["plain_step_ms"] < truth["plain_step_ms"] - truth["gpu_ms"]
    (s,) = analyze(run, telemetry=telemetry).spans
    assert s.verdict == truth["expected"]
    assert abs(s.metrics.gpu_busy_pct - truth["gpu_busy_pct"]) <= 5.0
    launch, other = s.breakdown.ms_per_step("launch"), s.breakdown.ms_per_step("other_host")
    assert launch > 2 * other > 1.0  # the Trainer's own bookkeeping stays visible as host work

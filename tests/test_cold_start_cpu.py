"""A slow step in a CPU-only trace is the host's own noise, not a cold start (a CUDA context, lazy module
loading, cuDNN autotuning are GPU things): a real CPU loop, profiled after many steps, whose first recorded step
another burst of host work stretched. And a cold-start finding is never costed above the step it describes.

    pytest tests/test_cold_start_cpu.py -q        # a few seconds
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from stepscope.report.front import analyze

DATA = Path(__file__).resolve().parent / "data"


def test_a_slow_first_recorded_step_on_the_cpu_is_no_cold_start(tmp_path):
    torch.manual_seed(0)
    x, w = torch.randn(128, 256), torch.randn(256, 256)
    sched = torch.profiler.schedule(skip_first=30, wait=0, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path))) as prof:
        for i in range(36):
            with torch.profiler.record_function("forward"):
                for _ in range(4):
                    (x @ w).relu_()
            if i == 31:  # the first recorded step: held up 1 s by the host (far beyond 3x the others, loaded too)
                time.sleep(1.0)
            prof.step()
    (span,) = analyze(tmp_path).to_dict()["spans"]
    assert span["device"] == "cpu" and span["metrics"]["steps"] == 4  # every step kept
    assert not [f for f in span["findings"] if f["id"] == "cold_start"], span["findings"]
    assert all(f["cost_ms_per_step"] <= span["metrics"]["step_ms"] * 1.001 for f in span["findings"])


def test_a_cold_start_is_never_costed_above_the_step():
    """tests/data/suite/cold_start (an H100 window over the process's first CUDA work): step #0 took 1111 ms
    against 26 ms for the others. Its cost was the whole 1085 ms difference, 66x the 16 ms step."""
    (span,) = analyze(DATA / "suite" / "cold_start").to_dict()["spans"]
    (cold,) = [f for f in span["findings"] if f["id"] == "cold_start"]
    assert "step #0 took 1111.0 ms" in cold["text"]
    assert 0 < cold["cost_ms_per_step"] <= span["metrics"]["step_ms"]

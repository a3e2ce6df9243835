"""A user's loop with stepscope.schedule on a machine without a GPU prints none of Kineto's own log lines
("USDT: ... profiler_start", "ERROR: ... gpuGetDeviceCount failed with code 35"), which a CUDA build of torch
writes to stderr there at each cycle. A real loop in a process of its own, its stderr read whole."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

LOOP = textwrap.dedent("""
    import sys, torch, stepscope
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=stepscope.schedule(wait=1, warmup=1, active=2, repeat=2),
                                on_trace_ready=stepscope.trace_handler(sys.argv[1])) as prof:
        for i in range(12):
            (x @ w).relu_()
            prof.step()
    print("done")
""")


@pytest.mark.skipif(torch.cuda.is_available(), reason="Kineto's lines are left as they are where there is a GPU")
def test_no_kineto_lines_in_a_cpu_loop(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KINETO_LOG_LEVEL", "TORCH_CPP_LOG_LEVEL")}
    r = subprocess.run([sys.executable, "-c", LOOP, str(tmp_path / "logs")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr[-2000:]
    assert "USDT" not in r.stderr and "gpuGetDeviceCount" not in r.stderr, r.stderr
    assert list((tmp_path / "logs").glob("*.pt.trace.json*"))  # the loop was profiled

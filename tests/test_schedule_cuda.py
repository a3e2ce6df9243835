"""Every profiling cycle of a stepscope.schedule records the GPU's kernels (on a CUDA machine).

The schedule asks Kineto to detach CUPTI after each cycle (capture/cupti.py), except where cycles are back to
back (wait=0): Kineto detaches at the first CUDA call after a cycle, which then falls inside the next cycle and
leaves it with no GPU events at all (with the teardown, wait=0 recorded [160, 0, 160] kernels here). Each case
runs in a process of its own, so that the variable and Kineto's state are those of a fresh training process.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOOP = """
import sys, torch, stepscope
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
wait, repeat, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
sched = stepscope.schedule(wait=wait, warmup=1, active=2, repeat=repeat)
x = torch.randn(256, 256, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
             on_trace_ready=tensorboard_trace_handler(out, worker_name="w", use_gzip=True)) as prof:
    for _ in range(3 * (wait + 3) + 4):
        for _ in range(20):
            x = torch.tanh(x @ x) * 0.5
        prof.step()
torch.cuda.synchronize()
"""


def kernels_per_trace(folder: Path) -> list[int]:
    counts = []
    for path in sorted(folder.glob("*.pt.trace.json.gz"), key=lambda p: p.stat().st_mtime_ns):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        counts.append(sum(1 for e in events if e.get("cat") == "kernel"))
    return counts


@pytest.mark.cuda
@pytest.mark.parametrize("wait", [0, 1, 3])
def test_every_cycle_records_the_gpu_kernels(tmp_path, wait):
    env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
    subprocess.run([sys.executable, "-c", LOOP, str(wait), "3", str(tmp_path)], check=True, env=env, timeout=120)
    counts = kernels_per_trace(tmp_path)
    assert len(counts) == 3
    assert all(c >= 2 * 20 * 2 for c in counts), counts  # 2 recorded steps of 20 matmuls and 20 tanh each


COPY_LOOP = """
import json, statistics, sys, torch, stepscope
from torch.profiler import ProfilerActivity, profile
out = sys.argv[1]
sched = stepscope.schedule(wait=40, warmup=1, active=2, repeat=1)
handler = stepscope.trace_handler(out, worker_name="w")
host = torch.randn(16 << 20)  # 64 MB of pageable memory
dev = torch.empty_like(host, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, on_trace_ready=handler) as prof:
    for _ in range(90):
        with stepscope.input_copy():
            dev.copy_(host)
        (dev * 2).sum()
        prof.step()
handler.close(timeout=120)
alone = []
for _ in range(10):
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); dev.copy_(host); b.record(); b.synchronize()
    alone.append(a.elapsed_time(b))
(summary,) = handler.summaries
report = summary.report
print(json.dumps({"telemetry": summary.telemetry.to_dict(), "alone_ms": statistics.median(alone),
                  "transfer_ms": report.breakdown.ms_per_step("transfer")}))
"""


@pytest.mark.cuda
def test_input_copy_times_the_copy_on_the_unprofiled_steps_and_the_diagnosis_uses_it(tmp_path):
    p = subprocess.run([sys.executable, "-c", COPY_LOOP, str(tmp_path)], capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    copy, step = got["telemetry"]["copy_ms"], got["telemetry"]["step_ms"]
    assert 0.5 * got["alone_ms"] < copy < 2 * got["alone_ms"], got  # the same 64 MB copy, timed apart
    # the measured copy is the step's transfer, within the measured step: the copy is nearly all of this step,
    # and where its mean passes the step's median, the GPU's work is scaled to that step (unprofiled.rebuild)
    if copy < 0.97 * step:
        assert got["transfer_ms"] == pytest.approx(copy, rel=0.01), got
    else:
        assert 0.95 * step < got["transfer_ms"] <= step, got

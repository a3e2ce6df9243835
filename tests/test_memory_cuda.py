"""The allocator's counters at stepscope.schedule's window edges, and a real out-of-memory capture (on a CUDA
machine; each case in a process of its own, a fresh allocator).

    python -m pytest -q -m cuda tests/test_memory_cuda.py
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cuda

CREEP = """
import json, sys, torch, stepscope
leak = int(sys.argv[1])
sched = stepscope.schedule(wait=60, warmup=1, active=2, repeat=1, window=10)
keep = []
x = torch.randn(512, 512, device="cuda")
with torch.profiler.profile(schedule=sched) as prof:
    for i in range(70):
        y = torch.tanh(x @ x)
        if leak:
            keep.append(torch.empty(leak, dtype=torch.uint8, device="cuda"))
        prof.step()
sched.finish()
print(json.dumps(sched.telemetry().to_dict()))
"""

OOM = """
import sys, torch, stepscope
torch.cuda.memory._record_memory_history(max_entries=10000)
with stepscope.profile(sys.argv[1], wait=5, warmup=1, active=2, skip_first=0, capture_on_slowdown=False) as prof:
    for i in range(40):
        x = torch.randn(1024, 1024, device="cuda")
        if i == 20:
            y = torch.empty(torch.cuda.get_device_properties(0).total_memory * 2, dtype=torch.uint8, device="cuda")
        prof.step()
"""


def _telemetry(leak: int) -> dict:
    r = subprocess.run([sys.executable, "-c", CREEP, str(leak)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_window_edges_measure_the_loops_own_leak():
    leak = 4 << 20  # 4 MiB kept every step: the truth
    t = _telemetry(leak)
    assert t["mem_creep_mib_per_step"] == pytest.approx(4.0, rel=0.05)
    assert t["mem_ooms"] == 0 and t["mem_peak_allocated_mib"] >= t["mem_allocated_mib"]
    clean = _telemetry(0)
    assert clean["mem_creep_mib_per_step"] < 0.1


def test_a_real_out_of_memory_error_is_captured_with_its_snapshot_and_reraised(tmp_path):
    r = subprocess.run([sys.executable, "-c", OOM, str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory" in r.stderr
    (capture,) = sorted((tmp_path / "oom").iterdir())
    info = json.loads((capture / "oom.json").read_text())
    assert (capture / "snapshot.pickle").is_file() and info["snapshot"] == "snapshot.pickle"
    assert info["observed"] is not None  # the allocator's observer wrote it at the failing allocation
    assert info["figures"]["requested"] > info["figures"]["capacity"]
    assert info["snapshot_live"]["stacks"]  # memory history was on: allocation sites are named
    assert info["error"]["type"] == "torch.OutOfMemoryError"


SHARED_PEAKS = """
import json, torch
from stepscope.capture.memory_stats import MemoryWindows
a, b = MemoryWindows(), MemoryWindows()  # the trainer's log windows beside its schedule's, in one process
torch.zeros(1, device="cuda")
a.edge(0, closing=False); b.edge(0, closing=False)
big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda"); del big   # 256 MiB, freed at once
a.edge(10, closing=True)   # resets the device's peaks ...
b.edge(20, closing=True)   # ... which must not hide the allocation from b's window
print(json.dumps([a.edges[-1][1]["peak_allocated"] >> 20, b.edges[-1][1]["peak_allocated"] >> 20]))
"""


def test_two_windows_in_one_process_each_see_the_peak_since_their_own_edge():
    r = subprocess.run([sys.executable, "-c", SHARED_PEAKS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = json.loads(r.stdout.strip().splitlines()[-1])
    assert a >= 256 and b >= 256

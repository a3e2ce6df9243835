"""bench_graph_gaps' kernel time: the union of kernel intervals, overlaps counted once; the GPU probes' bad flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench.graph_gaps import kernel_union_ms

ROOT = Path(__file__).resolve().parents[1]


def test_overlapping_and_nested_kernels_count_once():
    events = [{"ts": 30, "dur": 5}, {"ts": 0, "dur": 10}, {"ts": 5, "dur": 10}, {"ts": 6, "dur": 2}]
    assert kernel_union_ms(events) == 0.020  # 0-15 and 30-35 µs
    assert kernel_union_ms([]) == 0.0


@pytest.mark.parametrize("args", [["scripts/bench_graph_gaps.py", "--only", "nope"],
                                  ["scripts/bench_copy_timing.py", "--scenario", "nope"],
                                  ["scripts/bench_copy_timing.py", "--reps", "0"]])
def test_the_gpu_probes_refuse_bad_flags_in_one_line(args):
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "nope" in p.stderr or "--reps 0" in p.stderr

"""scripts/profiler_overhead.py on the CPU: real train.py runs with and without --profile, paired."""

import json
import subprocess
import sys

import pytest
from trainrun import REPO

OVERHEAD = [sys.executable, str(REPO / "scripts" / "profiler_overhead.py")]


def test_one_pair_compares_a_plain_and_a_profiled_run(tmp_path):
    r = subprocess.run([*OVERHEAD, "--device", "cpu", "--arch", "resnet8", "--batch-size", "32", "--steps", "40",
                        "--pairs", "1", "--logdir", str(tmp_path), "--name", "o"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads((tmp_path / "o" / "overhead.json").read_text())
    (pair,) = out["pairs"]
    plain, profiled = pair["plain"], pair["profiled"]
    assert pair["ratio"] == pytest.approx(profiled["mean_ms"] / plain["mean_ms"])
    # 40 steps, 4 of them warm-up; the profiled run also leaves out its 2 warm-up and 3 recorded steps
    assert plain["timed_steps"] == 36 and profiled["timed_steps"] == 31
    assert list((tmp_path / "o" / "profiled-0").glob("*.pt.trace.json.gz"))
    assert not list((tmp_path / "o" / "plain-0").glob("*.pt.trace.json*"))
    assert out["summary"]["pairs"] == 1 and "overhead over 1 pairs" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--pairs", "0"], "--pairs 0 must be at least 1"),
    (["--steps", "10"], "--steps 10 is too few"),
])
def test_bad_flags_get_one_line_and_exit_2(tmp_path, args, message):
    r = subprocess.run([*OVERHEAD, *args, "--logdir", str(tmp_path)], capture_output=True, text=True, timeout=60,
                       cwd=REPO)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())

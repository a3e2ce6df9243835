"""scripts/profiler_overhead.py on the CPU: real train.py runs with and without --profile, paired."""

import json
import subprocess
import sys

import pytest
import torch
from bench import overhead as profiler_overhead
from trainrun import REPO

OVERHEAD = [sys.executable, str(REPO / "scripts" / "profiler_overhead.py")]


@pytest.mark.slow
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


BAD = [
    (["--pairs", "0"], "--pairs 0 must be at least 1"),
    (["--steps", "10"], "--steps 10 is too few"),
    (["--batch-size", "0"], "profiler_overhead.py: error: --batch-size must be a positive number, got 0"),
    (["--arch", "resnet9000"], "profiler_overhead.py: error: unknown --arch 'resnet9000'"),
    (["--name", "../../x"], "profiler_overhead.py: error: --name '../../x' is not a plain directory name"),
]
if not torch.cuda.is_available():
    BAD.append((["--step-kind", "cuda-graphs"], "profiler_overhead.py: error: --cuda-graphs needs a CUDA GPU"))


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flags_get_one_line_and_exit_2(tmp_path, args, message):
    r = subprocess.run([*OVERHEAD, "--device", "cpu", *args, "--logdir", str(tmp_path / "logs")],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "logs").exists() and not list(tmp_path.rglob("overhead-*"))


def _pair(i, plain_ms, profiled_ms):
    return {"pair": i, "order": ["plain", "profiled"], "plain": {"mean_ms": plain_ms},
            "profiled": {"mean_ms": profiled_ms}, "ratio": profiled_ms / plain_ms}


def test_noisy_pairs_are_flagged():
    pairs = [_pair(0, 100, 102), _pair(1, 100, 170), _pair(2, 100, 99)]
    summary = profiler_overhead.summarize(pairs)
    text = profiler_overhead.render(pairs, summary)
    rows = text.splitlines()[2:5]
    assert ["noise?" in row for row in rows] == [False, True, False]
    assert summary["noisy"] and "warning: the pairs disagree by 71.0 points" in text


def test_agreeing_pairs_are_not_flagged():
    pairs = [_pair(0, 100, 110), _pair(1, 100, 112)]
    text = profiler_overhead.render(pairs, profiler_overhead.summarize(pairs))
    assert "noise?" not in text and "warning" not in text

"""scripts/compare.py on the CPU: one real train.py --profile run per variant, tabulated."""

import json
import subprocess
import sys

import pytest
import torch
from trainrun import REPO, call_without_torch

COMPARE = [sys.executable, str(REPO / "scripts" / "compare.py")]


@pytest.mark.slow
def test_compare_runs_each_variant_as_its_own_tensorboard_run(tmp_path):
    r = subprocess.run([*COMPARE, "--device", "cpu", "--variants", "eager", "compile-default", "--ops", "native",
                        "--arch", "resnet8", "--batch-size", "32", "--steps", "30", "--logdir", str(tmp_path),
                        "--name", "cmp"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [(row["variant"], row["ops"]) for row in rows] == [("eager", "native"), ("compile-default", "native")]
    eager, compiled = rows
    assert eager["speedup_vs_eager"] == 1.0
    # the compiled variant is timed against the eager run of the same invocation, from the two medians
    assert compiled["speedup_vs_eager"] == pytest.approx(eager["median_ms"] / compiled["median_ms"])
    assert compiled["median_ms"] != eager["median_ms"]
    for row in rows:
        assert row["verdict"] == "cpu_bound" and row["gpu_busy_pct"] is None
        assert row["images_per_s"] == pytest.approx(32 / (row["median_ms"] / 1e3))
        name = f"{row['variant']}-native"
        assert list((tmp_path / "cmp" / name).glob("events.out.tfevents.*"))
        assert f"[{name}] started: " in r.stdout and f"[{name}] finished in " in r.stdout
    assert "| eager | native |" in r.stdout and "| compile-default | native |" in r.stdout
    assert (tmp_path / "cmp" / "compare.md").read_text() in r.stdout


BAD = [
    (["--batch-size", "0"], "compare.py: error: --batch-size must be a positive number, got 0"),
    (["--arch", "resnet9000"], "compare.py: error: unknown --arch 'resnet9000'; valid: resnet8, resnet18"),
    (["--steps", "10"], "compare.py: error: --steps 10 is too few"),
    (["--name", "../../x"], "compare.py: error: --name '../../x' is not a plain directory name"),
    (["--name", "a/b"], "compare.py: error: --name 'a/b' is not a plain directory name"),
    (["--name", "x\ny"], "compare.py: error: --name 'x\\ny' contains control characters"),
]
if not torch.cuda.is_available():
    BAD.append((["--variants", "cuda-graphs"], "compare.py: error: --cuda-graphs needs a CUDA GPU"))


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    """Pass-through flags are checked by the trainer's own validation before any variant runs."""
    r = subprocess.run([*COMPARE, "--device", "cpu", "--variants", "eager", "--ops", "native", *args,
                        "--logdir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (tmp_path / "logs").exists() and not list(tmp_path.rglob("compare-*"))


def test_a_bad_flag_is_answered_before_torch_is_imported():
    rc, torch_imported, stderr = call_without_torch("stepscope.compare", "main", ["--batch-size", "0"])
    assert (rc, torch_imported) == (2, False), stderr
    assert "--batch-size must be a positive number, got 0" in stderr

"""scripts/compare.py on the CPU: one real train.py --profile run per variant, tabulated."""

import json
import subprocess
import sys

import pytest
import torch
from trainrun import REPO

COMPARE = [sys.executable, str(REPO / "scripts" / "compare.py")]


def test_compare_runs_each_variant_as_its_own_tensorboard_run(tmp_path):
    r = subprocess.run([*COMPARE, "--device", "cpu", "--variants", "eager", "--ops", "native", "--arch", "resnet8",
                        "--batch-size", "32", "--steps", "30", "--logdir", str(tmp_path), "--name", "cmp"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [(row["variant"], row["ops"]) for row in rows] == [("eager", "native")]
    row = rows[0]
    assert row["speedup_vs_eager"] == 1.0 and row["verdict"] == "cpu_bound" and row["gpu_busy_pct"] is None
    assert row["images_per_s"] == pytest.approx(32 / (row["median_ms"] / 1e3))
    assert list((tmp_path / "cmp" / "eager-native").glob("events.out.tfevents.*"))
    assert "| eager | native |" in r.stdout and (tmp_path / "cmp" / "compare.md").read_text() in r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_compare_refuses_cuda_graphs_on_cpu_before_running_anything(tmp_path):
    r = subprocess.run([*COMPARE, "--variants", "cuda-graphs", "--logdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.strip() == "compare.py: error: variant cuda-graphs needs a CUDA GPU; drop it or run on a GPU"
    assert not any(tmp_path.iterdir())

"""Run scripts/train.py as a real subprocess, the way a user does, for tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "scripts" / "train.py"
# small and fast on 2 CPU cores; tests add what they exercise
FAST = ["--device", "cpu", "--synthetic-train-size", "256", "--synthetic-eval-size", "64", "--batch-size", "32",
        "--log-every", "2"]
PROFILE_3_STEPS = ["--profile", "--skip-first", "0", "--wait", "0", "--warmup", "1", "--active", "2"]


def run_train(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, str(TRAIN), *args], capture_output=True, text=True, timeout=timeout,
                          env=e, cwd=REPO)


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())

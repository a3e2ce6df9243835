"""Start a training run as a child process and read what it wrote: the one launcher of compare, verify and
the profiler-overhead script.

    run = run_train(["--steps", "200", "--run-name", "a", "--logdir", "logs/x"], INSTALLED_TRAIN)
    run["final"]["median_step_ms"]

`train_cmd` is how training is started: the installed package's `stepscope train` (INSTALLED_TRAIN), or a
checkout's scripts/train.py (`checkout_train(repo)`), which runs the code the editable install points at. A failed run raises `TrainFailed` with the child's last stderr line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

INSTALLED_TRAIN = (sys.executable, "-m", "stepscope.cli.main", "train")


class TrainFailed(RuntimeError):
    """The child exited non-zero; the message is its last stderr line."""


def checkout_train(repo: Path) -> tuple[str, ...]:
    return (sys.executable, str(Path(repo) / "scripts" / "train.py"))


def read_run(args: list[str]) -> dict:
    """The run.json of the run that `args` (naming --logdir and --run-name) wrote."""
    logdir = Path(args[args.index("--logdir") + 1])
    return json.loads((logdir / args[args.index("--run-name") + 1] / "run.json").read_text())


def last_line(stderr: str, returncode: int) -> str:
    return (stderr.strip().splitlines() or [f"exit code {returncode}"])[-1]


def run_train(args: list[str], train_cmd: tuple[str, ...] = INSTALLED_TRAIN, cwd: Path | None = None,
              progress: Callable[[float], None] | None = None, every_s: float = 10.0) -> dict:
    """Run training with `args` (which name --logdir and --run-name) and return its run.json. While it runs,
    `progress(seconds so far)` is called every `every_s` seconds."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([*train_cmd, *args], stdout=out, stderr=err, text=True, cwd=cwd)
        elapsed = 0.0
        while True:
            try:
                p.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                elapsed += every_s
                if progress is not None:
                    progress(elapsed)
        err.seek(0)
        if p.returncode != 0:
            raise TrainFailed(last_line(err.read(), p.returncode))
    return read_run(args)

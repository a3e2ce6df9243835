"""Run scripts/train.py as a real subprocess, the way a user does, for tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

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


def shared_run(tmp_path_factory, name: str, args: list[str]) -> tuple[Path, subprocess.CompletedProcess]:
    """One `run_train(args)` per test session, whichever test file asks first, read by every test that asks for
    `name` after it: the run's folder (alone in its --logdir, the folder above it) and its finished process
    (exit code, stdout, stderr).

    Under pytest-xdist every worker of the session shares it (the workers' temporary folders have one parent, and
    a file lock makes the first one train while the others wait). Tests read the run and never write into it;
    a name stands for one list of arguments, and asking for it with another list fails. A run that times out is
    recorded as failed (exit code -9), as is one that fails: each test that reads it fails with its stderr."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    root = root / "shared-runs"
    root.mkdir(exist_ok=True)
    done = root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            try:
                r = run_train([*args, "--logdir", str(root / name), "--run-name", name])
            except subprocess.TimeoutExpired as e:  # recorded, so that the tests after it fail at once
                r = subprocess.CompletedProcess(args, -9, "", f"shared run {name!r} timed out after {e.timeout} s")
            done.write_text(json.dumps({"args": args, "returncode": r.returncode, "stdout": r.stdout,
                                        "stderr": r.stderr, "files": _listing(root / name)}))
    d = json.loads(done.read_text())
    assert d["args"] == args, f"shared run {name!r} was made with {d['args']}, not {args}"
    assert _listing(root / name) == d["files"], f"a test wrote into the shared run {name!r}"
    return root / name / name, subprocess.CompletedProcess(d["args"], d["returncode"], d["stdout"], d["stderr"])


def _listing(logdir: Path) -> dict[str, list[int]]:
    return {p.relative_to(logdir).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(logdir.rglob("*")) if p.is_file()}


# The shared runs of the default set (see shared_run): a profiled run of one recording cycle with its flame graph;
# one with 4 timed steps before its cycle and every export; an unprofiled one of 8 steps of LeNet (its readers
# need any unprofiled run: LeNet's steps cost a fraction of ResNet-8's).
PROFILED_RUN = ("profiled", [*FAST, *PROFILE_3_STEPS, "--steps", "6", "--flamegraph"])
EXPORTS_RUN = ("exports", [*FAST, "--steps", "8", "--profile", "--skip-first", "4", "--wait", "0", "--warmup", "1",
                           "--active", "2", "--export-chrome-trace", "--flamegraph", "--memory-timeline"])
PLAIN_RUN = ("seed3", [*FAST, "--arch", "lenet", "--steps", "8", "--seed", "3"])


@contextlib.contextmanager
def on_cpus(cpus: list[int]):
    """Within the block, this thread and every process it starts (and theirs) run on `cpus` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def run_torchrun(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """torchrun with 2 processes on one node; `args` start with the script (scripts/train.py or a test worker).

    torchrun and its workers run in a session of their own; on timeout the whole session is killed, so a
    test that fails never leaves workers training in the background."""
    e = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    p = subprocess.Popen([*TORCHRUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
                         cwd=REPO, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def call_without_torch(module: str, function: str, argv: list[str]) -> tuple[int, bool, str]:
    """``module.function(argv)`` of this checkout in a fresh process: its exit code (a SystemExit's too),
    whether torch got imported, and its stderr."""
    code = ("import sys\n"
            f"from {module} import {function}\n"
            f"try:\n    rc = {function}({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
            "print(rc, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    rc, imported = r.stdout.split()
    return int(rc), imported == "True", r.stderr

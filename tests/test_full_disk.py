"""A run whose --logdir fills up: one line on stderr, exit code 2, no temporary file left behind.

    python -m pytest -q tests/test_full_disk.py

The logdir is a 1 MiB tmpfs mounted for the test (needs root with CAP_SYS_ADMIN; skipped, saying so,
where mounting is not allowed). The profiled cycle's trace does not fit, so the export fails.
"""

from __future__ import annotations

import json

import pytest
from tmpfs import mounted_tmpfs
from trainrun import FAST, PROFILE_3_STEPS, run_train


@pytest.fixture
def tiny_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "size=1m") as mnt:
        yield mnt


def test_full_disk_during_the_trace_export(tiny_disk):
    r = run_train([*FAST, *PROFILE_3_STEPS, "--steps", "6", "--logdir", str(tiny_disk / "logs"), "--run-name", "f"])
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.replace("\r", "\n").splitlines() if ln.strip() and "it/s" not in ln
             and "step/s" not in ln and "s/step" not in ln]
    assert len(lines) == 1, lines
    assert lines[0].startswith("train.py: error: no space left on device writing ") and "Traceback" not in r.stderr
    run = tiny_disk / "logs" / "f"
    left = [p.name for p in run.rglob("*") if p.name.startswith(".tmp-") or ".partial" in p.name]
    assert not left, left
    # run.json was written at the start; the room set aside beside it lets its last update say "failed"
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    assert not (run / ".run.json.reserve").exists()

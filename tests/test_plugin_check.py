"""scripts/plugin_check.py: an unknown run fails at once; nothing is written beside a (read-only) LOGDIR.

    python -m pytest -q tests/test_plugin_check.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from tmpfs import mounted_tmpfs
from trainrun import REPO

CHECK = [sys.executable, str(REPO / "scripts" / "plugin_check.py")]
TRACE_DIR = REPO / "tests" / "data" / "cpu_resnet"


def test_unknown_run_fails_fast_listing_the_runs(tmp_path):
    shutil.copytree(TRACE_DIR, tmp_path / "logs" / "cpu_resnet")
    t0 = time.monotonic()
    r = subprocess.run([*CHECK, str(tmp_path / "logs"), "nope"], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"plugin_check.py: error: no run 'nope' with profiler traces in {tmp_path / 'logs'}; runs there: cpu_resnet"]
    assert took < 60, f"took {took:.0f}s: it must not wait for TensorBoard"  # the import alone is the cost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


@pytest.fixture
def read_only_parent(tmp_path):
    """A read-only tmpfs holding logs/cpu_resnet: even root cannot write beside LOGDIR."""
    with mounted_tmpfs(tmp_path / "ro", "size=8m") as mnt:
        shutil.copytree(TRACE_DIR, mnt / "logs" / "cpu_resnet")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt


def test_works_with_a_read_only_parent_and_writes_no_log_there(read_only_parent):
    before = sorted(p.relative_to(read_only_parent) for p in read_only_parent.rglob("*"))
    r = subprocess.run([*CHECK, str(read_only_parent / "logs"), "cpu_resnet"], capture_output=True, text=True,
                       timeout=400, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"cpu_resnet"' in r.stdout and '"views"' in r.stdout
    assert sorted(p.relative_to(read_only_parent) for p in read_only_parent.rglob("*")) == before

"""scripts/analyze.py with paths it cannot use: one line on stderr, exit code 2, no traceback, nothing written.

    python -m pytest -q tests/test_analyze_paths.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from tmpfs import mounted_tmpfs
from trainrun import REPO

ANALYZE = [sys.executable, str(REPO / "scripts" / "analyze.py")]
RUN = REPO / "tests" / "data" / "cpu_resnet"


def refused(args: list[str]) -> str:
    r = subprocess.run([*ANALYZE, *args], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "", r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs: even root cannot write there."""
    with mounted_tmpfs(tmp_path / "ro", "size=1m,ro") as mnt:
        yield mnt


@pytest.mark.parametrize("under", ["a file", "a file, two levels down"])
def test_export_under_a_file(tmp_path, under):
    f = tmp_path / "afile"
    f.write_text("x")
    out = f / "out" if under == "a file" else f / "a" / "out"
    line = refused([str(RUN), "--export-tensorboard", str(out)])
    assert line == f"error: --export-tensorboard {out}: {f} is a file, not a directory; give a new or empty directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_export_into_a_read_only_directory(read_only_dir):
    out = read_only_dir / "out"
    line = refused([str(RUN), "--export-tensorboard", str(out)])
    assert line == (f"error: --export-tensorboard {out}: {read_only_dir} is not writable; give a directory you "
                    "can write to")
    assert not any(read_only_dir.iterdir())


def test_unreadable_run_directory(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    run.chmod(0)
    try:
        if os.access(run, os.R_OK):
            pytest.skip("this user (root) reads any directory, whatever its mode")
        assert refused([str(run)]) == f"error: RUN_DIR {run}: permission denied; give a run directory you can read"
    finally:
        run.chmod(0o755)

"""Every command's one-line error reaches stderr in one write, so that processes sharing a stderr (the ranks
under torchrun) never merge two lines into one.

    pytest tests/test_error_lines.py -q

Python's stderr is unbuffered at the binary level (a FileIO under a write-through TextIOWrapper, whether or
not PYTHONUNBUFFERED is set), so every ``write`` of the text layer is one system call. Each command runs in a
fresh process whose stderr is that same stack over a FileIO that also keeps each write it makes; the test
reads the writes back. ``print(line, file=sys.stderr)`` makes two (the line, then the newline), which is how
two ranks' errors once came out as one line in tests/test_ddp.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RUN = r"""
import io, json, os, sys
writes = []
class Kept(io.FileIO):
    def write(self, b):
        writes.append(bytes(b).decode())
        return super().write(b)
sys.stderr = io.TextIOWrapper(Kept(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                              write_through=True)
from stepscope.cli.main import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as e:
    code = e.code
sys.stdout.write(json.dumps({"code": code, "writes": writes}))
"""

DDP_RANK = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
CASES = {
    "unknown_command": (["bogus"], {}),
    "train_argument": (["train", "--steps", "0"], {}),
    "train_under_torchrun": (["train", "--device", "cpu", "--synthetic-train-size", "48"], DDP_RANK),
    "analyze_missing_folder": (["analyze", "/nonexistent/run"], {}),
    "tensorboard_missing_logdir": (["tensorboard", "--logdir", "/nonexistent/logs"], {}),
    "diff_missing_run": (["diff", "/nonexistent/a", "/nonexistent/b"], {}),
}


@pytest.mark.parametrize("case", CASES)
def test_an_error_line_is_one_write(case):
    argv, env = CASES[case]
    p = subprocess.run([sys.executable, "-c", RUN, json.dumps(argv)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, **env})
    result = json.loads(p.stdout)
    assert result["code"] == 2, p.stderr
    lines = [w for w in result["writes"] if "error:" in w]
    assert len(lines) == 1, result["writes"]
    (line,) = lines
    assert line.endswith("\n") and line.count("\n") == 1, result["writes"]
    assert "\n" not in [w for w in result["writes"] if w != line], result["writes"]  # no newline written alone

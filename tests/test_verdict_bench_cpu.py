"""scripts/verdict_bench.py's command line: bad flags get one line and exit code 2. (Its GPU results are in
BENCHMARKS.md; the CPU subset, `--device cpu`, is not yet reliable enough on a shared 2-core machine to assert.)"""

from __future__ import annotations

import subprocess
import sys

from trainrun import REPO

BENCH = [sys.executable, str(REPO / "scripts" / "verdict_bench.py")]


def test_bad_flags_get_one_line_and_exit_2(tmp_path):
    for args, message in ((["--device", "cpu"], "--out is required"),
                          (["--device", "cpu", "--out", str(tmp_path), "--only", "gpt_tiny"],
                           "unknown scenario 'gpt_tiny' for --device cpu"),
                          (["--rescore", str(tmp_path / "missing")], "not a directory of an earlier run")):
        r = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr

"""scripts/verdict_bench.py --device cpu: four CPU scenarios with known causes (cpu_bound, data_bound,
host_bound, and communication_bound over gloo under torchrun), truth measured unprofiled and confirmed by
removing the cause, then profiled and diagnosed. Its confusion matrix must be the identity."""

from __future__ import annotations

import json
import subprocess
import sys

from trainrun import REPO

BENCH = [sys.executable, str(REPO / "scripts" / "verdict_bench.py")]


def test_cpu_confusion_matrix_is_the_identity(tmp_path):
    r = subprocess.run([*BENCH, "--device", "cpu", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    rows, score = result["rows"], result["score"]
    assert not [row for row in rows if "error" in row], rows
    assert {row["truth"]["expected"] for row in rows} == {"cpu_bound", "data_bound", "host_bound",
                                                          "communication_bound"}
    # every cause that can be removed was confirmed by removing it
    assert all(row["truth"]["confirmed"] is not False for row in rows)
    labels, matrix = score["labels"], score["matrix"]
    assert matrix == [[int(i == j) for j in range(len(labels))] for i in range(len(labels))], r.stdout
    assert "Right: 4 of 4" in r.stdout


def test_bad_flags_get_one_line_and_exit_2(tmp_path):
    for args, message in ((["--device", "cpu"], "--out is required"),
                          (["--device", "cpu", "--out", str(tmp_path), "--only", "gpt_tiny"],
                           "unknown scenario 'gpt_tiny' for --device cpu"),
                          (["--rescore", str(tmp_path / "missing")], "not a directory of an earlier run")):
        r = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr

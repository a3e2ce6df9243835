"""The loops benchmark's "drop-in vs trace alone" table (bench.verdicts.loops.dropin_table), on rows
shaped as verdict_loops.py writes them: the main-process loader's three variants among them."""

from __future__ import annotations

from bench.verdicts.loops import VARIANTS, dropin_table


def row(name, expected, busy, run=None, alone=None):
    out = {"scenario": name, "truth": {"expected": expected, "gpu_busy_pct": busy, "confirmed": True}}
    if run:
        out["diagnosis_run"] = {"verdict": run[0], "gpu_busy_pct": run[1]}
    if alone:
        out["diagnosis"] = {"verdict": alone[0], "gpu_busy_pct": alone[1]}
    return out


def test_the_table_scores_each_path_against_the_same_truth():
    rows = [row("loader_in_process", "data_bound", 6.0, ("data_bound", 7.0), ("data_bound", 3.0)),
            row("loader_in_process:unwrapped", "data_bound", 6.0, ("launch_bound", 6.5), ("data_bound", 12.0)),
            row("loader_in_process:torch", "data_bound", 6.0, alone=("data_bound", 5.0)),
            {"scenario": "gpt_large", "error": "RuntimeError: out of memory"}]
    md = dropin_table(rows)
    assert "| loader_in_process:unwrapped | data_bound | launch_bound ✗, 0.5 | data_bound, 6.0 |" in md
    assert "| loader_in_process:torch | data_bound | – | data_bound, 1.0 |" in md
    assert ("Drop-in: verdicts right 1 of 2, busy within 5 points 2 of 2. Trace alone: verdicts right 3 of 3, "
            "busy within 5 points 2 of 3.") in md
    assert {v.split(":")[0] for v in VARIANTS} == {"loader_in_process"}

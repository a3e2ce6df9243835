"""One run folder is one job: `stepscope analyze` on a folder of runs reports each run on its own, and ranks
pair across folders only when the traces' own distributedInfo says they are one job.

    pytest tests/test_runs.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import stepscope
from stepscope.cli.analyze import main as analyze_main

DATA = Path(__file__).parent / "data"
FAST = DATA / "eager_bs128" / "eager_bs128.1795259107760373831.pt.trace.json.gz"  # 5.3 ms steps
SLOW = DATA / "host_bound" / "host_bound.1795259114221902864.pt.trace.json.gz"  # 28.6 ms steps
GLOO = sorted((DATA / "ddp_gloo").glob("*.pt.trace.json.gz"))  # rank 0 and rank 1 of one gloo job


def trainer_like(folder: Path, trace: Path, pid: int, step_ms: float | None = None) -> None:
    """A single-process trainer run: its worker named <host>_<pid>_rank0, as every such run's is."""
    span = trace.name.split(".")[1]
    (folder / "raw" / span).mkdir(parents=True)
    shutil.copy(trace, folder / "raw" / span / f"vm_{pid}_rank0.trace.json.gz")
    if step_ms is not None:
        (folder / "run.json").write_text(json.dumps({"status": "completed", "final": {
            "telemetry": {"step_ms": step_ms, "steps": 20}}}))


def costs(node) -> list[float]:
    """Every finding's cost anywhere in a JSON report."""
    if isinstance(node, dict):
        own = [node["cost_ms_per_step"]] if "cost_ms_per_step" in node else []
        return own + [c for v in node.values() for c in costs(v)]
    if isinstance(node, list):
        return [c for v in node for c in costs(v)]
    return []


def analyze_json(path: Path, capsys) -> dict:
    assert analyze_main([str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_trainer_runs_side_by_side_are_two_single_rank_reports(tmp_path, capsys):
    logs = tmp_path / "logs"
    trainer_like(logs / "run_a", FAST, 101, step_ms=4.5)
    trainer_like(logs / "run_b", SLOW, 202, step_ms=27.0)
    out = analyze_json(logs, capsys)
    assert [r["run"] for r in out["runs"]] == ["run_a", "run_b"]
    for run, step_ms in zip(out["runs"], (4.5, 27.0), strict=True):
        assert run.get("distributed", []) == []
        assert len(run["spans"]) == 1
        # each run's figures are its own run.json's, as its diagnosis.md says
        assert run["spans"][0]["metrics"]["step_ms"] == step_ms
    assert all(c >= 0 for c in costs(out))
    assert analyze_main([str(logs)]) == 0
    text = capsys.readouterr().out
    assert text.count("== run ") == 2 and "cross-rank" not in text and "straggler" not in text
    # the public API says the same
    report = stepscope.analyze(logs)
    assert [name for name, _ in report.runs] == ["run_a", "run_b"]
    assert all(not r.distributed for _, r in report.runs)


def test_one_run_keeps_the_single_run_shape(tmp_path, capsys):
    trainer_like(tmp_path / "run_a", FAST, 101)
    out = analyze_json(tmp_path, capsys)
    assert "runs" not in out and len(out["spans"]) == 1
    out = analyze_json(tmp_path / "run_a", capsys)
    assert "runs" not in out and len(out["spans"]) == 1


def test_two_rank0_workers_in_one_folder_are_no_job_and_no_cost_is_negative(tmp_path, capsys):
    for pid, trace in ((101, FAST), (202, SLOW)):
        shutil.copy(trace, tmp_path / f"vm_{pid}_rank0.{trace.name.split('.')[1]}.pt.trace.json.gz")
    out = analyze_json(tmp_path, capsys)
    assert len(out["spans"]) == 2
    assert out.get("distributed", []) == []  # two processes that both say "rank 0" are not ranks of one job
    assert all(c >= 0 for c in costs(out))


def test_ranks_in_separate_folders_pair_when_their_distributedInfo_says_so(tmp_path, capsys):
    for trace in GLOO:
        rank = trace.name.split(".")[0][-1]
        (tmp_path / f"rank{rank}").mkdir()
        shutil.copy(trace, tmp_path / f"rank{rank}" / trace.name)
    out = analyze_json(tmp_path, capsys)
    assert "runs" not in out
    (cycle,) = out["distributed"]
    assert cycle["world_size"] == 2 and cycle["stragglers"] == [1]
    assert all(c > 0 for c in costs(cycle))


def test_ranks_of_one_job_do_not_pair_with_a_run_that_only_shares_their_numbering(tmp_path, capsys):
    """Same world size and distinct ranks, but profiled at different times: not one job."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shutil.copy(GLOO[0], tmp_path / "a" / GLOO[0].name)
    trace = json.loads(__import__("gzip").decompress(GLOO[1].read_bytes()))
    for e in trace["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 3_600e6  # an hour later
    (tmp_path / "b" / GLOO[1].name.removesuffix(".gz")).write_text(json.dumps(trace))
    out = analyze_json(tmp_path, capsys)
    assert [r["run"] for r in out["runs"]] == ["a", "b"]
    assert all(r.get("distributed", []) == [] for r in out["runs"])

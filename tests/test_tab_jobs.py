"""The stepscope tab's runs are `stepscope analyze`'s jobs: the ranks of one job written into sibling folders
show as one run, with its cross-rank section and the verdict the command prints, through a real TensorBoard on
loopback; each trace is analysed once ($STEPSCOPE_ANALYSIS_LOG), not once per folder and again as a job. The
`stepscope tensorboard` watcher publishes the same jobs, each as one run whose report the tab reads.

    python -m pytest -q -p no:xdist tests/test_tab_jobs.py      # about a minute on 2 busy cores
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stepscope
from stepscope.report import engine
from stepscope.report.front import read_report
from stepscope.report.jobs import may_join
from stepscope.tensorboard import watch
from stepscope.tensorboard.tab import runs as tab_runs
from stepscope.tensorboard.tab.cache import diagnosed
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace.discover import discover

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
TAB = "/data/plugin/stepscope"


def analyze_json(path: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(path), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def settled_runs(tb: TensorBoard, timeout_s: float = 240) -> dict:
    """The runs list once no run is being analysed (while the folders that may be one job are analysed
    together, each is listed as analysing under its own name)."""
    deadline = time.monotonic() + timeout_s
    runs: dict = {}
    while time.monotonic() < deadline:
        runs = {r["name"]: r for r in tb.get(f"{TAB}/runs")["runs"]}
        if runs and all(r["state"] != "analysing" for r in runs.values()):
            return runs
        time.sleep(1)
    raise TimeoutError(f"runs {runs}: {tb.log_text()}")


@pytest.fixture
def logdir(tmp_path, monkeypatch):
    """Each rank of a 2-rank gloo job in a folder of its own, beside a folder holding both ranks of another
    job, a folder holding rank 0 of a third job (whose headers alone cannot tell it from the gloo job's ranks)
    and a single-process run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logs = tmp_path / "logs"
    for i, trace in enumerate(sorted((DATA / "ddp_gloo").glob("*.pt.trace.json.gz"))):
        (logs / f"rank{i}").mkdir(parents=True)
        shutil.copy(trace, logs / f"rank{i}" / trace.name)
    shutil.copytree(DATA / "suite_ddp" / "straggler", logs / "both")
    shutil.copytree(DATA / "eager_bs32", logs / "single")
    (logs / "lone").mkdir()
    rank0 = sorted((DATA / "nccl_ddp").glob("*.pt.trace.json.gz"))[0]
    shutil.copy(rank0, logs / "lone" / rank0.name)
    return logs


def test_a_job_of_sibling_folders_is_one_run_with_the_commands_verdict(logdir, tmp_path, monkeypatch):
    ledger = tmp_path / "analyses.log"
    monkeypatch.setenv(engine.ANALYSIS_LOG, str(ledger))
    with TensorBoard(logdir) as tb:
        runs = settled_runs(tb)
        # "lone" may join by its header, and is found to be no rank of the gloo job (its window is elsewhere)
        assert sorted(runs) == ["both", "lone", "rank0+rank1", "single"]
        job = tb.get(f"{TAB}/run", run="rank0+rank1")
        ranks = tb.get(f"{TAB}/ranks", run="rank0+rank1")
        assert tb.get(f"{TAB}/runs")["runs"] == list(runs.values())  # settled: asking again analyses nothing
    analysed = sorted(Path(line) for line in ledger.read_text().splitlines())
    monkeypatch.delenv(engine.ANALYSIS_LOG)
    assert analysed == sorted(t.path for t in discover(logdir).traces)  # each trace once

    whole = {r["run"]: r for r in analyze_json(logdir)["runs"]}  # the command's jobs of the same folders
    assert sorted(whole) == sorted(runs)
    for name, row in runs.items():
        assert row["state"] == "ready" and row["verdict"] == whole[name]["verdict"], (name, row)
    joined = {k: v for k, v in whole["rank0+rank1"].items() if k != "run"}
    assert stepscope.analyze([logdir / "rank0", logdir / "rank1"]).to_dict() == joined  # the two folders alone
    assert job["verdict"] == joined["verdict"] and len(job["cycles"]) == 1
    # its cross-rank section: both ranks of the one cycle, as the command's distributed section lists them
    assert joined["distributed"] and len(ranks["jobs"]) == len(joined["distributed"])
    assert ranks["verdict"] == joined["verdict"]


def test_may_join_is_what_a_header_can_say_of_a_folder():
    assert may_join([(0, 4), (1, 4)]) and may_join([(1, 2)])
    assert not may_join([(0, 2), (1, 2)])  # the folder holds its whole world
    assert not may_join([(0, 1)]) and not may_join([]) and not may_join([(0, 2), (None, 2)])
    assert not may_join([(0, 4), (0, 4)]) and not may_join([(0, 4), (1, 2)]) and not may_join([(4, 4)])


def test_the_watcher_publishes_a_job_of_sibling_folders_as_one_run(logdir, tmp_path, monkeypatch):
    ledger = tmp_path / "analyses.log"
    monkeypatch.setenv(engine.ANALYSIS_LOG, str(ledger))
    shadow = tmp_path / "shadow" / "logdir"
    watcher = watch.Watcher(watch.WatchConfig(logdir, shadow, tmp_path / "shadow" / "staging"))
    try:
        assert watcher.poll(wait_s=None) == []  # first sight: nothing is stable yet
        lines = watcher.poll(wait_s=None)
    finally:
        watcher.close()
    assert sorted(p.name for p in watcher.runs) == ["both", "lone", "rank0+rank1", "single"], lines
    analysed = sorted(Path(line) for line in ledger.read_text().splitlines())
    monkeypatch.delenv(engine.ANALYSIS_LOG)
    assert analysed == sorted(t.path for t in discover(logdir).traces)  # each trace once
    published = tab_runs.find_runs(shadow)
    job = published["rank0+rank1"]
    assert len(job.traces) == 2 and not tab_runs.may_join(job)  # the tab shows it as it is: one run
    report = read_report(job.folder, job.traces)
    assert report is not None and diagnosed(job) is not None  # what the tab reads instead of analysing
    joined = stepscope.analyze([logdir / "rank0", logdir / "rank1"]).to_dict()
    assert report["verdict"] == joined["verdict"] and report["distributed"] == joined["distributed"]
    assert sorted(s["rank"] for s in report["spans"]) == [0, 1]
    lone = read_report(published["lone"].folder, published["lone"].traces)
    assert lone["verdict"] == stepscope.analyze(logdir / "lone").verdict and not lone.get("distributed")


def test_the_watcher_holds_a_rank_folder_for_its_job_then_publishes_it_alone(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    (logs / "rank0").mkdir(parents=True)
    trace = sorted((DATA / "ddp_gloo").glob("*.pt.trace.json.gz"))[0]
    shutil.copy(trace, logs / "rank0" / trace.name)
    watcher = watch.Watcher(watch.WatchConfig(logs, tmp_path / "logdir", tmp_path / "staging"))
    try:
        monkeypatch.setattr(watch, "HOLD_S", 3600.0)
        for _ in range(3):
            assert watcher.poll(wait_s=None) == []  # rank 1 of its world of 2 may still come
        assert list(watcher.held) == ["rank0"] and watcher.runs == []
        monkeypatch.setattr(watch, "HOLD_S", 0.0)
        lines = watcher.poll(wait_s=None)
    finally:
        watcher.close()
    assert [p.name for p in watcher.runs] == ["rank0"] and watcher.held == {}, lines
    assert read_report(watcher.runs[0], discover(watcher.runs[0]).traces)["verdict"] == \
        stepscope.analyze(logs / "rank0").verdict

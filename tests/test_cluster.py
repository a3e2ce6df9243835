"""`stepscope analyze --cluster`: each rank's parse and report as tasks of a real Dask cluster (a scheduler
and 2 worker processes on the loopback interface), the cross-rank analysis here; the output is the local
one, byte for byte. Bad --cluster values are one line and exit code 2.

    python -m pytest -q tests/test_cluster.py
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from stepscope.cli.analyze import main
from stepscope.report import front
from stepscope.trace import cluster as dask_glue
from stepscope.trace.files import load_trace
from stepscope.trace.workers import Workers

distributed = pytest.importorskip("distributed")

DATA = Path(__file__).parent / "data"
STRAGGLER = DATA / "suite_ddp" / "straggler"  # rank 1 straggles
RANKS = 6
SPAN = "1795382615574428934"


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """A job of RANKS ranks: the recorded two ranks in turn, each copy with its own rank."""
    out = tmp_path_factory.mktemp("job")
    sources = [load_trace(p) for p in sorted(STRAGGLER.glob("*.pt.trace.json.gz"))]
    for rank in range(RANKS):
        trace = sources[rank % 2]
        trace["distributedInfo"] = {**trace["distributedInfo"], "rank": rank, "world_size": RANKS}
        path = out / f"node{rank // 2}_rank{rank}.{SPAN}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(json.dumps(trace).encode(), compresslevel=1))
    return out


@pytest.fixture(scope="module")
def scheduler() -> str:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0") as c:
        yield c.scheduler_address


def _analyze(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _tasks_done(address: str, function: str) -> int:
    """Tasks of ``function`` that the cluster's workers have computed (the scheduler's recent transitions)."""
    with distributed.Client(address, set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: len({
            t[0] for t in dask_scheduler.transition_log if str(t[0]).startswith(f"{function}-") and t[2] == "memory"}))


def test_a_job_on_the_cluster_gives_the_local_output(job, scheduler, capsys):
    before = _tasks_done(scheduler, "analyze_trace")
    for args in (["--json"], []):
        local = _analyze(capsys, job, *args)
        assert local[0] == 0, local[2]
        assert _analyze(capsys, job, *args, "--cluster", scheduler) == local
    assert _tasks_done(scheduler, "analyze_trace") - before == 2 * RANKS  # each rank a task, twice
    report = json.loads(_analyze(capsys, job, "--json", "--cluster", scheduler)[1])
    (cycle,) = report["distributed"]
    assert len(cycle["ranks"]) == RANKS and {r["rank"] for r in cycle["ranks"] if r["straggler"]} == {1, 3, 5}


def test_the_front_door_on_the_cluster(job, scheduler):
    local = front.analyze(job, workers=Workers.local(cpus=2)).to_dict()
    assert front.analyze(job, workers=Workers.dask(scheduler)).to_dict() == local


def test_a_local_cluster_of_n_processes(job, capsys):
    local = _analyze(capsys, job, "--json")
    assert _analyze(capsys, job, "--json", "--cluster", "local:2") == local


def test_a_trace_error_on_a_worker_is_one_line(tmp_path, scheduler, capsys):
    (tmp_path / "w_rank0.1.pt.trace.json").write_text('{"traceEvents": [')
    code, out, err = _analyze(capsys, tmp_path, "--cluster", scheduler)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "w_rank0.1.pt.trace.json" in err


@pytest.mark.parametrize("value,fragment", [
    ("foo", "expected a Dask scheduler address"),
    ("local:0", "expected a Dask scheduler address"),
    ("local:x", "expected a Dask scheduler address"),
    ("tcp://127.0.0.1:9", "no Dask scheduler answers there"),
])
def test_bad_cluster_values_are_one_line(job, value, fragment, capsys, monkeypatch):
    monkeypatch.setattr(dask_glue, "CONNECT_TIMEOUT_S", 2)
    code, out, err = _analyze(capsys, job, "--cluster", value)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and fragment in err, err


def test_without_dask_the_cluster_option_says_what_to_install(job, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if it were not installed
    code, out, err = _analyze(capsys, job, "--cluster", "local:2")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and ".[cluster]" in err
    assert _analyze(capsys, job, "--json")[0] == 0  # the default needs no Dask


def test_a_folder_of_runs_on_the_cluster(job, scheduler, tmp_path, capsys):
    """Two runs side by side, one a stepscope run with its own telemetry: reported run by run, as locally."""
    shutil.copytree(job, tmp_path / "exp1")
    (tmp_path / "exp1" / "run.json").write_text(json.dumps({"final": {"telemetry": {"step_ms": 5.0, "steps": 4}}}))
    shutil.copytree(DATA / "suite_ddp" / "balanced", tmp_path / "exp2")
    local = _analyze(capsys, tmp_path, "--json")
    assert local[0] == 0 and [r["run"] for r in json.loads(local[1])["runs"]] == ["exp1", "exp2"]
    before = _tasks_done(scheduler, "analyze_trace")
    assert _analyze(capsys, tmp_path, "--json", "--cluster", scheduler) == local
    # each trace is parsed and reported once, with its own run's telemetry: none goes round a second time
    assert _tasks_done(scheduler, "analyze_trace") - before == RANKS + 2

"""One way in: the CLI, the trainer's end-of-run diagnosis and the watcher reach the traces through
stepscope.report.front (one discovery, one streamed parse), and a training process never forks.

    python -m pytest -q tests/test_front.py
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from stepscope.analysis import json_out
from stepscope.cli.analyze import main as analyze_main
from stepscope.report.front import analyze
from stepscope.tensorboard.diagnose import diagnose_run
from stepscope.trace import workers
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers

DATA = Path(__file__).parent / "data"


class Log:
    """What diagnose_run writes to (the trainer's TensorBoard log), kept in memory."""

    def __init__(self) -> None:
        self.texts, self.scalars_seen = {}, []

    def text(self, tag: str, md: str, step: int) -> None:
        self.texts[tag] = md

    def scalars(self, d: dict, step: int) -> None:
        self.scalars_seen.append(d)


class Forked(Exception):
    pass


def _no_fork(*args, **kwargs):
    raise Forked("a process pool was started")


@pytest.fixture
def two_ranks_worth_forking(tmp_path, monkeypatch):
    """A 2-rank run whose traces the worker policy would parse in two forked processes."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "nccl_ddp", run)
    monkeypatch.setattr(workers, "SPLIT_FROM", 0)  # these small traces count as large
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(workers, "fork_pool", _no_fork)
    return run


def test_the_policy_would_fork_this_run(two_ranks_worth_forking):
    """The check below is real: analysed from a command, these traces are parsed in forked processes."""
    with pytest.raises(Forked):
        analyze(two_ranks_worth_forking, workers=Workers.local(cpus=2))


def test_end_of_run_diagnosis_never_forks(two_ranks_worth_forking, capsys):
    log = Log()
    d = diagnose_run(two_ranks_worth_forking, log, 7)
    assert d["verdict"] and len(d["spans"]) == 2 and d["distributed"]
    assert "diagnosis" in log.texts and (two_ranks_worth_forking / "diagnosis.md").is_file()
    assert "stepscope diagnosis" in capsys.readouterr().out


def test_diagnosis_and_analyze_find_the_same_traces(tmp_path, capsys):
    """A trace only discover.py knows (accelerate's profile_<rank>.json) is diagnosed like `analyze` sees it."""
    run = tmp_path / "run"
    run.mkdir()
    src = next((DATA / "eager_bs32").glob("*.pt.trace.json.gz"))
    (run / "profile_0.json").write_bytes(gzip.decompress(src.read_bytes()))
    want = json_out.dumps(analyze(run).to_dict())
    assert json_out.dumps(diagnose_run(run, Log(), 0)) == want
    assert json.loads(want)["spans"][0]["worker"] == "profile_0"


def test_the_diagnosis_uses_the_telemetry_it_is_given_only(tmp_path, capsys):
    """The trainer passes its own telemetry; without it the diagnosis reads the traces alone, even where a
    run.json (of a run still being written) is there: the same figures as the traces give."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "eager_bs32", run)
    (run / "run.json").write_text(json.dumps({"final": {"telemetry": {"step_ms": 5.0, "steps": 3}}}))
    alone = diagnose_run(run, Log(), 0)
    assert alone["spans"][0]["basis"] != "telemetry"
    assert analyze(run).to_dict()["spans"][0]["basis"] == "telemetry"  # the CLI's reading of a finished run
    given = diagnose_run(run, Log(), 0, telemetry={"step_ms": 5.0, "steps": 3})
    assert given["spans"][0]["basis"] == "telemetry"


@pytest.mark.parametrize("bad", ["missing", "empty", "not_traces"])
def test_the_command_refuses_with_the_front_doors_words(tmp_path, capsys, bad):
    """One discovery, one set of messages: the command's one line on stderr is the TraceError that
    front.analyze raises for the same path, and it writes nothing on stdout."""
    path = tmp_path / bad
    if bad != "missing":
        path.mkdir()
    if bad == "not_traces":
        (path / "notes.json").write_text('{"not": "a trace"}')
    with pytest.raises(TraceError) as by_analyze:
        analyze(path)
    capsys.readouterr()
    assert analyze_main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: {by_analyze.value}\n")
    assert ("not a directory or a trace file" if bad == "missing" else ": no traces (expected") in err
    assert ("notes.json" in err) == (bad == "not_traces")


def test_the_command_says_what_the_front_door_found(capsys):
    """The command's first stderr line is the front door's summary of what was found."""
    run = DATA / "eager_bs32"
    want = analyze(run).summary
    assert analyze_main([str(run), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0] == want and want.startswith("found 1 trace")

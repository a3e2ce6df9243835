"""`stepscope analyze --export-tensorboard`: one read of each trace feeds both its analysis and its plugin
copy's plan (plugin_copy/one_pass.py, through `stepscope.analyze(..., copies=...)`); a trace the export
reads in two halves at once is read so for both. The oracle is the two reads the command made before: the
analysis' own parse (`parse_trace_file`) and the copy's own plan (`plan_edits`), whose report and files must
come out the same."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
import stepscope
from stepscope.cli.analyze import main as analyze_main
from stepscope.plugin_copy import export as export_module
from stepscope.plugin_copy.export import export_tensorboard
from stepscope.report import engine
from stepscope.trace import workers as policy
from stepscope.trace.workers import Workers

DATA = Path(__file__).resolve().parent / "data"
RUNS = ["nccl_ddp", "holdout/vit_tiny_bs256"]  # two ranks; a memory trace


def _files(folder: Path) -> dict[str, bytes]:
    """Each file's bytes (a .gz file's decompressed: its header holds the time it was written)."""
    return {p.relative_to(folder).as_posix(): gzip.decompress(p.read_bytes()) if p.name.endswith(".gz")
            else p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refuse(*a, **k):
    raise AssertionError("a second read of the trace")


@pytest.mark.parametrize("run", RUNS)
def test_the_export_writes_the_copies_the_analysis_read_planned(run, tmp_path, monkeypatch, capsys):
    """The command plans no copy and parses no trace apart from the one read per trace: the copy's own
    planning read and the analysis' own parse are refused here, and the files and the report are those of
    the two reads (made first, as the oracle)."""
    want = tmp_path / "want"
    export_tensorboard(DATA / run, want)
    report = stepscope.analyze(DATA / run).to_dict()
    monkeypatch.setattr(export_module, "plan_edits", _refuse)
    monkeypatch.setattr(engine, "parse_path", _refuse)
    got = tmp_path / "got"
    assert analyze_main([str(DATA / run), "--json", "--export-tensorboard", str(got)]) == 0
    assert __import__("json").loads(capsys.readouterr().out) == report
    mine, theirs = _files(got), _files(want)
    marker = {k for k in mine if k.endswith(".stepscope-export")}
    assert mine.keys() == theirs.keys() and len(mine) > len(marker)
    assert {k: v for k, v in mine.items() if k not in marker} == {k: v for k, v in theirs.items() if k not in marker}


def _halves_used(monkeypatch) -> list:
    """The reads in halves that feed both (one_pass.read_in_halves), as they return."""
    from stepscope.plugin_copy import one_pass

    got = []
    real = one_pass.read_in_halves

    def spy(*a, **k):
        got.append(real(*a, **k))
        return got[-1]

    monkeypatch.setattr(one_pass, "read_in_halves", spy)
    return got


@pytest.mark.parametrize("reader", ["compiled", "msgspec"])
@pytest.mark.parametrize("run", ["eager_bs32", "holdout/vit_tiny_bs256"])  # one trace each: read here
def test_a_trace_read_in_halves_is_read_once_for_both_in_its_halves(run, reader, tmp_path, monkeypatch, capsys):
    """A trace the export reads and writes in two halves at once (large, and helpers allowed) is read once:
    the analysis' two byte ranges, whose pieces the copy's plan reads too, in this process and in the
    helper; the analysis of that parse is made in a child while this process plans the copy. No other read
    plans or parses it; the copy is written in the ranges read; the files and the report are those of the two
    reads apart (the oracle, made first), through either reader."""
    from stepscope.trace import fastread

    if reader == "msgspec":
        monkeypatch.setenv(fastread.PURE_ENV, "1")
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)  # these small traces count as large
    want = tmp_path / "want"
    export_tensorboard(DATA / run, want, workers=Workers.local())  # the copy's own plan, in halves
    report = stepscope.analyze(DATA / run).to_dict()
    halves = _halves_used(monkeypatch)
    monkeypatch.setattr(export_module, "plan_edits", _refuse)
    monkeypatch.setattr(engine, "parse_path", _refuse)
    got = tmp_path / "got"
    assert analyze_main([str(DATA / run), "--json", "--export-tensorboard", str(got)]) == 0
    assert __import__("json").loads(capsys.readouterr().out) == report
    # the analysis made in the child forked beside the copy's plan, from the same read's parse
    assert halves and all(b.analysed is not None and b.parsed is None and len(b.plan.ranges) == 2 for b in halves)
    mine, theirs = _files(got), _files(want)
    marker = {k for k in mine if k.endswith(".stepscope-export")}
    assert mine.keys() == theirs.keys() and len(mine) > len(marker)
    assert {k: v for k, v in mine.items() if k not in marker} == {k: v for k, v in theirs.items() if k not in marker}


def test_a_read_in_halves_that_fails_leaves_each_its_own_read(tmp_path, monkeypatch, capsys):
    """Where the halves read for both fails (here: the copy's side dies in the helper), the analysis parses
    the trace itself and the copy plans it itself: the same report and files."""
    from stepscope.plugin_copy import plan_columns

    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    want = tmp_path / "want"
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(want)]) == 0
    report = capsys.readouterr().out

    parent, real = os.getpid(), plan_columns.RangeReader.piece

    def dies(self, events, at=None):  # this process makes its own pieces' columns with it too
        if os.getpid() != parent:
            raise RuntimeError("the helper's side died")
        return real(self, events, at)

    monkeypatch.setattr(plan_columns.RangeReader, "piece", dies)
    halves = _halves_used(monkeypatch)
    got = tmp_path / "got"
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(got)]) == 0
    assert capsys.readouterr().out == report and halves == [None]
    assert [v for k, v in sorted(_files(got).items()) if not k.endswith("export")] == \
        [v for k, v in sorted(_files(want).items()) if not k.endswith("export")]


def _apart_children() -> list:
    import multiprocessing

    return [p for p in multiprocessing.active_children() if p.name == "stepscope-apart"]


@pytest.mark.parametrize("fault", ["dies", "raises", "no child", "no room"])
def test_where_the_analysis_beside_the_plan_fails_this_process_analyses_the_parse(fault, tmp_path, monkeypatch,
                                                                                  capsys):
    """The child that analyses the parse while the copy is planned killed, failing (any exception: a
    TraceError among them, which this process's own analysis then says), or not started (no process, or no
    memory for a second parse): this process parses what the same read collected and analyses it; the same
    report and files, no second read, and no child left."""
    from stepscope.plugin_copy import one_pass

    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    want = tmp_path / "want"
    export_tensorboard(DATA / "eager_bs32", want, workers=Workers.local())
    report = stepscope.analyze(DATA / "eager_bs32").to_dict()
    if fault == "dies":
        monkeypatch.setattr(one_pass, "_analysed", lambda *a: os._exit(3))
    elif fault == "raises":
        monkeypatch.setattr(one_pass, "_analysed", lambda *a: (_ for _ in ()).throw(MemoryError()))
    elif fault == "no child":
        class NoProcess(policy.Apart):
            def __init__(self, *a):
                raise OSError(11, "no process")

        monkeypatch.setattr(one_pass, "Apart", NoProcess)
    else:  # a memory budget that holds one parse of the trace, not two: no child is forked
        size = policy.peak_bytes(policy.json_size(next((DATA / "eager_bs32").glob("*.json*"))))
        monkeypatch.setattr(policy, "default_budget", lambda: 2 * size - 1)

        class NoFork(policy.Apart):
            def __init__(self, *a):
                pytest.fail("forked without room for two parses")

        monkeypatch.setattr(one_pass, "Apart", NoFork)
    halves = _halves_used(monkeypatch)
    monkeypatch.setattr(export_module, "plan_edits", _refuse)
    monkeypatch.setattr(engine, "parse_path", _refuse)
    got = tmp_path / "got"
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(got)]) == 0
    assert __import__("json").loads(capsys.readouterr().out) == report
    assert len(halves) == 1 and halves[0].analysed is None and halves[0].parsed is not None
    assert {k: v for k, v in _files(got).items() if not k.endswith("export")} == \
        {k: v for k, v in _files(want).items() if not k.endswith("export")}
    assert not _apart_children()


def test_a_plan_that_fails_stops_the_analysis_beside_it(tmp_path, monkeypatch, capsys):
    """The copy's plan failing while the child analyses: the child is stopped at once (not waited for), and
    the analysis and the copy each read the trace themselves, as where the read in halves fails."""
    from stepscope.plugin_copy import one_pass

    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    report = stepscope.analyze(DATA / "eager_bs32").to_dict()
    stopped = []
    real = one_pass.Apart

    class Spied(real):
        def stop(self):
            stopped.append(self.process.is_alive())
            super().stop()

    def slow(*a):
        import time

        time.sleep(30)  # still analysing when the plan fails

    def fails(*a):
        raise RuntimeError("the plan failed")

    monkeypatch.setattr(one_pass, "Apart", Spied)
    monkeypatch.setattr(one_pass, "_analysed", slow)
    monkeypatch.setattr(one_pass, "plan_of", fails)
    halves = _halves_used(monkeypatch)
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(tmp_path / "o")]) == 0
    assert __import__("json").loads(capsys.readouterr().out) == report
    assert halves == [] and stopped == [True] and not _apart_children()


@pytest.mark.parametrize("tables", [False, True])
def test_what_the_child_makes_is_what_this_process_makes(tables, monkeypatch):
    """analyze_trace with the copy read in halves (the analysis in the child beside the plan) and without a
    copy (all here): the same report, evidence, step windows and operator table; and a trace the child
    skips is skipped."""
    from stepscope.report.loaded import assign_spans
    from stepscope.trace.discover import Skipped, discover

    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    (found,) = discover(DATA / "holdout/vit_tiny_bs256").traces
    span = assign_spans([found])[found.path]
    halves = _halves_used(monkeypatch)
    here = engine.analyze_trace(found.path, found, span, tables=tables, keep=True, parts=2)
    beside = engine.analyze_trace(found.path, found, span, tables=tables, keep=True, copy=True, parts=2)
    assert len(halves) == 1 and halves[0].analysed is not None  # made in the child
    assert beside.report == here.report and beside.evidence == here.evidence
    assert beside.traced_ms == here.traced_ms and beside.ops_ms == here.ops_ms
    assert (beside.traced_ms != ()) == tables
    assert beside.loaded == here.loaded and beside.copy is not None
    monkeypatch.setattr(engine, "load_one", lambda f, s, p: Skipped(f.path, "skipped in the child"))
    skipped = engine.analyze_trace(found.path, found, span, copy=True, parts=2)
    assert isinstance(skipped, Skipped) and skipped.reason == "skipped in the child"
    assert len(halves) == 2 and halves[1].analysed == skipped and not _apart_children()


@pytest.mark.parametrize("halves", [False, True], ids=["one range", "halves"])
def test_a_trace_the_analysis_refuses_is_still_said_in_the_analysis_words(halves, tmp_path, monkeypatch, capsys):
    """The one read (in one range, or in halves at once) leaves no parse where the analysis has something to
    say: the command's error is the one the analysis' own read gives, and nothing is exported."""
    if halves:
        monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    run = tmp_path / "run"
    shutil.copytree(DATA / "eager_bs32", run)
    (trace,) = run.glob("*.json.gz")
    text = gzip.decompress(trace.read_bytes()).replace(b'"dur": ', b'"dur": [1], "_d": ', 1)
    trace.write_bytes(gzip.compress(text))
    assert analyze_main([str(run), "--json"]) == 2
    alone = capsys.readouterr().err
    assert analyze_main([str(run), "--json", "--export-tensorboard", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == alone and alone.count("\n") == 1
    assert not (tmp_path / "out").exists()

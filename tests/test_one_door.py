"""One door: every caller reaches the analysis through `stepscope.analyze`, and a diagnosed run is read, not
analysed again.

    python -m pytest -q -p no:xdist tests/test_one_door.py      # about two minutes on 2 idle cores

The first tests call each of the five callers (the command line, the trainer's end of run, the trace handler's
cycle worker, the `stepscope tensorboard` watcher and the tab's analysis process) on a real trace, and see
every trace's analysis happen inside `report/front.py`'s `analyze`; a static check over the package's imports
says that nothing else reaches the engine. The last test runs a real trainer (one process, and two ranks
under torchrun) and a real `stepscope tensorboard` (TensorBoard and the tab on loopback), and counts the
analyses those processes make through $STEPSCOPE_ANALYSIS_LOG: none for the trainer's runs (their
report.json is read), one for a stranger's folder.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import stepscope
from stepscope.cli.analyze import main as analyze_main
from stepscope.report import engine, front
from stepscope.report.front import REPORT_FILE, read_report
from stepscope.tensorboard.tab.cache import diagnosed
from stepscope.tensorboard.tab.runs import find_runs
from stepscope.tensorboard.tbserver import free_port, loopback_get
from stepscope.trace.discover import discover
from trainrun import FAST, PROFILE_3_STEPS, TRAIN, run_torchrun, run_train

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trainer"
DATA = REPO / "tests" / "data"
# 2 ranks on the CPU (gloo), LeNet, a few steps (test_ddp.py's recipe)
DDP_FAST = ["--device", "cpu", "--arch", "lenet", "--synthetic-train-size", "512", "--synthetic-eval-size", "64",
            "--batch-size", "32", "--log-every", "2"]
STRANGER = DATA / "eager_bs32"  # one tensorboard_trace_handler trace, nobody's report.json beside it
FRONT = PACKAGE / "report" / "front.py"
# what makes a report out of a trace: only the engine behind the door (report/engine.py) calls these
ENGINE_NAMES = {"analyze_parsed_file", "analyze_selected", "analyze_parsed", "parse_path", "parse_trace_file",
                "run_report", "cross_rank", "evidence_of_file", "report_of_file", "evidence_selected",
                "report_guarded", "span_evidence", "span_report"}


class Doorkeeper:
    """Every trace analysed (engine.analyze_trace, wrapped): its path, and whether ``analyze`` of
    report/front.py was on the stack, and which caller's file was."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[Path, bool, set[str]]] = []
        real = engine.analyze_trace

        def counted(path, *args, **kwargs):
            frames = inspect.stack()
            door = any(f.function == "analyze" and Path(f.filename) == FRONT for f in frames)
            self.calls.append((Path(path), door, {Path(f.filename).name for f in frames}))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(engine, "analyze_trace", counted)

    def through_door(self, caller: str) -> list[Path]:
        assert self.calls, f"{caller} analysed nothing"
        assert all(door for _, door, _ in self.calls), f"{caller} reached the engine outside stepscope.analyze"
        assert all(caller in files for _, _, files in self.calls), (caller, self.calls)
        return [p for p, _, _ in self.calls]


def _trace_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "stranger"
    shutil.copytree(STRANGER, folder)
    return folder


def test_the_command_line_goes_through_the_door(monkeypatch, tmp_path, capsys):
    keeper = Doorkeeper(monkeypatch)
    assert analyze_main([str(STRANGER), "--json"]) == 0
    assert len(keeper.through_door("analyze.py")) == len(discover(STRANGER).traces) == 1
    assert json.loads(capsys.readouterr().out) == stepscope.analyze(STRANGER).to_dict()


def test_the_trainers_end_of_run_goes_through_the_door_and_writes_report_json(monkeypatch, tmp_path):
    from stepscope.tensorboard.diagnose import diagnose_run
    from stepscope.tensorboard.tb_events import EventLog

    run = _trace_copy(tmp_path)
    keeper = Doorkeeper(monkeypatch)
    with EventLog(run) as log:
        got = diagnose_run(run, log, 0, telemetry={"steps": 10, "step_ms": 80.0})
    assert len(keeper.through_door("diagnose.py")) == 1
    written = json.loads((run / REPORT_FILE).read_text())
    assert {k: v for k, v in written.items() if k not in ("traced_ms", "ops_ms")} == got
    assert written["traced_ms"] and written["ops_ms"]  # what the tab's diff compares runs by
    assert read_report(run, discover(run).traces) == written  # fresh, and on exactly these traces


def test_the_handlers_cycle_worker_goes_through_the_door_and_writes_report_json(monkeypatch, tmp_path):
    from stepscope.capture.cycle_worker import CycleTrace, CycleWorker

    trace = next(STRANGER.glob("*.pt.trace.json*"))
    raw = tmp_path / "run" / "raw" / "7" / "w.trace.json"
    raw.parent.mkdir(parents=True)
    raw.write_bytes(__import__("gzip").decompress(trace.read_bytes()) if trace.suffix == ".gz"
                    else trace.read_bytes())
    keeper = Doorkeeper(monkeypatch)
    worker = CycleWorker(tmp_path / "run", "w", use_gzip=False)
    worker.submit(CycleTrace("7", raw, None))
    assert worker.close(timeout=120)
    assert keeper.through_door("cycle_worker.py") == [raw]
    written = json.loads((tmp_path / "run" / REPORT_FILE).read_text())
    assert written["verdict"] == worker.summaries[0].report.verdict
    assert [(s["worker"], s["span"]) for s in written["spans"]] == [("w", "7")]
    # the folder's own analysis says the same: report.json is the report on these traces
    assert stepscope.analyze(tmp_path / "run").to_dict() == {k: v for k, v in written.items()
                                                              if k not in ("traced_ms", "ops_ms")}


def test_the_watcher_goes_through_the_door_once_per_run(monkeypatch, tmp_path):
    from stepscope.tensorboard.watch import WatchConfig, build_run, signature

    source = _trace_copy(tmp_path)
    cfg = WatchConfig(source=tmp_path, logdir=tmp_path / "shadow" / "logdir", staging=tmp_path / "shadow" / "st")
    items = [(f, signature(f.path)) for f in discover(tmp_path).traces]
    keeper = Doorkeeper(monkeypatch)
    built = build_run(cfg, "stranger", source, items)
    assert keeper.through_door("watch.py") == [f.path for f, _ in items]
    assert built.path is not None and (built.path / REPORT_FILE).is_file()
    # the published run carries its report: the tab reads it, and analyses nothing
    assert read_report(built.path, discover(built.path).traces)["verdict"] == stepscope.analyze(source).verdict


def test_the_watcher_copies_each_trace_from_the_read_that_analysed_it(monkeypatch, tmp_path):
    """The shadow run's plugin copy is planned by the analysis' own read of each trace (no second read for
    the plan), and it is the copy that the export plans by itself."""
    from stepscope.plugin_copy import export as export_module
    from stepscope.plugin_copy.export import export_file
    from stepscope.tensorboard.watch import WatchConfig, build_run, signature
    from stepscope.trace.files import load_trace

    source = _trace_copy(tmp_path)
    cfg = WatchConfig(source=tmp_path, logdir=tmp_path / "shadow" / "logdir", staging=tmp_path / "shadow" / "st")
    items = [(f, signature(f.path)) for f in discover(tmp_path).traces]
    (found, _), = items
    want, _ = export_file(tmp_path / "want", found.worker, "7", found.path)  # its own plan: the oracle

    def refused(*a, **k):
        raise AssertionError("a second read of the trace for its copy's plan")

    monkeypatch.setattr(export_module, "plan_edits", refused)
    built = build_run(cfg, "stranger", source, items)
    (copy,) = [p for p in built.path.iterdir() if p.name.endswith(".pt.trace.json.gz")
               or p.name.endswith(".pt.trace.json")]
    assert load_trace(copy) == load_trace(want)


def test_the_tabs_analysis_process_goes_through_the_door(monkeypatch, tmp_path, capsys):
    from stepscope.tensorboard.tab import analyse

    traces = [{"path": str(t.path), "kind": t.kind, "worker": t.worker, "span": t.span, "run": t.run,
               "folder": str(STRANGER)} for t in discover(STRANGER).traces]
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(traces)))
    keeper = Doorkeeper(monkeypatch)
    assert analyse.main([str(STRANGER)]) == 0
    assert len(keeper.through_door("analyse.py")) == 1
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert job["folders"] == [""]
    assert job["measured"]["report"] == stepscope.analyze(STRANGER).to_dict() and job["measured"]["ops_ms"]


def _imports(path: Path) -> set[str]:
    """Every module and name ``path`` imports (``a.b`` and ``a.b.name`` for ``from a.b import name``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def test_only_the_door_imports_the_engine_and_only_the_engine_makes_reports():
    """Statically: report/front.py alone imports report/engine.py, and outside the analysis package only the
    engine imports what turns a trace into a report."""
    modules = {p: _imports(p) for p in PACKAGE.rglob("*.py")}
    engine_users = {p.relative_to(PACKAGE).as_posix() for p, names in modules.items()
                    if any(n == "stepscope.report.engine" or n.startswith("stepscope.report.engine.")
                           for n in names)}
    assert engine_users == {"report/front.py"}
    makers = {p.relative_to(PACKAGE).as_posix(): sorted(n for n in names if n.rsplit(".", 1)[-1] in ENGINE_NAMES
                                                        and n.startswith("stepscope."))
              for p, names in modules.items() if "analysis" not in p.relative_to(PACKAGE).parts[:1]}
    assert {p: n for p, n in makers.items() if n} == {
        "report/engine.py": ["stepscope.analysis.report.evidence_of_file", "stepscope.analysis.report.parse_path",
                             "stepscope.analysis.report.report_of_file", "stepscope.analysis.report.run_report"]}


def test_a_stale_or_partial_report_json_is_not_read(tmp_path):
    """report.json is read only while no trace is newer and its spans are exactly the folder's traces."""
    run = _trace_copy(tmp_path)
    front.write_report(run, stepscope.analyze(run))
    traces = discover(run).traces
    assert read_report(run, traces) is not None
    later = (run / REPORT_FILE).stat().st_mtime_ns + 10**9
    os.utime(traces[0].path, ns=(later, later))
    assert read_report(run, traces) is None  # a trace rewritten after the report
    front.write_report(run, stepscope.analyze(run))
    doc = json.loads((run / REPORT_FILE).read_text())
    doc["spans"][0]["worker"] = "another_rank"
    (run / REPORT_FILE).write_text(json.dumps(doc))
    assert read_report(run, traces) is None  # one rank's report in a folder of other traces


def test_a_job_joined_from_two_folders_is_analysed_once_with_each_folders_own_figures(monkeypatch, tmp_path):
    """Telemetry is decided before any trace is read, from where each trace lies: two ranks of one gloo job,
    each in a folder whose run.json gives its own unprofiled step, are analysed once each (not once with a
    guess and again once the folders are found to be one job), each with its own folder's figures."""
    gloo = sorted((DATA / "ddp_gloo").glob("*.pt.trace.json.gz"))
    for i, (trace, step_ms) in enumerate(zip(gloo, (40.0, 60.0), strict=True)):
        folder = tmp_path / "logs" / f"rank{i}"
        folder.mkdir(parents=True)
        shutil.copy(trace, folder / trace.name)
        (folder / "run.json").write_text(json.dumps({"final": {"telemetry": {"steps": 10, "step_ms": step_ms}}}))
    keeper = Doorkeeper(monkeypatch)
    report = stepscope.analyze(tmp_path / "logs")
    assert len(keeper.through_door("test_one_door.py")) == 2
    assert report.distributed, "the two folders are one job"
    assert sorted(s.metrics.step_ms for s in report.spans) == [40.0, 60.0]


def test_the_door_takes_a_list_of_paths():
    one = [DATA / "eager_bs128", DATA / "host_bound"]
    runs = stepscope.analyze(one)
    assert [name for name, _ in runs.runs] == ["eager_bs128", "host_bound"]
    assert [r.to_dict() for _, r in runs.runs] == [stepscope.analyze(p).to_dict() for p in one]


def test_the_tab_links_each_cycle_to_the_cross_rank_section_of_its_own_spans(tmp_path):
    """The tab numbers cycles by span (9 before 10) and takes each cycle's cross-rank section from the ranks
    the report lists in it, not from the section's position: with spans "9" and "10" the two orders differ."""
    from stepscope.report.measure import measure_path
    from stepscope.tensorboard.tab.views import ranks_view, run_view

    for trace in sorted((DATA / "ddp_gloo").glob("*.pt.trace.json.gz")):
        worker = trace.name.split(".")[0]
        for span in ("9", "10"):
            shutil.copy(trace, tmp_path / f"{worker}.{span}.pt.trace.json.gz")
    m = measure_path(tmp_path)
    assert len(m.report["distributed"]) == 2
    run, ranks = run_view("gloo", m, None), ranks_view("gloo", m)
    for job in ranks["jobs"]:
        spans = {(s["worker"], s["span"]) for s in run["spans"] if s["cycle"] == job["cycle"]}
        assert spans == {(r["worker"], r["span"]) for r in job["ranks"]}
        assert run["cycles"][job["cycle"]]["verdict"] == job["verdict"]
    assert sorted(job["cycle"] for job in ranks["jobs"]) == [0, 1]


# --- the real processes: a trainer run and a stranger's folder under `stepscope tensorboard` ---

def _stepscope_runs(port: int) -> dict:
    try:
        return {r["name"]: r for r in json.loads(loopback_get(f"http://127.0.0.1:{port}/data/plugin/stepscope/runs"))
                ["runs"]}
    except (urllib.error.URLError, ConnectionError, ValueError):
        return {}


def test_stepscope_tensorboard_reads_a_trainer_run_and_analyses_a_strangers_folder_once(tmp_path):
    """A single-process trainer run and a 2-rank gloo one (torchrun, one run folder for both ranks) each end
    with one report.json, the job's, which `stepscope tensorboard` and its tab read: no analysis of theirs."""
    src = tmp_path / "logs"
    ledger = tmp_path / "analyses.log"
    # LeNet on one OpenMP thread: what is counted here is analyses, whatever the model (ResNet-8's profiled
    # steps cost seconds more of CPU)
    r = run_train([*FAST, "--arch", "lenet", *PROFILE_3_STEPS, "--steps", "4", "--logdir", str(src), "--run-name",
                   "trained"], env={engine.ANALYSIS_LOG: str(ledger), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = run_torchrun([str(TRAIN), *DDP_FAST, *PROFILE_3_STEPS, "--steps", "4", "--logdir", str(src),
                      "--run-name", "ddp"], env={engine.ANALYSIS_LOG: str(ledger)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    trained, ddp = src / "trained", src / "ddp"
    # the trainer's own analyses: each cycle's trace once, in its rank's handler; the end of run reports them
    # again with the whole run's telemetry from their evidence (rank 0 gathers every rank's), reading none of
    # them again; what follows must add none
    assert len(discover(ddp).traces) == 2
    read = ledger.read_text().splitlines()
    assert len(read) == len(set(read)) == len(discover(trained).traces) + 2, read
    mine = read_report(trained, discover(trained).traces)
    assert mine is not None
    own = read_report(ddp, discover(ddp).traces)  # the job's report: both ranks and their cross-rank section
    assert own is not None and own["distributed"] and sorted(s["rank"] for s in own["spans"]) == [0, 1]
    # and what they wrote is the report on those traces read again now, with the run's own telemetry
    for folder, written in ((trained, mine), (ddp, own)):
        assert {k: v for k, v in written.items() if k not in ("traced_ms", "ops_ms")} == \
            stepscope.analyze(folder).to_dict()
    ledger.unlink()
    assert diagnosed(find_runs(src)["ddp"]) is not None  # what a plain `tensorboard`'s tab reads, not analyses
    cli = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(ddp), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["verdict"] == own["verdict"]
    shutil.copytree(STRANGER, src / "stranger")
    if ledger.exists():
        ledger.unlink()

    port = free_port()
    out = tmp_path / "stepscope-tensorboard.log"
    with open(out, "w") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "stepscope_here.py"), "tensorboard",
                                 "--logdir", str(src), "--port", str(port), "--poll", "1"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
                                env={**os.environ, engine.ANALYSIS_LOG: str(ledger)})
    try:
        deadline = time.monotonic() + 240
        runs = {}
        while time.monotonic() < deadline:
            runs = _stepscope_runs(port)
            if {"trained", "ddp", "stranger"} <= set(runs) and all(runs[n]["state"] == "ready"
                                                                  for n in ("trained", "ddp", "stranger")):
                break
            assert proc.poll() is None, out.read_text()[-3000:]
            time.sleep(1)
        else:
            raise TimeoutError(f"runs {runs}: {out.read_text()[-3000:]}")
        for name in ("trained", "ddp", "stranger"):  # each whole report, as the tab's page asks for it
            view = json.loads(loopback_get(f"http://127.0.0.1:{port}/data/plugin/stepscope/run?run={name}"))
            assert view["state"] == "ready" and view["verdict"] == runs[name]["verdict"]
        assert runs["trained"]["verdict"] == json.loads((trained / REPORT_FILE).read_text())["verdict"]
        assert runs["ddp"]["verdict"] == own["verdict"]
        assert runs["stranger"]["verdict"] == stepscope.analyze(STRANGER).verdict
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    analysed = [Path(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
    # the watcher analysed the stranger's trace, once; the trainer's run and both published runs were read
    assert analysed == [t.path for t in discover(src / "stranger").traces], analysed

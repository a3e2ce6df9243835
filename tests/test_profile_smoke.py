"""A profiled run (4 timed steps, then a warm-up and 2 profiled steps) writes traces, events and run.json, opens
in the real torch-tb-profiler plugin, and `stepscope analyze` reads it with its telemetry. One trainer run serves
the whole module (the session's shared EXPORTS_RUN, which tests/test_cpu_noise.py reads too)."""

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from stepscope.cli.analyze import main as analyze_main
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace.files import find_plugin_traces, find_raw_traces, load_trace
from trainrun import EXPORTS_RUN, REPO, run_json, shared_run

ANALYZE = REPO / "scripts" / "analyze.py"

RUN = EXPORTS_RUN[0]
CPU_VIEWS = {"Overview", "Operator", "Trace", "Memory", "Module"}


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    run, r = shared_run(tmp_path_factory, *EXPORTS_RUN)
    assert r.returncode == 0, r.stderr[-3000:]
    return run.parent, run, r


def analyze_here(capsys, *args) -> tuple[int, str, str]:
    """scripts/analyze.py's `main` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    rc = analyze_main([*map(str, args)], prog="analyze.py")
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_files_of_a_profiled_run(profiled_run):
    _, run, r = profiled_run
    adapted = find_plugin_traces(run)
    raw = find_raw_traces(run)
    assert len(adapted) == 1 and len(raw) == 1
    assert adapted[0].worker == raw[0].worker and adapted[0].span == raw[0].span
    assert "_rank0" in adapted[0].worker
    trace = load_trace(raw[0].path)
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == 2  # the 2 active steps
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"data", "forward", "backward", "optimizer"} <= names
    assert list(run.glob("events.out.tfevents.*"))
    assert not list(run.glob(".tmp-*")) and not list(run.rglob("*.partial"))
    d = run_json(run)
    assert d["status"] == "completed" and d["final"]["steps"] == 8
    assert d["traces"] == [adapted[0].path.name]
    assert d["config"]["profile"]["enabled"] is True
    assert d["git_sha"] is None or len(d["git_sha"]) == 40


def test_console_output_of_a_profiled_run(profiled_run):
    logdir, run, r = profiled_run
    # the top-ops table, from stepscope's own parse of the trace (not key_averages(), which holds every event)
    top = r.stdout[r.stdout.index("top ops by self CPU time"):].splitlines()
    assert top[1].split() == ["name", "ms/step", "calls/step", "%"] and top[2].lstrip().startswith("aten::")
    assert f"stepscope tensorboard --logdir {logdir}" in r.stdout  # as the README says: the tab and the diagnosis
    assert (run / "diagnosis.md").read_text().strip()
    diagnosis = run_json(run)["diagnosis"]
    assert diagnosis["verdict"] in r.stdout
    (span,) = diagnosis["spans"]  # per-span verdict and metrics, so tools need not parse the traces again
    assert span["verdict"] == diagnosis["verdict"] and span["metrics"]["step_ms"] > 0


def test_exports(profiled_run):
    _, run, _ = profiled_run
    (chrome,) = run.glob("*.chrome_trace.json")
    assert json.loads(chrome.read_text())["traceEvents"]
    (svg,) = run.glob("*.flamegraph.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root.findall(".//{http://www.w3.org/2000/svg}rect")) > 10
    (html,) = run.glob("*.memory_timeline.html")
    # export_memory_timeline's HTML embeds the plot as a base64 PNG
    assert "<img src='data:image/png;base64," in html.read_text()


def test_run_opens_in_the_plugin(profiled_run):
    logdir, _, _ = profiled_run
    with TensorBoard(logdir) as tb:
        tb.wait_for_runs([RUN])
        views = set(tb.profiler("views", run=RUN))
        assert CPU_VIEWS <= views and "Kernel" not in views  # no GPU here
        worker, span = tb.first_worker_span(RUN)
        ov = tb.profiler("overview", run=RUN, worker=worker, span=span)
        assert len(ov["steps"]["rows"]) == 2
        mem = tb.profiler("memory", run=RUN, worker=worker, span=span)
        assert mem["rows"], mem  # the memory events of the profiled steps
        tree = tb.profiler("module", run=RUN, worker=worker, span=span)
        assert tree
        plugins = tb.get("/data/plugins_listing")
        assert {"scalars", "text", "pytorch_profiler"} <= {k for k, v in plugins.items() if v.get("enabled")}


def test_analyze_reads_a_stepscope_runs_unprofiled_timing(profiled_run, tmp_path, capsys):
    """`stepscope analyze logs/<run>` on a trainer run takes its figures from run.json's telemetry, as the
    run's own diagnosis does; the same traces without run.json are read as anyone's (the overhead model)."""
    _, run, _ = profiled_run
    record = run_json(run)
    telemetry = record["final"]["telemetry"]
    assert telemetry["steps"] >= 3 and telemetry["step_ms"] > 0
    a = subprocess.run([sys.executable, str(ANALYZE), str(run), "--json"], capture_output=True, text=True,
                       timeout=120)
    assert a.returncode == 0, a.stderr
    assert f"mean of {telemetry['steps']} timed steps" in a.stderr
    (span,) = json.loads(a.stdout)["spans"]
    (diagnosed,) = record["diagnosis"]["spans"]
    assert span["basis"] == "telemetry" and span["metrics"]["step_ms"] == diagnosed["metrics"]["step_ms"]
    assert span["metrics"]["step_ms"] == pytest.approx(telemetry["step_ms"], rel=1e-3)
    assert span["verdict"] == diagnosed["verdict"]

    stranger = tmp_path / "stranger"
    shutil.copytree(run / "raw", stranger)
    rc, out, err = analyze_here(capsys, stranger, "--json")  # the command itself ran above: here its main
    assert rc == 0, err
    assert "unprofiled figures from" not in err
    (span,) = json.loads(out)["spans"]
    assert span["basis"] == "overhead_model"

"""What the README promises is what the code does: the end-of-run table's size, how a trace recorded without
a schedule is read, and the remedy given for a trace with nothing to read steps from.

    pytest tests/test_docs_match.py -q
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from stepscope.analysis import render_top
from stepscope.analysis.metrics import TOP_N
from stepscope.report.front import analyze

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DATA = REPO / "tests" / "data"


def test_the_end_of_run_table_has_as_many_rows_as_the_readme_says():
    (promised,) = re.findall(r"prints the top (\d+) kernels", README)
    report = analyze(DATA / "eager_bs128")  # a ResNet step: more distinct kernels than any table holds
    (span,) = report.spans
    lines = render_top(report).splitlines()
    rows = lines[2:]  # a title, a header, then one line per kernel
    assert len(rows) == int(promised) == TOP_N
    assert len(span.to_dict()["top"]) == int(promised)  # and --json's "top" holds the same rows


def test_a_trace_recorded_without_a_schedule_is_read_as_the_readme_says(tmp_path):
    """prof.export_chrome_trace of a profile without a schedule has no ProfilerStep# events: without optimizer
    steps either, the README says the whole recorded window is one step, with a note."""
    assert "has its steps end where each `optimizer.step()`\nends, or is one step without any" in README
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5, "pid": 1, "tid": 1}]}))
    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(trace)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "note: the trace has neither ProfilerStep# nor Optimizer.step# events: the whole recorded window is " \
           "read as one step" in p.stdout


def test_a_chrome_trace_with_nothing_torch_recorded_is_refused_with_the_remedy(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 1, "dur": 5, "pid": 1, "tid": 1}]}))
    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(trace)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert "no ProfilerStep#, Optimizer.step# or torch operator events" in line
    assert "schedule=torch.profiler.schedule(" in line and "prof.step()" in line


DOCS = {p.relative_to(REPO).as_posix(): p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}


def test_extras_install_from_the_clone():
    """stepscope is not on PyPI: no doc sends anyone to ``pip install stepscope[...]``; the README says how
    to install the extras from the clone."""
    assert not [name for name, text in DOCS.items() if re.search(r"stepscope\[\w+\]", text)]
    assert 'pip install -e ".[integrations]"' in README and 'pip install -e ".[cluster]"' in README


def test_the_readme_says_the_profiler_tab_needs_the_internet_under_plain_tensorboard():
    text = " ".join(README.split())
    assert "plain `tensorboard` needs internet access for that tab's charts; see" in text
    assert "docs/tensorboard.md" in text


def test_the_testing_doc_states_no_counts_a_run_cannot_hold():
    """Counts of passed and skipped tests change with every test added: docs/testing.md states none."""
    assert not re.search(r"\d+ passed|\d+\s+skipped", " ".join(DOCS["docs/testing.md"].split()))



def test_the_tab_picture_shows_what_the_analysis_prints_today():
    """docs/tab.png is made by scripts/tab_screenshot.py, which records beside it what the page showed; those
    figures are what the analysis gives for the same trace now (when they part, run the script again)."""
    shown = json.loads((REPO / "docs" / "tab.png.json").read_text())
    report = analyze(REPO / shown["run"]).to_dict()
    (job,) = report["distributed"]
    assert shown["verdict"] == report["verdict"]
    profiled = statistics.median(s["metrics"]["profiled"]["step_ms"] for s in report["spans"])  # median rank
    assert shown["step_profiled"] == f"{profiled:.2f} ms"
    assert shown["step_unprofiled"] == f"{statistics.median(s['metrics']['step_ms'] for s in report['spans']):.2f} ms"
    assert shown["ranks_title"].startswith(f"cycle {job['span_index'] - 1}: {job['world_size']} ranks, median step "
                                           f"{job['median_step_ms']:.2f} ms")
    assert (REPO / "docs" / "tab.png").is_file()

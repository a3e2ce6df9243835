"""The analysis of every run in tests/data/ is exactly the JSON recorded in tests/data/golden/.

The golden files were written by the analysis as it was before traces were parsed streaming (every file
loaded whole with json and parsed by events.parse_trace); this test holds the streamed parse
(stream_parse.py) to the same output, to the last rounded digit. Three ways in are checked: ``analyze_run``
(streaming from the file), the analyze command's loader (discover.py + loaded.py) and ``parse_trace`` on an
in-memory dict. Regenerate after an intended change of the analysis with

    python -c "import sys; sys.path[:0] = ['tests']; import test_analysis_golden as t; t.write()"

    python -m pytest -q tests/test_analysis_golden.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stepscope.profiler.analysis import analyze_run, analyze_trace, json_out
from stepscope.profiler.analysis.cross_rank import cross_rank
from stepscope.profiler.analysis.report import RunReport, run_verdict
from stepscope.profiler.loaded import load_found, report_of
from stepscope.profiler.trace.discover import discover
from stepscope.profiler.trace.files import find_traces, load_trace

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"
RUNS = sorted(p.stem for p in GOLDEN.glob("*.json"))


def _text(d: dict) -> str:
    """The golden files' text: sorted keys, indent 1, non-finite numbers as null."""
    return json_out.dumps(d, indent=1, sort_keys=True)


def run_dirs() -> list[Path]:
    """The folders of tests/data that are one run each (the suites are folders of runs, with their own tests)."""
    return sorted(p for p in DATA.iterdir() if p.is_dir() and find_traces(p))


def write() -> None:
    for run in run_dirs():
        (GOLDEN / f"{run.name}.json").write_text(_text(analyze_run(run).to_dict()))


def test_every_run_has_a_golden_file():
    assert [p.name for p in run_dirs()] == RUNS


@pytest.mark.parametrize("run", RUNS)
def test_streaming_analysis_matches_golden(run):
    assert _text(analyze_run(DATA / run).to_dict()) == (GOLDEN / f"{run}.json").read_text()


@pytest.mark.parametrize("run", RUNS)
def test_analyze_command_loader_matches_golden(run):
    loaded, _ = load_found(discover(DATA / run).traces)
    assert all(item.parsed is not None for item in loaded)  # every trace here is streamed
    assert _text(report_of(loaded, str(DATA / run)).to_dict()) == (GOLDEN / f"{run}.json").read_text()


@pytest.mark.parametrize("run", RUNS)
def test_in_memory_analysis_matches_golden(run):
    spans = [analyze_trace(load_trace(tf.path), tf.worker, tf.span) for tf in find_traces(DATA / run)]
    dist = tuple(cross_rank(spans))
    report = RunReport(str(DATA / run), run_verdict(spans, dist), tuple(spans), dist)
    assert _text(report.to_dict()) == (GOLDEN / f"{run}.json").read_text()

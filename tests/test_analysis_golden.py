"""The analysis of every run in tests/data/ is exactly the JSON recorded in tests/data/golden/.

The golden files were written by the analysis as it was before traces were parsed streaming (every file
loaded whole with json and parsed event by event, the parse that tests/reference/dict_parse.py keeps); this
test holds the front door (``stepscope.report.front.analyze``: discovery, the streamed parse, the analysis)
to the same output, to the last rounded digit. Regenerate after an intended change of the analysis with

    python -c "import sys; sys.path[:0] = ['tests']; import test_analysis_golden as t; t.write()"

    python -m pytest -q tests/test_analysis_golden.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stepscope.analysis import json_out
from stepscope.report.front import analyze
from stepscope.trace.discover import discover

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"
RUNS = sorted(p.stem for p in GOLDEN.glob("*.json"))


def _text(d: dict) -> str:
    """The golden files' text: sorted keys, indent 1, non-finite numbers as null."""
    return json_out.dumps(d, indent=1, sort_keys=True)


def run_dirs() -> list[Path]:
    """The folders of tests/data that are one run each (the suites are folders of runs, with their own tests)."""
    return sorted(p for p in DATA.iterdir() if p.is_dir() and any(t.run == "" for t in discover(p).traces))


def write() -> None:
    for run in run_dirs():
        (GOLDEN / f"{run.name}.json").write_text(_text(analyze(run).to_dict()))


def test_every_run_has_a_golden_file():
    assert [p.name for p in run_dirs()] == RUNS


@pytest.mark.parametrize("run", RUNS)
def test_analysis_matches_golden(run):
    assert _text(analyze(DATA / run).to_dict()) == (GOLDEN / f"{run}.json").read_text()

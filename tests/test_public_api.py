"""`import stepscope` is the product: its public names, torch-free on import, each one line into the engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_import_stepscope_is_torch_free_and_names_its_api():
    r = run("import sys, stepscope\n"
            "print('torch' in sys.modules, sorted(n for n in stepscope.__all__ if n != '__version__'))\n"
            "print(stepscope.__version__)")
    assert r.returncode == 0, r.stderr
    first, version = r.stdout.splitlines()
    assert first.startswith("False ")
    for name in ("analyze", "trace_handler", "compare"):
        assert name in first
    assert version[0].isdigit()


def test_analyze_is_the_cli_report():
    """stepscope.analyze(path) gives the report `stepscope analyze PATH --json` prints."""
    r = run("import json, stepscope\n"
            "from stepscope.analysis import json_out\n"
            "print(json_out.dumps(stepscope.analyze('tests/data/eager_bs128').to_dict(), indent=1))")
    assert r.returncode == 0, r.stderr
    cli = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", "tests/data/eager_bs128", "--json"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(r.stdout) == json.loads(cli.stdout)
    assert json.loads(r.stdout)["verdict"]


def test_report_is_the_one_report_type():
    """stepscope.Report is the class analyze returns for one job, under that one name."""
    r = run("import stepscope, stepscope.analysis, stepscope.report\n"
            "report = stepscope.analyze('tests/data/eager_bs128')\n"
            "print(type(report) is stepscope.Report, stepscope.Report.__name__,\n"
            "      stepscope.report.Report is stepscope.Report, *sorted(n for n in stepscope.analysis.__all__\n"
            "                                                            if n.endswith('Report')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "Report", "True", "CrossRankReport", "Report", "SpanReport"]


def test_an_unknown_name_is_an_attribute_error():
    r = run("import stepscope\ntry:\n    stepscope.no_such_thing\nexcept AttributeError as e:\n    print(e)")
    assert r.returncode == 0 and "no_such_thing" in r.stdout

"""stepscope's own outputs are never inputs: an export written inside the analysed run is not counted again.

    pytest tests/test_own_outputs.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from stepscope.cli.analyze import main as analyze_main
from stepscope.trace.discover import discover

DATA = Path(__file__).parent / "data"


def analyze(capsys, *args) -> tuple[int, str, str]:
    rc = analyze_main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def handler_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(DATA / "slow_dataset", run)
    return run


def trainer_run(tmp_path: Path) -> Path:
    """A stepscope run (originals under raw/), made by exporting a plain trace."""
    src = handler_run(tmp_path / "src")
    run = tmp_path / "run"
    assert analyze_main([str(src), "--export-tensorboard", str(run)]) == 0
    (run / ".stepscope-export").unlink(missing_ok=True)  # as the trainer writes it: a run, not an export
    return run


@pytest.mark.parametrize("make, kind", [(handler_run, "tensorboard_trace_handler"), (trainer_run, "stepscope")])
def test_an_export_inside_the_run_is_not_counted_again(tmp_path, capsys, make, kind):
    run = make(tmp_path)
    capsys.readouterr()
    rc, before, err = analyze(capsys, run, "--json")
    assert rc == 0 and err.splitlines()[0] == f"found 1 trace (1 {kind})"
    rc, _, err = analyze(capsys, run, "--export-tensorboard", run / "exp")
    assert rc == 0, err
    rc, after, err = analyze(capsys, run, "--json")
    assert rc == 0 and err.splitlines()[0] == f"found 1 trace (1 {kind})"
    assert json.loads(after) == json.loads(before)
    assert [t.path for t in discover(run).traces] == [t.path for t in discover(run).traces if "exp" not in t.path.parts]


def test_the_export_itself_is_still_a_run_to_analyse(tmp_path, capsys):
    run = handler_run(tmp_path)
    rc, _, err = analyze(capsys, run, "--export-tensorboard", run / "exp")
    assert rc == 0, err
    rc, out, err = analyze(capsys, run / "exp", "--json")
    assert rc == 0 and err.splitlines()[0] == "found 1 trace (1 stepscope)"
    assert (run / "exp" / ".stepscope-export").is_file()


def test_an_export_of_traces_from_elsewhere_is_a_run_of_the_folder_holding_it(tmp_path, capsys):
    src = handler_run(tmp_path / "elsewhere")
    logs = tmp_path / "logs"
    rc, _, err = analyze(capsys, src, "--export-tensorboard", logs / "fixed")
    assert rc == 0, err
    rc, _, err = analyze(capsys, logs)
    assert rc == 0 and err.splitlines()[0] == "found 1 trace (1 stepscope)"
    shutil.rmtree(src)  # originals gone: the export is the only copy, under any root
    assert [t.kind for t in discover(tmp_path).traces] == ["stepscope"]

"""`stepscope analyze --export-tensorboard`: one read of each trace feeds both its analysis and its plugin
copy's plan (plugin_copy/one_pass.py, through `stepscope.analyze(..., copies=...)`), except a trace the
export reads in two halves at once. The oracle is the two reads the command made before: the analysis' own parse
(`parse_trace_file`) and the copy's own plan (`plan_edits`), whose report and files must come out the same."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
import stepscope
from stepscope.cli.analyze import main as analyze_main
from stepscope.plugin_copy import export as export_module
from stepscope.plugin_copy.export import export_tensorboard
from stepscope.report import engine
from stepscope.trace import workers as policy

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


def test_a_trace_read_in_halves_is_read_for_each_apart(tmp_path, monkeypatch, capsys):
    """A trace the export reads and writes in two halves at once (large, and helpers allowed) is parsed by
    the analysis in its ranges and planned by the copy in its halves, as measured cheaper than one pass:
    the same files as the one pass of a small trace's."""
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)  # these small traces count as large
    planned = []
    real = export_module.plan_edits

    def counted(path, workers=None):
        planned.append(Path(path))
        return real(path, workers)

    monkeypatch.setattr(export_module, "plan_edits", counted)
    got = tmp_path / "got"
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(got)]) == 0
    capsys.readouterr()
    assert planned == list((DATA / "eager_bs32").glob("*.pt.trace.json.gz"))
    monkeypatch.setattr(policy, "SPLIT_FROM", 64 << 20)
    want = tmp_path / "want"
    assert analyze_main([str(DATA / "eager_bs32"), "--json", "--export-tensorboard", str(want)]) == 0
    assert len(planned) == 1  # the one pass planned it this time
    assert _files(got).keys() == _files(want).keys()
    assert [v for k, v in sorted(_files(got).items()) if not k.endswith("export")] == \
        [v for k, v in sorted(_files(want).items()) if not k.endswith("export")]


def test_a_trace_the_analysis_refuses_is_still_said_in_the_analysis_words(tmp_path, capsys):
    """The one read leaves no parse where the analysis has something to say: the command's error is the
    one the analysis' own read gives, and nothing is exported."""
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

"""The plugin's check of a large copy, started as soon as the copy is planned (plugin_check.EarlyCheck): its
excerpt is made from the original and the plan, reading only the pieces that hold it (stream_write.
excerpt_events, from the pieces the read in byte ranges recorded: TraceStream.piece_at), and must be the
excerpt the writer writes, byte for byte; `stepscope analyze --export-tensorboard` takes its answer instead of
checking the written copy, fails on its problem as on the written copy's, checks the written copy where the
child died, and leaves no child behind where the analysis fails."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import msgspec
import pytest
from stepscope.cli.analyze import main as analyze_main
from stepscope.plugin_copy import export as export_module
from stepscope.plugin_copy import plugin_check
from stepscope.plugin_copy.excerpt import write_excerpt
from stepscope.plugin_copy.plugin_check import EarlyCheck
from stepscope.plugin_copy.stream_plan import plan_edits
from stepscope.plugin_copy.stream_write import excerpt_events, excerpt_pieces, write_adapted_stream
from stepscope.report import engine
from stepscope.trace import workers as policy
from stepscope.trace.errors import TraceError
from stepscope.trace.jsonstream import TraceStream
from stepscope.trace.workers import Workers

DATA = Path(__file__).resolve().parent / "data"
RUNS = ["eager_bs32", "nccl_ddp", "holdout/vit_tiny_bs256"]
_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def _plain(run: str, tmp_path: Path) -> Path:
    """The run's first trace, uncompressed (the early check reads pieces of a plain file only)."""
    src = sorted((DATA / run).glob("*.pt.trace.json*"))[0]
    out = tmp_path / run.replace("/", "_") / src.name.removesuffix(".gz")
    out.parent.mkdir(parents=True)
    out.write_bytes(gzip.decompress(src.read_bytes()) if src.name.endswith(".gz") else src.read_bytes())
    return out


def _pieces(path: Path, block: int) -> list[tuple[int, int]]:
    """(where its first entry lies, its index) of each piece of a read in ``block``-byte blocks."""
    out, n = [], 0
    with TraceStream(path, block=block) as ts:
        for events in ts.decode_events(_RAW.decode):
            out.append((ts.piece_at, n))
            n += len(events)
    return out


def test_a_range_from_where_a_piece_lies_reads_from_that_pieces_first_entry(tmp_path):
    path = _plain("eager_bs32", tmp_path)
    pieces = _pieces(path, 1 << 14)
    assert len(pieces) > 50
    entries = json.loads(path.read_bytes())["traceEvents"]
    for (a, first), (b, stop) in zip(pieces[1:], [*pieces[2:], (None, len(entries))]):
        with TraceStream(path, span=(a, b)) as ts:
            got = [json.loads(bytes(e)) for events in ts.decode_events(_RAW.decode) for e in events]
        assert got == entries[first:stop]


@pytest.mark.parametrize("run", RUNS)
def test_the_excerpt_made_from_the_plan_is_the_writers(run, tmp_path, monkeypatch):
    """Made from the pieces that hold its events only (a trace's threads lie apart, each in time order: the
    excerpt is the start of each), with the plan's pieces and with many small ones."""
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)  # read in halves, recording its pieces
    path = _plain(run, tmp_path)
    plan, header = plan_edits(path, Workers.local())
    assert plan.pieces and len(plan.ranges) == 2
    write_adapted_stream(path, tmp_path / "copy.json", plan, header, (tmp_path / "excerpt.json", 1),
                         Workers.local())
    written = (tmp_path / "excerpt.json").read_bytes()
    for pieces in (plan.pieces, _pieces(path, 1 << 14)):
        plan.pieces = pieces
        write_excerpt(tmp_path / "early.json", excerpt_events(path, plan, 1), header)
        assert (tmp_path / "early.json").read_bytes() == written
    read = sum((path.stat().st_size if b is None else b) - a for (a, b), _ in excerpt_pieces(plan, 1))
    assert read < 0.75 * path.stat().st_size  # with small pieces: the pieces of the first step of two or three


@pytest.fixture
def early(tmp_path, monkeypatch):
    """A run whose one trace the command reads in halves, with a copy large enough to be checked early by
    its excerpt of one step; the early checks started, as they return; and the export made the other way
    (the oracle: the excerpt written with the copy and checked)."""
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(plugin_check, "WHOLE_UP_TO", 0)
    monkeypatch.setattr(plugin_check, "EXCERPT_STEPS", 1)
    monkeypatch.setattr(plugin_check, "EARLY_SHARE", 1.0)
    path = _plain("eager_bs32", tmp_path)
    want = tmp_path / "want"
    export_module.export_tensorboard(path.parent, want, workers=Workers.local())
    started: list = []
    real = EarlyCheck.start.__func__

    def start(cls, *a):
        started.append(real(cls, *a))
        return started[-1]

    monkeypatch.setattr(EarlyCheck, "start", classmethod(start))
    return path.parent, want, started


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith("export")}


def test_the_export_takes_the_early_checks_answer(early, tmp_path, monkeypatch):
    run, want, started = early
    monkeypatch.setattr(export_module, "plugin_problem", lambda *a, **k: pytest.fail("the copy checked again"))
    assert analyze_main([str(run), "--json", "--export-tensorboard", str(tmp_path / "got")]) == 0
    assert len(started) == 1 and started[0] is not None
    assert not started[0]._job.process.is_alive()
    assert _files(tmp_path / "got") == _files(want)


def test_a_problem_the_early_check_finds_fails_the_export(early, tmp_path, monkeypatch, capsys):
    run, _, started = early
    monkeypatch.setattr(plugin_check, "plugin_problem", lambda path: "KeyError: 'Overview'")  # in the child
    assert analyze_main([str(run), "--json", "--export-tensorboard", str(tmp_path / "got")]) == 2
    assert started[0] is not None
    err = capsys.readouterr().err
    assert "torch-tb-profiler 0.4.3 cannot load the exported copy (KeyError: 'Overview')" in err
    assert err.count("\n") == 1 and not (tmp_path / "got").exists()


def test_where_the_early_checks_child_dies_the_written_copy_is_checked(early, tmp_path, monkeypatch):
    run, want, started = early
    monkeypatch.setattr(plugin_check, "_check_planned", lambda *a: os._exit(3))
    checked = []
    real = export_module.plugin_problem
    monkeypatch.setattr(export_module, "plugin_problem", lambda *a, **k: checked.append(a) or real(*a, **k))
    assert analyze_main([str(run), "--json", "--export-tensorboard", str(tmp_path / "got")]) == 0
    assert started[0] is not None and len(checked) == 1
    assert _files(tmp_path / "got") == _files(want)


def test_an_analysis_that_fails_leaves_no_check_running(early, tmp_path, monkeypatch, capsys):
    run, _, started = early

    def fails(*a, **k):
        raise TraceError("the evidence failed")

    monkeypatch.setattr(engine, "evidence_of_file", fails)
    assert analyze_main([str(run), "--json", "--export-tensorboard", str(tmp_path / "got")]) == 2
    assert "the evidence failed" in capsys.readouterr().err
    assert started[0] is not None and not started[0]._job.process.is_alive()
    assert started[0]._job.process.exitcode is not None  # reaped


def test_no_early_check_for_a_gzipped_trace_or_one_the_plugin_loads_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    monkeypatch.setattr(plugin_check, "EXCERPT_STEPS", 1)
    path = _plain("eager_bs32", tmp_path)
    plan, header = plan_edits(path, Workers.local())
    assert EarlyCheck.start(path, plan, header) is None  # 4 MB: loaded whole
    monkeypatch.setattr(plugin_check, "WHOLE_UP_TO", 0)
    gz = tmp_path / (path.name + ".gz")
    shutil.copyfile(sorted((DATA / "eager_bs32").glob("*.json.gz"))[0], gz)
    assert EarlyCheck.start(gz, plan, header) is None
    monkeypatch.setattr(plugin_check, "EARLY_SHARE", 0.01)  # its excerpt spans more of the file than this
    assert EarlyCheck.start(path, plan, header) is None

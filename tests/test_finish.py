"""The end of a run when a peer is stopped mid-cycle: rank 0 reads each original once, follows one that was
gzipped while it looked, and writes run.json even when a trace cannot be analysed.

    python -m pytest -q tests/test_finish.py      # a few seconds; no torch run

Under torchrun a stop signal reaches every rank at once and nobody waits at the barrier, so rank 0 may list a
peer's plain original a moment before that peer replaces it with its .gz copy (whole first, then the plain
file goes). The committed real trace stands in for the peer's.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import stepscope.demo.finish as finish
from stepscope.analysis.report import parse_path
from stepscope.analysis.stream_parse import Unreadable
from stepscope.demo.run_record import RunRecord
from stepscope.trace.discover import discover
from stepscope.trace.errors import TraceError

DATA = Path(__file__).resolve().parent / "data"
TRACE_GZ = next((DATA / "cpu_resnet").glob("*.pt.trace.json.gz"))


def peer_original(run: Path, worker: str, plain: bool, gz: bool) -> Path:
    span = run / "raw" / "1700000000000000001"
    span.mkdir(parents=True, exist_ok=True)
    if gz:
        shutil.copy(TRACE_GZ, span / f"{worker}.trace.json.gz")
    if plain:
        (span / f"{worker}.trace.json").write_bytes(gzip.decompress(TRACE_GZ.read_bytes()))
    return span / f"{worker}.trace.json"


def test_a_worker_caught_between_its_plain_and_gz_original_is_listed_once_as_the_gz(tmp_path):
    run = tmp_path / "r"
    peer_original(run, "host_1_rank0", plain=False, gz=True)
    peer_original(run, "host_2_rank1", plain=True, gz=True)  # mid-gzip: both exist
    found = discover(run)
    assert [(t.worker, t.path.name) for t in found.traces] == [
        ("host_1_rank0", "host_1_rank0.trace.json.gz"), ("host_2_rank1", "host_2_rank1.trace.json.gz")]


def test_a_plain_original_gzipped_after_it_was_listed_is_read_from_its_gz_copy(tmp_path):
    plain = peer_original(tmp_path / "r", "host_2_rank1", plain=True, gz=False)
    listed = discover(tmp_path / "r").traces[0].path
    assert listed == plain
    plain.with_name(plain.name + ".gz").write_bytes(TRACE_GZ.read_bytes())  # the peer gzips ...
    plain.unlink()  # ... then removes the plain file
    parsed = parse_path(listed, "host_2_rank1", "1700000000000000001")
    assert not isinstance(parsed, TraceError), parsed
    assert parsed.steps  # the real trace's ProfilerSteps, read from the .gz copy


def test_a_plain_original_that_is_simply_gone_is_still_an_error(tmp_path):
    plain = peer_original(tmp_path / "r", "host_2_rank1", plain=True, gz=False)
    plain.unlink()
    parsed = parse_path(plain, "host_2_rank1", "1700000000000000001")
    assert isinstance(parsed, Unreadable) and "No such file" in str(parsed)


class Stop:
    signal_name = "SIGINT"

    def explains(self, e):
        return False

    def exit_code(self):
        return 130

    def hold(self):
        pass


@pytest.mark.parametrize("status", ["interrupted", "completed"])
def test_run_json_is_written_when_the_diagnosis_meets_a_bad_trace(tmp_path, monkeypatch, capsys, status):
    run = tmp_path / "r"
    run.mkdir()

    def unreadable(*a, **k):
        raise Unreadable(f"{run}/raw/1/peer.trace.json: unreadable trace (FileNotFoundError)")

    monkeypatch.setattr(finish, "diagnose_run", unreadable)
    record = RunRecord(config={}, environment={}, git_sha=None, world_size=2, global_batch_size=8,
                       distributed={}, step_kind="eager", run_dir=str(run))
    record.write(run)
    progress = SimpleNamespace(steps=3, train_loss=1.5, eval_accuracy=None, history=[(1, 2.0), (3, 1.5)])
    thr = SimpleNamespace(images_per_s=None, mean_ms=None, median_ms=None, steps=0, all_ms=[],
                          telemetry=lambda: {}, contention=lambda: None)
    parts = finish.RunParts(env=SimpleNamespace(is_main=True), group=SimpleNamespace(gather=lambda obj: [obj]),
                            stop=Stop(), log=SimpleNamespace(close=lambda: None),
                            handler=SimpleNamespace(cycles=1, memo=None))
    code = finish.finish_run(status, progress, thr, record, parts)
    d = json.loads((run / "run.json").read_text())
    assert (d["status"], d.get("signal"), "diagnosis" in d) == (
        status, "SIGINT" if status == "interrupted" else None, False)
    assert code == (130 if status == "interrupted" else 0)
    assert "stepscope: no diagnosis: " in capsys.readouterr().err
    assert not (run / "diagnosis.md").exists()

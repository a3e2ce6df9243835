"""engine.Memo: a trace analysed once is reported again with other telemetry from its evidence, without being
read, and that report is the one a fresh read of the trace gives (the oracle: `stepscope.analyze` without a
memo). The trainer's end of run relies on it to analyse each of its traces once."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
from pathlib import Path

import pytest
import stepscope
from stepscope.report import engine
from stepscope.report.front import Memo

DATA = Path(__file__).resolve().parent / "data"

# (run folder, the telemetry of the first analysis, the telemetry of the second): the overhead model against
# measured steps, a memory trace with the allocator's counters, a step the profiled one contradicts (the load
# changed), the ranks of a job (their names per rank, the cross-rank section), a pageable copy left untimed
CASES = [
    ("eager_bs32", None, {"steps": 50, "step_ms": 30.0, "data_ms": 0.2}),
    ("holdout/vit_tiny_bs256", {"steps": 50, "step_ms": 80.0},
     {"steps": 50, "step_ms": 95.0, "mem_peak_allocated_mib": 4200.0, "mem_alloc_retries": 2.0,
      "mem_creep_mib_per_step": 3.0}),
    ("eager_bs128", {"steps": 50, "step_ms": 10.0}, {"steps": 50, "step_ms": 500.0, "data_ms": 1.0}),
    ("ddp_gloo", None, {"steps": 20, "step_ms": 60.0}),
    ("holdout/vit_pageable", {"steps": 40, "step_ms": 50.0, "copy_ms": 3.0}, {"steps": 40, "step_ms": 50.0}),
]


def _reads(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def _same(a, b) -> None:
    assert a.to_dict() == b.to_dict()
    assert (a.traced_ms, a.ops_ms) == (b.traced_ms, b.ops_ms)


@pytest.mark.parametrize("run,first,second", CASES, ids=[c[0] for c in CASES])
def test_a_trace_is_reported_again_from_its_evidence_as_a_fresh_read_reports_it(run, first, second, tmp_path,
                                                                                 monkeypatch):
    ledger = tmp_path / "reads.log"
    monkeypatch.setenv(engine.ANALYSIS_LOG, str(ledger))
    folder = DATA / run
    memo = Memo()
    once = stepscope.analyze(folder, telemetry=first, memo=memo, tables=True)
    reads = _reads(ledger)
    assert len(reads) == len(memo) > 0
    again = stepscope.analyze(folder, telemetry=second, memo=memo, tables=True)
    assert _reads(ledger) == reads, "the second analysis read a trace"
    fresh = stepscope.analyze(folder, telemetry=second, tables=True)
    _same(again, fresh)
    assert again.to_dict() != once.to_dict()  # the telemetry made a difference the memo had to follow
    assert stepscope.analyze(folder, telemetry=second, memo=memo).ops_ms is None  # tables only when asked


def test_a_changed_file_is_read_again_and_a_moved_one_is_not(tmp_path, monkeypatch):
    ledger = tmp_path / "reads.log"
    monkeypatch.setenv(engine.ANALYSIS_LOG, str(ledger))
    (src,) = (DATA / "eager_bs32").glob("*.pt.trace.json.gz")
    plain = tmp_path / "run" / src.name[:-len(".gz")]
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    memo = Memo()
    tel = {"steps": 50, "step_ms": 30.0}
    stepscope.analyze(plain, telemetry=tel, memo=memo, tables=True)
    st = plain.stat()
    os.utime(plain, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten since: read again
    stepscope.analyze(plain, telemetry=tel, memo=memo, tables=True)
    assert len(_reads(ledger)) == 2
    # the same events gzipped (as the trace handler does once a cycle is analysed), under a new name
    packed = plain.with_name(src.name)
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    memo.moved(plain, packed)
    moved = stepscope.analyze(packed, telemetry=tel, memo=memo, tables=True)
    assert len(_reads(ledger)) == 2
    _same(moved, stepscope.analyze(packed, telemetry=tel, tables=True))


def test_entries_carry_a_memo_to_another_process_and_the_oldest_go_past_the_limit(tmp_path, monkeypatch):
    ledger = tmp_path / "reads.log"
    monkeypatch.setenv(engine.ANALYSIS_LOG, str(ledger))
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(DATA / "eager_bs32", a)
    shutil.copytree(DATA / "host_bound", b)
    memo = Memo()
    stepscope.analyze(a, memo=memo)
    other = Memo()
    other.add(pickle.loads(pickle.dumps(memo.entries())))  # what the trainer's ranks send rank 0
    stepscope.analyze(a, telemetry={"steps": 9, "step_ms": 20.0}, memo=other)
    assert len(_reads(ledger)) == 1
    small = Memo(limit=1)
    for folder in (a, b, a):
        stepscope.analyze(folder, memo=small)
    assert len(small) == 1 and len(_reads(ledger)) == 4  # b pushed a out

"""Cross-rank analysis on the real 2-rank gloo DDP trace in tests/data/ddp_gloo/ (recorded on the CPU by
scripts/record_ddp_scenario.py; rank 1 sleeps 20 ms in every step before its forward pass).

    pytest tests/test_analysis_distributed.py -q
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

import pytest
from stepscope.analysis import render_console, render_markdown, summary_scalars
from stepscope.analysis.cross_rank import STRAGGLER_RATIO
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace, write_trace_atomic

DDP = Path(__file__).parent / "data" / "ddp_gloo"
INJECTED_DELAY_MS = 20.0


@cache
def report():
    return analyze(DDP)


def by_rank():
    (cycle,) = report().distributed
    return {r.rank: r for r in cycle.ranks}


def merged_length(intervals, lo, hi) -> float:
    """Length of the union of intervals within [lo, hi): a plain sweep, independent of the analysis."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


def raw_rank(rank: int):
    (tf,) = [t for t in discover(DDP).traces if t.worker.endswith(f"rank{rank}")]
    return load_trace(tf.path)


def test_each_rank_is_found_with_its_rank_number():
    r = report()
    assert [(s.worker, s.rank) for s in r.spans] == [("ddp_gloo_rank0", 0), ("ddp_gloo_rank1", 1)]
    (cycle,) = r.distributed
    assert cycle.span_index == 1 and len(cycle.ranks) == 2


@pytest.mark.parametrize("rank", [0, 1])
def test_per_rank_step_time_and_communication_match_the_raw_events(rank):
    trace = raw_rank(rank)
    ev = trace["traceEvents"]
    assert trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["world_size"] == 2
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    row = by_rank()[rank]
    assert row.step_ms == pytest.approx(sum(e["dur"] for e in steps) / len(steps) / 1e3, rel=1e-6)
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X"
            and e.get("name", "").startswith(("gloo:", "c10d::"))]
    expected_comm = sum(merged_length(comm, e["ts"], e["ts"] + e["dur"]) for e in steps) / len(steps) / 1e3
    assert row.comm_ms == pytest.approx(expected_comm, rel=1e-6)
    assert 0 < row.overlap_ms <= min(row.comm_ms, row.compute_ms)
    assert row.exposed_comm_ms <= row.comm_ms
    assert row.outside_comm_ms == pytest.approx(row.step_ms - row.exposed_comm_ms)


def test_rank1_is_the_straggler():
    rows = by_rank()
    (cycle,) = report().distributed
    assert cycle.stragglers == (1,)
    assert rows[1].straggler and not rows[0].straggler
    assert rows[1].outside_comm_ms > STRAGGLER_RATIO * rows[0].outside_comm_ms
    # Collectives equalise the step time, so the step itself does not single out rank 1 ...
    assert rows[1].step_ms == pytest.approx(rows[0].step_ms, rel=0.15)
    # ... but rank 0 spends most of its step waiting in the all-reduce for it.
    assert rows[0].comm_ms > rows[1].comm_ms + 0.5 * INJECTED_DELAY_MS
    (f,) = [f for f in cycle.findings if f.id == "straggler"]
    assert f.text.startswith("rank 1 is a straggler")
    assert 0.75 * INJECTED_DELAY_MS < f.cost_ms_per_step < 1.25 * INJECTED_DELAY_MS
    assert f.cost_ms_per_step == pytest.approx(rows[1].outside_comm_ms - rows[0].outside_comm_ms)


def test_verdicts_name_communication_and_the_straggler():
    rows = by_rank()
    assert rows[0].verdict == "communication_bound"  # waits in gloo:all_reduce most of the step
    assert rows[1].verdict == "host_bound"  # sleeps outside torch ops
    (cycle,) = report().distributed
    assert cycle.verdict == "host_bound"  # fixing the straggler frees both ranks
    assert report().verdict == "host_bound"  # a 1:1 tie between ranks, broken by the cross-rank verdict
    assert any(f.id == "communication" for f in cycle.findings)
    assert cycle.remedies[0].startswith("Balance the ranks")


def test_json_carries_the_distributed_section():
    d = report().to_dict()
    assert set(d) == {"verdict", "spans", "distributed"}
    (c,) = d["distributed"]
    assert c["world_size"] == 2 and c["stragglers"] == [1] and c["straggler_ratio"] == STRAGGLER_RATIO
    for row in c["ranks"]:
        assert set(row) == {"rank", "worker", "span", "verdict", "step_ms", "compute_ms", "comm_ms",
                            "overlap_ms", "exposed_comm_ms", "outside_comm_ms", "straggler"}
    for s in d["spans"]:
        assert s["metrics"]["gpu_busy_pct"] is None and s["metrics"]["comm_ms_per_step"] > 0


def test_text_forms_show_the_cross_rank_table():
    md = render_markdown(report())
    assert "## Cross-rank, profiling cycle 0: `host_bound`" in md  # numbered as cycles.jsonl and the tab
    assert "| 1 | ddp_gloo_rank1 | host_bound |" in md and "| yes |" in md
    assert "cross-rank (cycle 0, 2 ranks): host_bound" in render_console(report())
    sc = summary_scalars(report())
    assert sc["diagnosis/stragglers"] == 1.0
    assert "diagnosis/ddp_gloo_rank0/profiled/comm_ms_per_step" in sc and "diagnosis/ddp_gloo_rank1/step_ms" in sc


def test_identical_ranks_have_no_straggler(tmp_path):
    """Rank 0's trace twice, as ranks 0 and 1 (ranks read from the worker names): balanced by construction."""
    trace = raw_rank(0)
    for rank in (0, 1):
        t = {**trace}
        t.pop("distributedInfo")
        write_trace_atomic(tmp_path / f"node_rank{rank}.{1000 + rank}.pt.trace.json.gz", t)
    r = analyze(tmp_path)
    (cycle,) = r.distributed
    assert [x.rank for x in cycle.ranks] == [0, 1]
    assert cycle.stragglers == () and not [f for f in cycle.findings if f.id == "straggler"]
    assert cycle.verdict == "communication_bound"


def test_cycles_are_matched_by_span_order(tmp_path):
    """tensorboard_trace_handler stamps each rank's file with its own clock: spans differ between ranks."""
    for tf in discover(DDP).traces:
        shutil.copy(tf.path, tmp_path / tf.path.name)
    r = analyze(tmp_path)
    assert len({s.span for s in r.spans}) == 2
    assert len(r.distributed) == 1


def test_the_stragglers_line_names_ranks_not_a_count():
    """tests/data/nccl_ddp: rank 0 is the straggler. The summary line said "stragglers: 0" (read: none) right
    above "rank 0 is a straggler"; it names the rank."""
    r = analyze(Path(__file__).parent / "data" / "nccl_ddp")
    (cycle,) = r.distributed
    assert cycle.stragglers == (0,)
    for text in (render_console(r), render_markdown(r)):
        assert "rank 0 is a straggler" in text
        assert "stragglers: rank 0" in text and "stragglers: 0" not in text
    ddp = render_console(report())
    assert "stragglers: rank 1" in ddp


def test_one_rule_numbers_the_cycles_for_the_cross_rank_analysis_and_the_tab():
    """A handler names its spans by step: "9" comes before "10" on every rank, and the cross-rank section and
    the tab's cycles (report/summary.py) group and number them alike, from 0."""
    from stepscope.analysis.cycles import cycles
    from stepscope.report.summary import spans_by_cycle

    spans = [{"worker": f"h_1_rank{r}", "span": s} for r in (0, 1) for s in ("10", "9", "110")]
    grouped = cycles(spans, lambda s: s["worker"], lambda s: s["span"])
    assert [[s["span"] for s in g] for g in grouped] == [["9", "9"], ["10", "10"], ["110", "110"]]
    assert spans_by_cycle({"spans": spans}) == grouped
    # timestamps of one length (torch's tensorboard_trace_handler) keep their string order
    stamps = [{"worker": "w_rank0", "span": s} for s in ("1795261524036570560", "1795261524036570559")]
    assert [g[0]["span"] for g in cycles(stamps, lambda s: s["worker"], lambda s: s["span"])] == [
        "1795261524036570559", "1795261524036570560"]

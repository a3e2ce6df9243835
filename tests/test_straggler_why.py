"""Why a rank straggles (analysis/straggler_why.py) on real multi-rank traces: 2 H200s over NCCL in
tests/data/suite_ddp (scripts/verdict_ddp.py; in ``straggler`` rank 1 sleeps inside a ``straggler_delay``
range every step) and 2 CPU ranks over gloo in tests/data/ddp_gloo (rank 1 sleeps 20 ms before its forward).

    pytest tests/test_straggler_why.py -q
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from stepscope.analysis import render_console, render_markdown
from stepscope.report.front import analyze

DATA = Path(__file__).parent / "data"
DDP = DATA / "suite_ddp"


@cache
def report(run: Path):
    return analyze(run)


@pytest.mark.parametrize("run", [DDP / "straggler", DATA / "ddp_gloo"])
def test_a_sleeping_rank_straggles_for_host_work_outside_ops_in_its_range(run):
    (cycle,) = report(run).distributed
    (why,) = cycle.why
    assert why.rank == 1 == cycle.stragglers[0]
    assert why.causes == ("host_outside_ops",)
    phases = {p.phase: p for p in why.phases}
    # the injected sleep is about 20 ms per step; the median rank spends almost none of its step there
    assert 18.0 < phases["host_outside_ops"].delta_ms < 26.0
    assert phases["host_outside_ops"].median_ms < 2.0
    # the ranks that wait for it do so in communication: an effect, never named as a cause
    assert phases["exposed_comm"].delta_ms < 0 and "exposed_comm" not in why.causes
    assert why.names[0].name == "straggler_delay" and why.names[0].delta_ms > 18.0
    assert not why.same_work
    # the phases' excesses outside communication add up to the straggler finding's gap
    (finding,) = [f for f in cycle.findings if f.id == "straggler"]
    assert why.excess_ms == pytest.approx(finding.cost_ms_per_step, rel=0.1)


@pytest.mark.parametrize("name", ["balanced", "comm"])
def test_a_job_without_a_straggler_gives_no_reason(name):
    r = report(DDP / name)
    (cycle,) = r.distributed
    assert cycle.stragglers == () and cycle.why == ()
    assert r.to_dict()["distributed"][0]["stragglers_why"] == []
    assert "why" not in render_console(r) and "straggles" not in render_markdown(r)
    truth = json.loads((DDP / name / "truth.json").read_text())
    assert truth["stragglers"] == []


def test_the_reason_is_in_the_json_the_console_and_the_markdown():
    r = report(DDP / "straggler")
    (why,) = r.to_dict()["distributed"][0]["stragglers_why"]
    assert why["rank"] == 1 and why["causes"] == ["host_outside_ops"]
    assert {p["phase"] for p in why["phases"]} == {"data", "host_outside_ops", "host_dispatch", "sync",
                                                   "gpu_kernels", "device_idle", "copies", "exposed_comm"}
    for p in why["phases"]:
        assert p["delta_ms"] == pytest.approx(p["straggler_ms"] - p["median_ms"], abs=2e-4)
    assert why["top_differing"][0]["name"] == "straggler_delay"
    console = render_console(r)
    assert "why: rank 1 is" in console and "host work outside torch ops" in console
    md = render_markdown(r)
    assert "### Why rank 1 straggles" in md and "| **host work outside torch ops** |" in md
    assert "`straggler_delay` (host work outside torch ops)" in md


def test_a_rank_that_only_arrives_last_is_told_apart_from_one_that_works_more():
    """In nccl_ddp both ranks run the same ops for the same host time; rank 0's GPU waits on it longer. The
    reason says that no op accounts for it instead of naming noise."""
    (cycle,) = report(DATA / "nccl_ddp").distributed
    (why,) = cycle.why
    assert why.same_work and why.names == ()
    assert "no kernel, op or range accounts for it" in why.text()

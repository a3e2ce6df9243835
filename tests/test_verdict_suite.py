"""The verdict on real H100 traces of workloads with known, injected causes (tests/data/suite/, Lightning's own
PyTorchProfiler output among them; tests/data/holdout/, model families the analysis and its profiler-overhead
model were never fitted on), against the truth measured without the profiler.

Each folder holds the trace (3 steps, record_shapes + profile_memory + with_stack) and truth.json, written by
scripts/verdict_bench.py (scripts/record_lightning.py for Lightning): the unprofiled step time, the step's GPU
time replayed as a CUDA graph, the step with the cause removed, and the verdict those numbers imply. The
analysis reads each trace as a stranger's: no telemetry, only the profiler-overhead model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepscope.trainer.profiler.analysis import analyze_run, render_console

DATA = Path(__file__).parent / "data"
SUITE = sorted(p.parent for p in DATA.glob("suite/*/truth.json"))
# recorded by `scripts/verdict_bench.py --set holdout`: timm's ViT-Tiny and ConvNeXt-Atto, Hugging Face's BERT, an MLP
HOLDOUT = sorted(p.parent for p in DATA.glob("holdout/*/truth.json"))
CASES = SUITE + HOLDOUT
BUSY_PP = 5.0
# Where the estimate misses the truth by more than 5 points (measured 2026-11-22, BENCHMARKS.md): a GPU-bound
# decoder whose profiled host fell behind its GPU (the model under-counts that host's cost: 70 vs 99%), a
# pageable copy that the profiled step ran slower than the copy timed alone (93 vs 77%), and two launch-bound
# steps read 6 points low (16 vs 22%).
KNOWN_MISSES = {"gpt_large", "pageable_copy", "resnet18_bs32", "resnet50_pinned",
                # a worker-fed loader with room to spare: launch-bound, its profiler cost under-counted (15 vs 22%)
                "loader_ahead",
                # held out: a Hugging Face model whose profiler cost the model under-counts (6 vs 13%), and a ViT
                # whose pageable copy ran slower profiled than timed alone (97 vs 88%)
                "bert_bs8", "vit_pageable"}
# A DataLoader whose 2 workers cannot keep up unprofiled (34 ms steps, 3.8x faster with 16 workers), profiled
# after they had prefetched: the 3 recorded steps ran on ready batches (0.3 ms waits). Nothing in the trace
# shows the stall; the report must say that data_bound is possible rather than claim its verdict outright.
# loader_catching_up: 2 workers slower than the unprofiled step but faster than the profiled one, profiled
# straight from the data-bound steady state; they caught up before the recorded steps, whose loader calls
# (0.12-0.28 ms) are as short as those of loader_ahead, a worker-fed loader with room to spare.
VERDICT_NOT_IN_TRACE = {"loader_two_workers", "convnext_loader", "loader_catching_up"}


def case(path: Path):
    return json.loads((path / "truth.json").read_text()), analyze_run(path).spans[0]


def test_the_holdout_spans_new_families_and_verdicts():
    truths = [json.loads((p / "truth.json").read_text()) for p in HOLDOUT]
    assert {t["family"] for t in truths} == {"timm-vit", "timm-convnext", "hf-bert", "mlp"}
    assert {t["expected"] for t in truths} == {"launch_bound", "gpu_bound", "data_bound"}


def test_the_suite_spans_families_and_verdicts():
    truths = [json.loads((p / "truth.json").read_text()) for p in SUITE]
    assert len(CASES) >= 14
    assert len({t["family"] for t in truths}) >= 6
    assert {t["expected"] for t in truths} >= {"launch_bound", "gpu_bound", "data_bound", "host_bound",
                                               "transfer_bound"}


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_verdict_matches_the_unprofiled_truth(path):
    truth, s = case(path)
    assert truth["confirmed"] is not False  # removing the injected cause sped the step up
    if path.name in VERDICT_NOT_IN_TRACE:
        assert s.verdict != truth["expected"]  # still not in the trace, or this list is stale
        assert truth["expected"] in s.uncertainty["verdicts"] and "worker processes" in s.evidence[2]
        return
    assert s.verdict == truth["expected"], render_console(analyze_run(path))


@pytest.mark.parametrize("path", [p for p in CASES if json.loads((p / "truth.json").read_text())["gpu_busy_pct"]],
                         ids=lambda p: p.name)
def test_gpu_busy_against_the_unprofiled_truth(path):
    """Within 5 points of the unprofiled truth; the known misses at least closer than the profiled steps'
    own reading."""
    truth, s = case(path)
    got, profiled, true = s.metrics.gpu_busy_pct, s.profiled.gpu_busy_pct, truth["gpu_busy_pct"]
    if path.name in VERDICT_NOT_IN_TRACE:  # the stall is not in the trace, so neither is the idle it causes:
        assert got > true - BUSY_PP  # the estimate can only over-state the busy share
    elif path.name in KNOWN_MISSES:
        assert BUSY_PP < abs(got - true) < abs(profiled - true)  # still a miss, or this list is stale
    else:
        assert abs(got - true) <= BUSY_PP, (got, true)


def test_a_worker_fed_loaders_hand_off_is_no_wait():
    """A worker-fed loader that keeps up hands over ready batches in 0.1-0.3 ms a step; with the batch's copy
    to the device inside the same ``data`` range that is 0.6-1 ms, over the pacing threshold. Only the loader's
    own calls decide, so the verdict is the step's (launch_bound), with data_bound named as possible."""
    truth, s = case(DATA / "suite" / "loader_ahead")
    assert truth["expected"] == "launch_bound" and s.verdict == "launch_bound"
    assert s.uncertainty["verdicts"] == ["data_bound", "launch_bound"] and "worker processes" in s.evidence[2]


def test_cpu_scalars_are_not_host_syncs():
    """AdamW(foreach=False) reads its CPU step counters with .item(): no device copy, no synchronize."""
    _, s = case(DATA / "suite" / "adamw_cpu_scalars")
    assert s.metrics.syncs_per_step == 0


def test_copies_are_not_compute():
    _, s = case(DATA / "suite" / "pageable_copy")
    assert s.breakdown.pct("transfer") > s.breakdown.pct("gpu_busy")
    assert s.findings[0].id == "transfer"
    assert any("pin" in r and "non_blocking" in r for r in s.remedies)


def test_a_cold_window_is_named_and_left_out():
    truth, s = case(DATA / "suite" / "cold_start")
    (cold,) = [f for f in s.findings if f.id == "cold_start"]
    assert "left out of the verdict" in cold.text and "skip_first" in cold.remedies[0]
    assert s.metrics.steps == 2  # of 3 recorded
    assert s.verdict == truth["expected"]


DDP = DATA / "suite_ddp"  # 2 H200s over NCCL (scripts/verdict_ddp.py): the job's verdict and its stragglers


@pytest.mark.parametrize("name,verdict,stragglers", [("comm", "communication_bound", ()),
                                                     ("straggler", "host_bound", (1,)),
                                                     ("balanced", None, ())])
def test_multi_rank_verdicts_and_stragglers(name, verdict, stragglers):
    truth = json.loads((DDP / name / "truth.json").read_text())
    r = analyze_run(DDP / name)
    (cycle,) = r.distributed
    assert truth["confirmed"] is not False and truth["stragglers"] == list(stragglers)
    assert cycle.stragglers == stragglers, render_console(r)  # a balanced run names nobody
    if verdict is not None:
        assert truth["expected"] == verdict and r.verdict == verdict

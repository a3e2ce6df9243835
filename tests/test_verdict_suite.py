"""The verdict on real H100 traces of workloads with known, injected causes (tests/data/suite/, Lightning's own
PyTorchProfiler output among them; tests/data/holdout/, model families the analysis and its profiler-overhead
model were never fitted on), against the truth measured without the profiler.

Each folder holds the trace (3 steps, record_shapes + profile_memory + with_stack) and truth.json, written by
scripts/verdict_bench.py (scripts/record_lightning.py for Lightning): the unprofiled step time, the step's GPU
time replayed as a CUDA graph, the step with the cause removed, and the verdict those numbers imply. Beside
them, telemetry.json: the unprofiled steps timed by the trainer's own StepClock in the same process, as a
stepscope run records them (Lightning's run has none). Each trace is read two ways: as a stepscope run's
(with that telemetry: every verdict right, GPU busy within 5 points), and as a stranger's (no telemetry,
only the profiler-overhead model, whose known limits are listed below). Recorded 2026-11-23 on an H100.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from stepscope.analysis import render_console
from stepscope.report.front import analyze

DATA = Path(__file__).parent / "data"
SUITE = sorted(p.parent for p in DATA.glob("suite/*/truth.json"))
# recorded by `scripts/verdict_bench.py --set holdout`: timm's ViT-Tiny and ConvNeXt-Atto, Hugging Face's BERT, an MLP
HOLDOUT = sorted(p.parent for p in DATA.glob("holdout/*/truth.json"))
CASES = SUITE + HOLDOUT
RUNS = [p for p in CASES if (p / "telemetry.json").exists()]
BUSY_PP = 5.0
# As strangers' traces, where the estimate misses the truth by more than 5 points (BENCHMARKS.md): the
# overhead model's ±30% on launch-bound steps (cold_start's warm steps 19 vs 25%, resnet50_pinned 13 vs 18%,
# vit_tiny_bs8 9 vs 14%), and GPU-bound steps whose profiled host fell behind their GPU, which the model
# cannot see (compile_reduce_overhead 100 vs 84%, resnet18_bs1024 93 vs 99%, vit_pageable 98 vs 91%).
KNOWN_MISSES = {"cold_start", "resnet50_pinned", "vit_tiny_bs8", "compile_reduce_overhead", "resnet18_bs1024",
                "vit_pageable"}
# As stepscope runs: vit_pageable's run timed its steps 6.6% longer than the truth's own timing did (62.9 vs
# 59.0 ms; against its own step the estimate is 2.4 points off).
KNOWN_RUN_MISSES = {"vit_pageable"}
# A DataLoader whose 2 workers cannot keep up unprofiled, profiled while they were ahead or had caught up: the
# 3 recorded steps ran on ready batches (loader calls of 0.1-0.3 ms, as short as those of loader_ahead, a
# worker-fed loader with room to spare). Nothing in the trace shows the stall; the report must say that
# data_bound is possible rather than claim its verdict outright. A stepscope run's telemetry shows the wait.
VERDICT_NOT_IN_TRACE = {"loader_two_workers", "convnext_loader", "loader_catching_up"}


@functools.cache
def _report(path: Path, as_run: bool):
    """Each committed run analysed once per module, as a stranger's trace and as a stepscope run's: several
    tests assert on the same report (the analysis is a function of the files; the reports are only read)."""
    telemetry = json.loads((path / "telemetry.json").read_text()) if as_run else None
    return analyze(path, telemetry=telemetry)


def case(path: Path, as_run: bool = False):
    return json.loads((path / "truth.json").read_text()), _report(path, as_run).spans[0]


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
    assert s.verdict == truth["expected"], render_console(_report(path, False))


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_a_runs_verdict_matches_the_unprofiled_truth(path):
    """With the run's own unprofiled timing every verdict is right, the loaders the trace cannot decide
    included: their wait for data is in the telemetry."""
    truth, s = case(path, as_run=True)
    assert s.basis == "telemetry" and s.uncertainty is None
    if truth["confirmed"] is not False:
        assert s.verdict == truth["expected"], render_console(_report(path, False))


def test_runs_cover_every_case_but_lightnings():
    assert len(RUNS) == len(CASES) - 1 >= 23


@pytest.mark.parametrize("path", [p for p in RUNS if json.loads((p / "truth.json").read_text())["gpu_busy_pct"]],
                         ids=lambda p: p.name)
def test_a_runs_gpu_busy_against_the_unprofiled_truth(path):
    truth, s = case(path, as_run=True)
    got, true = s.metrics.gpu_busy_pct, truth["gpu_busy_pct"]
    if path.name in KNOWN_RUN_MISSES:
        assert BUSY_PP < abs(got - true) < abs(s.profiled.gpu_busy_pct - true)  # still a miss, or stale
    else:
        assert abs(got - true) <= BUSY_PP, (got, true)


def test_a_loader_that_paces_the_run_is_named_with_its_wait():
    """Two workers deliver their batches together, so every other step waits for two batches' time: the
    mean wait (22 ms of a 35 ms step) makes it data_bound, and the evidence says the loader paces the step."""
    truth, s = case(DATA / "suite" / "loader_two_workers", as_run=True)
    assert s.verdict == truth["expected"] == "data_bound" and s.loader_paced
    assert "the DataLoader paces the step" in s.evidence[1]
    assert "data_loading" in [f.id for f in s.findings][:1]


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


# 2 H200s over NCCL (scripts/verdict_ddp.py): the job's verdict and its stragglers. balanced_skew is the
# balanced scenario recorded again (2026-11-27) with a removal truth, its step replayed as one CUDA graph on
# both ranks, all-reduces included: 19x faster, so launch_bound. In its profiled window rank 1 waits in the
# all-reduce for 97% of its step, for rank 0's profiler-slowed host; the balanced recording of 2026-11-22 has
# only its step timed (its truth names no verdict), and reads the verdict of that removal truth.
DDP = DATA / "suite_ddp"


@pytest.mark.parametrize("name,verdict,stragglers", [("comm", "communication_bound", ()),
                                                     ("straggler", "host_bound", (1,)),
                                                     ("balanced_skew", "launch_bound", ()),
                                                     ("balanced", None, ())])
def test_multi_rank_verdicts_and_stragglers(name, verdict, stragglers):
    truth = json.loads((DDP / name / "truth.json").read_text())
    r = _report(DDP / name, False)
    (cycle,) = r.distributed
    assert truth["confirmed"] is not False and truth["stragglers"] == list(stragglers)
    assert cycle.stragglers == stragglers, render_console(r)  # a balanced run names nobody
    assert truth["expected"] == verdict
    if verdict is None:  # the same scenario's removal truth
        verdict = json.loads((DDP / "balanced_skew" / "truth.json").read_text())["expected"]
    assert r.verdict == verdict, render_console(r)


def test_a_rank_waiting_in_a_collective_for_its_peer_is_not_communication():
    """Without the job's own rule the median over two ranks, one of them 97% inside the all-reduce waiting for
    the other, reads communication_bound: the share every rank pays (the smallest) is what counts."""
    r = _report(DDP / "balanced_skew", False)
    shares = sorted(s.breakdown.pct("communication") for s in r.spans)
    assert shares[0] < 5 and shares[1] > 90  # the wait is in the trace
    (cycle,) = r.distributed
    assert cycle.verdict == r.verdict == "launch_bound"

"""The CPU subset of the verdict benchmark: cpu_bound, data_bound and host_bound on one process, and
communication_bound over gloo under torchrun (2 processes). CI-sized: about a minute on 2 cores.

    run_dir, truth = run_cpu_scenario("cpu_loader", Path("/tmp/vb/traces"))

Each returns the run directory of its trace and its truth (verdict by construction, confirmed by removing
the cause where there is one to remove). Used by bench.py (scripts/verdict_bench.py --device cpu).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from stepscope.analysis.verdicts import CPU_BOUND, DATA_BOUND, HOST_BOUND

from bench.verdicts.truth import CONFIRM_SPEEDUP, record_trace, step_times
from bench.workloads import SlowSamples, Workload, ce_loss, cifar_batch, pooled_linear, small_cnn

CPU = torch.device("cpu")


def _workload(name: str, fixed: bool = False):
    if name == "cpu_compute":
        return Workload(name, "resnet8", CPU_BOUND.name, CPU, small_cnn(), cifar_batch(64), ce_loss)
    if name == "cpu_loader":  # 10 ms a sample in the main process, 16 samples a batch: 160 ms of loading (a
        # sleep, which a loaded machine does not lengthen) into a pooled linear classifier (under 1 ms of compute)
        dl = torch.utils.data.DataLoader(SlowSamples(1_000_000, 0.0 if fixed else 10.0), batch_size=16)
        return Workload(name, "pooled-linear", DATA_BOUND.name, CPU, pooled_linear(), cifar_batch(16), ce_loss, loader=dl)
    if name == "cpu_host_python":  # about 100 ms of Python after each step, no calls for with_stack to record,
        # after a pooled linear classifier's step (under 1 ms): torch's threads, which a busy machine slows more
        # than one Python thread, cannot outweigh it
        return Workload(name, "pooled-linear", HOST_BOUND.name, CPU, pooled_linear(), cifar_batch(8), ce_loss,
                        host_work=0 if fixed else 2_000_000, host_calls=False)
    raise ValueError(name)


def paired_ms(a, b, warmup: int = 2, pairs: int = 6) -> tuple[list[float], list[float]]:
    """ms per step of two workloads, timed in alternation (ABBA...), so that a load that comes and goes on
    a shared machine falls on both alike."""
    for _ in range(warmup):
        a()
        b()
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(pairs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            (a, b)[k]()
            times[k].append((time.perf_counter() - t0) * 1e3)
    return times


def run_cpu_scenario(name: str, traces: Path) -> tuple[Path, dict]:
    if name == "cpu_comm":
        return _gloo(traces / name)
    torch.manual_seed(0)
    w = _workload(name)
    if name == "cpu_compute":
        step, fixed = statistics.median(step_times(w.step, CPU, warmup=2, steps=6, budget_s=3)), None
    else:
        with_cause, without = paired_ms(w.step, _workload(name, fixed=True).step)
        step, fixed = statistics.median(with_cause), statistics.median(without)
    run_dir = record_trace(w, traces, CPU)
    truth = {"step_ms": step, "fixed_step_ms": fixed, "intervention": None if fixed is None else "cause removed",
             "confirmed": None if fixed is None else step / fixed >= CONFIRM_SPEEDUP, "expected": w.cause,
             "cause": w.cause, "family": w.family, "gpu_ms": None, "gpu_busy_pct": None}
    return run_dir, truth


def _gloo(run_dir: Path) -> tuple[Path, dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bench.verdicts.ddp", "--case", "comm", "--out", str(run_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode != 0:
        raise RuntimeError(f"torchrun failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return run_dir, json.loads((run_dir / "truth.json").read_text())

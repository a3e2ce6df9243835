"""Multi-rank verdict scenarios under torchrun: communication-bound, a straggler, and a balanced run.

    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case comm --out DIR       # nccl on GPUs, gloo on CPU
    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case straggler --out DIR
    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case balanced --out DIR

DDP over a small MLP. `comm` adds a large parameter (`--comm-mb`, 512 MB on GPUs, 64 MB on the CPU) whose
gradient every step all-reduces; `straggler` makes rank 1 sleep `--straggler-ms` before its forward pass;
`balanced` injects nothing. Truth without the profiler: the median step (CUDA events or perf_counter), and the
step with the cause removed (`no_sync()` for comm: no all-reduce; no sleep for straggler). The balanced step
has no injected cause to remove: on GPUs its host's whole share is removed instead, the step (forward,
backward with DDP's all-reduces, optimizer) captured as one CUDA graph on every rank and replayed. Its
expected verdict then follows from those two numbers by the single-GPU suite's rule (truth.py): GPU-bound if
the replay is at least half of the step, else launch-bound where the replay is at least 1.15x faster (the
step's own host work is only the model's dispatch: no loop code runs in it). Then 3 steps are profiled with
record_shapes, profile_memory and with_stack. Rank 0 writes DIR/truth.json and prints one line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from stepscope.analysis.verdicts import COMMUNICATION_BOUND, GPU_BOUND, HOST_BOUND, LAUNCH_BOUND
from stepscope.demo.distributed import Distributed
from stepscope.demo.step import on_stream
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from bench.verdicts.truth import CONFIRM_SPEEDUP, GPU_BOUND_SHARE, step_times

EXPECTED = {"comm": COMMUNICATION_BOUND.name, "straggler": HOST_BOUND.name, "balanced": None}


class Net(nn.Module):
    def __init__(self, width: int, extra_mb: float) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, 10))
        self.extra = nn.Parameter(torch.zeros(int(extra_mb * 2**20 / 4))) if extra_mb else None

    def forward(self, x):
        out = self.body(x)
        # the whole parameter takes part, so that its gradient is one in-place pass (no fresh zeroed copy)
        return out + self.extra.sum() * 0.0 if self.extra is not None else out


def graph_step_ms(net: nn.Module, local: int, x: torch.Tensor, y: torch.Tensor) -> float:
    """Median ms of the whole DDP step (forward, backward with its all-reduces, SGD) replayed as one CUDA graph:
    the step without its host. Every rank calls it at once (the graph holds collectives). DDP is built on the
    capture stream, as trainer/demo/step.py's GraphedStep does, and the graph is freed before returning: a process
    group destroyed while a graph holding NCCL collectives lives hangs."""
    stream = torch.cuda.Stream()
    with on_stream(stream):
        ddp = DistributedDataParallel(net, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def fwd_bwd_opt() -> None:
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    with on_stream(stream):
        for _ in range(Distributed.graph_warmup_iters):  # DDP's first iterations query CUDA events
            opt.zero_grad(set_to_none=True)
            fwd_bwd_opt()
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):  # sync point, once: no warm-up collective is in flight
        fwd_bwd_opt()
    ms = statistics.median(step_times(graph.replay, x.device, warmup=3, steps=30))
    del graph
    torch.cuda.synchronize()
    return ms


def balanced_expected(step_ms: float, graph_ms: float | None) -> tuple[str | None, bool | None]:
    """(the verdict the unprofiled step and its graph replay imply, whether removing the host confirmed it);
    (None, None) where no graph could be timed (the CPU)."""
    if graph_ms is None:
        return None, None
    if graph_ms / step_ms >= GPU_BOUND_SHARE:
        return GPU_BOUND.name, True
    return LAUNCH_BOUND.name, step_ms / graph_ms >= CONFIRM_SPEEDUP


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(EXPECTED), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--comm-mb", type=float, default=None)
    p.add_argument("--straggler-ms", type=float, default=20.0)
    a = p.parse_args()
    if "RANK" not in os.environ:
        p.error("run under torchrun --nproc_per_node 2")
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=120),
                            device_id=device if cuda else None)
    rank = dist.get_rank()
    comm_mb = (a.comm_mb or (512.0 if cuda else 64.0)) if a.case == "comm" else 0.0
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(1024 if cuda else 256, comm_mb).to(device),
                                    device_ids=[local] if cuda else None)
    # on the CPU the SGD update of the large parameter would itself take as long as its all-reduce: it is
    # all-reduced but not optimised there, so that the step's cost is the collective
    opt = torch.optim.SGD(model.parameters() if cuda else model.module.body.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 256, generator=g).to(device), torch.randint(0, 10, (64,), generator=g).to(device)
    delay = a.straggler_ms / 1e3 if a.case == "straggler" and rank == 1 else 0.0

    def step(fixed: bool = False) -> None:
        if delay and not fixed:
            with record_function("straggler_delay"):
                time.sleep(delay)  # the injected straggler: host work on this rank only
        ctx = model.no_sync() if fixed and a.case == "comm" else contextlib.nullcontext()
        with ctx:
            with record_function("forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("backward"):
                loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if fixed and a.case == "straggler":
            dist.barrier()  # the ranks stay in step without the all-reduce's implicit wait

    step_ms = statistics.median(step_times(step, device, warmup=3, steps=15))
    fixed_ms = statistics.median(step_times(lambda: step(True), device, warmup=2, steps=15)) \
        if a.case != "balanced" else None
    graph_ms = None
    if a.case == "balanced" and cuda:
        torch.manual_seed(0)  # the same initial model, so the replayed step is the profiled one's
        graph_ms = graph_step_ms(Net(1024, 0.0).to(device), local, x, y)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    run_dir = a.out
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=3), record_shapes=True,
                 profile_memory=True, with_stack=True,
                 on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=f"{a.case}_rank{rank}",
                                                          use_gzip=True)) as prof:
        for _ in range(5):
            step()
            prof.step()
    dist.barrier()
    if rank == 0:
        expected, confirmed = EXPECTED[a.case], None if fixed_ms is None else step_ms / fixed_ms >= CONFIRM_SPEEDUP
        if a.case == "balanced":
            expected, confirmed = balanced_expected(step_ms, graph_ms)
            fixed_ms = graph_ms
        truth = {"case": a.case, "expected": expected, "step_ms": step_ms, "fixed_step_ms": fixed_ms,
                 "intervention": {"comm": "no_sync(): no all-reduce", "straggler": "no sleep on rank 1",
                                  "balanced": "whole step as a CUDA graph" if graph_ms else None}[a.case],
                 "confirmed": confirmed,
                 "stragglers": [1] if a.case == "straggler" else [], "backend": dist.get_backend(),
                 "comm_mb": comm_mb, "gpu_busy_pct": None if graph_ms is None else min(100.0, 100 * graph_ms / step_ms),
                 "family": "ddp-mlp", "cause": EXPECTED[a.case]}
        (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{a.case}: {step_ms:.2f} ms/step, fixed {fixed_ms} ms, expected {expected}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

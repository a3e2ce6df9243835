"""Record the small real 2-rank DDP trace under tests/data/ddp_gloo/ that the cross-rank analysis tests use.

DistributedDataParallel over a tiny MLP, gloo on the CPU, one process per rank under torchrun. Each rank
runs plain ``torch.profiler`` with ``tensorboard_trace_handler`` and a worker name that contains its rank.
Rank ``--straggler-rank`` sleeps ``--straggler-ms`` in every step before its forward pass, so the trace
holds a real straggler: the other rank waits for it inside the gradient all-reduce.

Run on the CPU (2 processes, about 10 s on 2 cores):

    torchrun --nproc_per_node 2 scripts/record_ddp_scenario.py --out tests/data/ddp_gloo

Prints, from each rank, one line: rank, median unprofiled ms/step, and the trace files it wrote.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from stepscope.demo.timing import time_fn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

# Defaults: a model big enough that the all-reduce and the matmuls both show in the trace, small enough
# that the trace stays a few hundred KB; a delay clearly above the step's compute (a few ms on 2 cores).
WIDTH = 512
BATCH = 64
STRAGGLER_MS = 20.0


def tiny_mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--straggler-rank", type=int, default=1)
    p.add_argument("--straggler-ms", type=float, default=STRAGGLER_MS)
    a = p.parse_args()
    if "RANK" not in os.environ:
        print("error: run under torchrun, e.g. torchrun --nproc_per_node 2 " + sys.argv[0] + " --out DIR",
              file=sys.stderr)
        return 2
    # A collective timeout, so that a dead peer ends this rank with an error instead of a hang.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)  # same initial weights everywhere (DDP broadcasts them anyway)
    model = DistributedDataParallel(tiny_mlp(WIDTH))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)  # a rank-distinct shard of synthetic data
    x = torch.randn(BATCH, 256, generator=gen)
    y = torch.randint(0, 10, (BATCH,), generator=gen)
    delay_s = a.straggler_ms / 1e3 if rank == a.straggler_rank else 0.0

    def step() -> None:
        with record_function("data"):
            xb, yb = x + 0.01 * torch.randn(x.shape, generator=gen), y
        if delay_s:
            with record_function("straggler_delay"):
                time.sleep(delay_s)  # the injected straggler: host work on this rank only
        with record_function("forward"):
            loss = F.cross_entropy(model(xb), yb)
        with record_function("backward"):
            loss.backward()  # DDP all-reduces the gradients here
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    times = time_fn(step, torch.device("cpu"), warmup=3, reps=10)
    run_dir = a.out
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=2, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=f"ddp_gloo_rank{rank}",
                                                          use_gzip=True),
                 record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(6):
            step()
            prof.step()
    dist.barrier()
    files = sorted(p.name for p in run_dir.glob(f"ddp_gloo_rank{rank}.*.pt.trace.json.gz"))
    print(f"rank {rank}: {statistics.median(times):.2f} ms/step unprofiled, {files}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torchrun worker for tests/test_ddp_cuda.py: the same DDP training, eager and replayed from a whole-step graph.

    torchrun --standalone --nproc_per_node 2 tests/ddp_graph_worker.py OUT.json

Each rank trains two copies of one initial model on its own batches (distinct per rank) for STEPS steps:
with `EagerStep` around DDP, and with `GraphedStep`, DDP built on the capture stream so that its gradient
all-reduces are captured in the graph. Rank 0 writes JSON: each copy's per-step loss (mean over ranks) and
each copy's largest parameter difference between the ranks (zero only if the gradients were all-reduced), and
the size of each copy's total update (the L2 norm of final minus initial parameters).
"""

from __future__ import annotations

import copy
import faulthandler
import json
import sys

import torch
import torch.distributed as dist
from stepscope.capture.phases import Phases
from stepscope.demo.config import ModelConfig, OptimConfig
from stepscope.demo.distributed import make_distributed
from stepscope.demo.env import configure_process, make_env, seed_everything
from stepscope.demo.models import build_model
from stepscope.demo.optim import build_optimizer, loss_fn
from stepscope.demo.step import EagerStep, GraphedStep, capture_stream, on_stream

STEPS = 12
BATCH = 32


def rank_batches(rank: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (BATCH,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


def max_param_spread(model: torch.nn.Module) -> float:
    """The largest |p_rank - p_rank0| over all parameters, as seen by every rank."""
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    spread = (flat - ref).abs().max()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return spread.item()


def train(step, batches: list, world: int) -> list[float]:
    losses = []
    for x, y in batches:
        step(x, y)
        loss, _count = step.take_loss()
        dist.all_reduce(loss)
        losses.append(loss.item() / world)  # sync point: a test, per step
    return losses


def train_copy(kind: str, initial: torch.nn.Module, batches: list, env, group) -> dict:
    """Train a copy of `initial`. Its step, and so its CUDA graph, is freed on return: destroying the process
    group while a graph that holds NCCL collectives is alive hangs (seen on 2 H200s, torch 2.11)."""
    model = copy.deepcopy(initial)
    stream = capture_stream(env, kind == "graphed")
    with on_stream(stream):
        ddp = group.wrap(model, None)
    opt, _sched = build_optimizer(OptimConfig(), ddp, env.device, BATCH * env.world_size, STEPS)
    if kind == "eager":
        step = EagerStep(ddp, opt, loss_fn(0.1), env, Phases(False))
    else:
        step = GraphedStep(ddp, opt, loss_fn(0.1), env, Phases(False), batches[0], stream, group.graph_warmup_iters)
    losses = train(step, batches, env.world_size)
    moved = torch.cat([(p.detach() - q).flatten() for p, q in zip(model.parameters(), initial.parameters())])
    moved = moved.norm().item()
    return {"losses": losses, "param_spread": max_param_spread(model), "param_moved": moved}


def main(out: str) -> None:
    faulthandler.dump_traceback_later(90, exit=True)  # a hang ends with every thread's stack, not a test timeout
    env = make_env("cuda", bf16=False, channels_last=False)
    configure_process(env, profiling=False, cuda_graphs=True, compile_mode=None)
    group = make_distributed(env)
    seed_everything(0)
    initial = build_model(ModelConfig(arch="resnet8")).to(env.device)
    batches = rank_batches(env.rank, env.device)
    results = {kind: train_copy(kind, initial, batches, env, group) for kind in ("eager", "graphed")}
    if env.is_main:
        with open(out, "w") as f:
            json.dump(results, f)
    group.shutdown(clean=True)


if __name__ == "__main__":
    main(sys.argv[1])

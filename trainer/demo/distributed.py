"""Process group for `torchrun`: DDP with nccl on GPUs, gloo on CPU. A single process gets `SingleProcess`.

    torchrun --nproc_per_node 2 scripts/train.py --profile        # --batch-size is per rank
    torchrun --nproc_per_node 2 scripts/train.py --cuda-graphs    # the all-reduces are captured in the step's graph
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 scripts/train.py

LOCAL_RANK picks the GPU, RANK is the identity (worker names, shards, who logs). Rank 0 names and creates
the run directory and broadcasts it, with the base of the span names: cycle k of every rank is written as
span `span_base + k`, so one cycle's traces of all ranks share `raw/<span>/` (what Holistic Trace Analysis
reads: one file per rank per directory). Across nodes the logdir must be a shared filesystem to hold one run.

Failures and Ctrl-C:
- A rank that raises exits with its traceback; torchrun notices within its monitor interval (0.1 s) and
  SIGTERMs the others, which flush what they have and exit (trainer/demo/stop.py). A collective timeout bounds
  any wait for a peer that hangs rather than dies.
- Ctrl-C: torchrun forwards SIGINT to every rank; `StopSignal` (trainer/demo/stop.py) stops each one cleanly, and
  on NCCL aborts the communicator at once so no rank waits for a stopped peer.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from stepscope.demo.config import ConfigError, TrainConfig
from stepscope.demo.env import Env
from stepscope.demo.stop import StopSignal
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# long enough for legitimately slow collectives (NCCL set-up, ranks compiling at different speeds), short
# enough that a hung peer ends the run
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)


@dataclass(frozen=True)
class RunStart:
    run_dir: Path
    span_base: int  # rank 0's time.time_ns(): every rank names its cycle k `span_base + k`
    workers: tuple[str, ...]  # each rank's worker name, by rank


def check_distributed(cfg: TrainConfig, ranks: tuple[int, int, int], cuda_devices: int) -> None:
    """Flags that cannot work with this many processes; raises ConfigError before anything is written."""
    _rank, world, local_rank = ranks
    if world <= 1:
        return
    if cfg.device == "cuda" and local_rank >= cuda_devices:
        raise ConfigError(f"torchrun started local rank {local_rank} but only {cuda_devices} GPU(s) are visible; "
                          f"use --nproc_per_node {cuda_devices} or fewer")
    if cfg.data.name == "synthetic":
        shard = cfg.data.synthetic_train_size // world
        if shard < cfg.data.batch_size:
            raise ConfigError(f"--synthetic-train-size {cfg.data.synthetic_train_size} split over {world} ranks "
                              f"leaves {shard} samples per rank, fewer than --batch-size {cfg.data.batch_size} "
                              f"(per rank); use --synthetic-train-size {cfg.data.batch_size * world} or more")


class SingleProcess:
    world_size = 1
    backend = None
    graph_warmup_iters = 3  # cuDNN autotuning, the allocator and momentum buffers settle in a few steps

    def __init__(self) -> None:
        self.options: dict = {}

    def wrap(self, model: nn.Module, compile_mode: str | None) -> nn.Module:
        return model

    def start_run(self, create: Callable[[], Path], worker: str) -> RunStart:
        return RunStart(create(), time.time_ns(), (worker,))

    def stop_signal(self) -> StopSignal:
        return StopSignal()

    def barrier(self) -> None:
        pass

    def gather(self, obj) -> list:
        """Every rank's ``obj``, on rank 0 (this process)."""
        return [obj]

    def shutdown(self, clean: bool) -> None:
        pass


class Distributed:
    # PyTorch's recipe for capturing DDP's backward (notes/cuda, "Usage with DistributedDataParallel"): DDP
    # logs runtime statistics with CUDA event queries in its first 10 iterations, which capture cannot hold
    graph_warmup_iters = 11

    def __init__(self, env: Env) -> None:
        self.env = env
        self.world_size = env.world_size
        self.backend = "nccl" if env.is_cuda else "gloo"
        self.options: dict = {}
        dist.init_process_group(self.backend, timeout=COLLECTIVE_TIMEOUT,
                                device_id=env.device if env.is_cuda else None)

    def wrap(self, model: nn.Module, compile_mode: str | None) -> nn.Module:
        """DDP, tuned for a step that is short on a fast link (measured on 2 H200s, see BENCHMARKS.md).

        - broadcast_buffers=False: no broadcast of every BatchNorm buffer before each forward (one
          collective plus ~100 small copies); each rank keeps its own running statistics, rank 0's are
          the ones evaluated and saved.
        - gradient_as_bucket_view=True: gradients live in the all-reduce buckets, no copy back.
        - with --compile reduce-overhead, dynamo's DDPOptimizer is off: one forward and one backward CUDA
          graph instead of one per bucket; the all-reduces then run after the backward instead of
          overlapping it, which costs little on NVLink but more on a slow inter-node network.
        """
        self.options = {"broadcast_buffers": False, "gradient_as_bucket_view": True,
                        "dynamo_optimize_ddp": bool(torch._dynamo.config.optimize_ddp) if compile_mode else None}
        ids = [self.env.local_rank] if self.env.is_cuda else None
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False, gradient_as_bucket_view=True)

    def start_run(self, create: Callable[[], Path], worker: str) -> RunStart:
        """Rank 0 creates the run directory; the others learn its path and span base, or its error."""
        msg: list = [None]
        if self.env.is_main:
            try:
                msg[0] = ("ok", str(create()), time.time_ns())
            except ConfigError as e:
                msg[0] = ("error", str(e), 0)
        dist.broadcast_object_list(msg, src=0)
        kind, value, span_base = msg[0]
        if kind == "error":
            raise ConfigError(value)
        run_dir = Path(value)
        run_dir.mkdir(parents=True, exist_ok=True)  # another node without a shared filesystem keeps its own copy
        workers: list = [None] * self.world_size
        dist.all_gather_object(workers, worker)
        return RunStart(run_dir, span_base, tuple(workers))

    def stop_signal(self) -> StopSignal:
        return StopSignal(self.abort if self.backend == "nccl" else None)

    def barrier(self) -> None:
        dist.barrier()

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` (pickled), in rank order on rank 0; None on the others. Ends with a barrier: no
        rank goes on (and tears its process group down) before rank 0 has received everything."""
        out: list | None = [None] * self.world_size if self.env.is_main else None
        dist.gather_object(obj, out, dst=0)
        dist.barrier()
        return out

    def abort(self) -> None:
        """End in-flight NCCL collectives now (thread-safe), so that no CUDA sync waits for a stopped peer."""
        if dist.is_initialized():
            dist.group.WORLD.abort()

    def shutdown(self, clean: bool) -> None:
        """After a clean run, destroy the group; after a failure or Ctrl-C, never wait on peers."""
        if not dist.is_initialized():
            return
        if clean:
            dist.destroy_process_group()
        elif self.backend == "nccl":
            self.abort()  # destroying could wait for collectives that a failed peer never joins


def make_distributed(env: Env) -> SingleProcess | Distributed:
    if env.world_size > 1:
        return Distributed(env)
    return SingleProcess()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    return t

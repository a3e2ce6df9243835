"""Process group for `torchrun`: DDP with nccl on GPUs, gloo on CPU. A single process gets `SingleProcess`.

    torchrun --nproc_per_node 2 scripts/train.py --profile

Rank 0 names and creates the run directory and broadcasts its name; every rank writes its own trace into it.
A collective timeout bounds how long a rank waits for a dead peer; torchrun itself ends the group when one
rank exits with an error.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.config import ConfigError
from trainer.env import Env

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)


class SingleProcess:
    world_size = 1

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def create_run_dir(self, create) -> Path:
        return create()

    def barrier(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class Distributed:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.world_size = env.world_size
        backend = "nccl" if env.is_cuda else "gloo"
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT,
                                device_id=env.device if env.is_cuda else None)

    def wrap(self, model: nn.Module) -> nn.Module:
        ids = [self.env.local_rank] if self.env.is_cuda else None
        return DistributedDataParallel(model, device_ids=ids)

    def create_run_dir(self, create) -> Path:
        """Rank 0 creates the directory; the others learn its path, or its error, by broadcast."""
        msg: list = [None]
        if self.env.is_main:
            try:
                msg[0] = ("ok", str(create()))
            except ConfigError as e:
                msg[0] = ("error", str(e))
        dist.broadcast_object_list(msg, src=0)
        kind, value = msg[0]
        if kind == "error":
            raise ConfigError(value)
        return Path(value)

    def barrier(self) -> None:
        dist.barrier()

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def make_distributed(env: Env) -> SingleProcess | Distributed:
    if env.world_size > 1:
        return Distributed(env)
    return SingleProcess()


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    return t

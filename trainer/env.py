"""The execution environment, decided once: device, autocast, memory format, rank, seed.

Everything device-dependent below this module reads `Env`; nothing else asks `torch.cuda.is_available()`.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Env:
    device: torch.device
    amp_dtype: torch.dtype | None  # bf16 autocast on CUDA, None for full precision
    channels_last: bool
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def autocast(self, cache_enabled: bool = True):
        """bf16 autocast on CUDA, a null context otherwise. CUDA-graph capture needs cache_enabled=False."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=cache_enabled)


def distributed_ranks() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when run directly."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def make_env(device: str, bf16: bool, channels_last: bool) -> Env:
    rank, world, local_rank = distributed_ranks()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return Env(dev, torch.bfloat16 if bf16 else None, channels_last, rank, world, local_rank)
    return Env(torch.device("cpu"), None, False, rank, world, local_rank)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too

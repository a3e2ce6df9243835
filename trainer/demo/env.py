"""The execution environment, decided once: device, autocast, memory format, rank, seed, and the
process-global knobs.

The device itself is resolved once from the flags (`config.resolve_device`, "auto" -> "cuda" or "cpu");
`make_env` turns it into an `Env` that everything device-dependent below reads. `configure_process` is the
one place that sets process-global state: cuDNN autotuning and TF32, `TEARDOWN_CUPTI` for profiled GPU runs,
`KINETO_LOG_LEVEL` for profiled CPU runs, `TORCH_NCCL_ASYNC_ERROR_HANDLING` for graphed DDP, and dynamo's DDP graph splitting for compiled DDP.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
from stepscope.capture.cupti import detach_after_cycles, quiet_kineto


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
    """`device` is "cpu" or "cuda" (already resolved); under torchrun LOCAL_RANK picks the GPU."""
    rank, world, local_rank = distributed_ranks()
    if device == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        return Env(dev, torch.bfloat16 if bf16 else None, channels_last, rank, world, local_rank)
    return Env(torch.device("cpu"), None, False, rank, world, local_rank)


def configure_process(env: Env, *, profiling: bool, cuda_graphs: bool, compile_mode: str | None,
                      wait: int = 1, repeat: int = 1) -> None:
    """Set every process-global knob the run needs, once, before the model is built. A value the user put
    in the environment wins over ours. ``wait`` and ``repeat``: the profiling schedule's."""
    if not env.is_cuda:
        if profiling:
            quiet_kineto(has_gpu=False)  # Kineto's "gpuGetDeviceCount failed" and "USDT" lines (cupti.py)
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if profiling:
        # every later kernel launch would pay for CUPTI staying attached after a cycle: +23% step time over
        # 600 ResNet-18 steps on an H100 (BENCHMARKS.md; capture/cupti.py)
        detach_after_cycles(wait, repeat)
    if env.world_size > 1 and cuda_graphs:
        # PyTorch's recipe for capturing DDP: the NCCL watchdog's async error handling must stay out of a
        # captured backward; collectives inside the graph are not watched anyway, and torchrun still ends
        # the group when a rank dies.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    if env.world_size > 1 and compile_mode == "reduce-overhead":
        # one forward and one backward CUDA graph instead of one per DDP bucket (see distributed.wrap)
        torch._dynamo.config.optimize_ddp = False


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too

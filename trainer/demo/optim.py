"""Nesterov SGD with a linear warm-up then linear decay, and the label-smoothed loss.

On CUDA the optimizer is the fused SGD kernel with the learning rate held in a device tensor: the scheduler
updates it in place (`fill_`), so a captured CUDA graph picks up each new value without re-capture and
without a host sync (the foreach path would call `.item()` on a tensor LR).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from stepscope.demo.config import OptimConfig
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def build_optimizer(cfg: OptimConfig, model: nn.Module, device: torch.device, batch_size: int,
                    total_steps: int) -> tuple[torch.optim.SGD, LambdaLR]:
    peak = cfg.lr * batch_size / 64  # linear scaling rule from the batch-64 default
    if device.type == "cuda":
        opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(peak, device=device), momentum=cfg.momentum,
                              nesterov=True, weight_decay=cfg.weight_decay, fused=True)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=peak, momentum=cfg.momentum, nesterov=True,
                              weight_decay=cfg.weight_decay)
    warmup = max(1, int(cfg.warmup_frac * total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return opt, LambdaLR(opt, factor)


def loss_fn(label_smoothing: float):
    def fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, label_smoothing=label_smoothing)

    return fn

"""The elementwise ops a ResNet block uses, injected into the model so they can be swapped.

`native` is PyTorch's (`relu(x)` and `relu(x + residual)`: two kernels each way); `custom` is our
`stepscope::relu` and the fused `stepscope::add_relu` from kernels/, forward and backward.
The choice is made once, by `make_elementwise(name)`; the model never branches on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Act = Callable[[torch.Tensor], torch.Tensor]
AddAct = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Elementwise:
    name: str
    act: Act  # relu(x)
    add_act: AddAct  # relu(x + residual), the end of every residual block


def _native_add_relu(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.relu(x + residual)


def make_elementwise(name: str) -> Elementwise:
    if name == "native":
        return Elementwise("native", F.relu, _native_add_relu)
    if name == "custom":
        from stepscope import kernels

        return Elementwise("custom", kernels.relu, kernels.add_relu)
    raise ValueError(f"unknown elementwise ops {name!r}; valid: native, custom")


class Activation(nn.Module):
    """relu(x) through the injected op; a module so it shows in the profiler's Module view."""

    def __init__(self, ops: Elementwise) -> None:
        super().__init__()
        self.fn = ops.act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class AddActivation(nn.Module):
    """relu(x + residual) through the injected (possibly fused) op."""

    def __init__(self, ops: Elementwise) -> None:
        super().__init__()
        self.fn = ops.add_act

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.fn(x, residual)

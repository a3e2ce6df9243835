"""Typed wrappers for the stepscope elementwise ops (torch.ops.stepscope.*).

    from stepscope import kernels
    kernels.unavailable_reason("cuda")   # None, or one line saying what is missing
    y = kernels.add_relu(a, b)           # == torch.relu(a + b) in one pass; backward runs our kernels

The first call of any wrapper (or of unavailable_reason/load) builds the library, or reuses the
cached build, and loads it; from then on torch.ops.stepscope.<op> exist too. Every op takes
fp32, fp16, bf16 or fp64 tensors of one shape, dtype and device (no broadcasting, no promotion),
any strides, and returns a new tensor laid out like its first input. With out=, the result is
written into `out` instead (same shape, dtype and device; no autograd).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from stepscope.kernels import loader
from torch import Tensor

_READY: dict[str, bool] = {}  # device type -> library loaded and usable there


def unavailable_reason(device_type: str) -> str | None:
    """None if the ops can run on `device_type` ("cpu" or "cuda"), else one line saying what is missing.

    The first call builds (or loads the cached) library, which can take a minute or two.
    """
    if device_type not in loader.DEVICE_TYPES:
        raise ValueError(f"device_type must be one of {', '.join(loader.DEVICE_TYPES)}; got {device_type!r}")
    return loader.load().reasons[device_type]


def load() -> str:
    """Builds (first time) and loads the library; returns its path. Raises RuntimeError if it can't."""
    result = loader.load()
    if result.library is None:
        raise RuntimeError(result.reasons["cpu"])
    return result.library


@torch.compiler.disable
def _make_ready(device_type: str) -> None:
    reason = loader.load().reasons.get(device_type, loader.load().reasons["cpu"])
    if reason is not None:
        raise RuntimeError(reason)
    _READY[device_type] = True


def _require(*tensors: Tensor) -> None:
    for t in tensors:
        if not _READY.get(t.device.type, False):  # after the first call: one dict lookup
            _make_ready(t.device.type)


def _no_grad_for_out(name: str, *inputs: Tensor) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        raise RuntimeError(f"kernels.{name}: out= does not support autograd, but an input requires grad")


def _dispatch(name: str, inputs: tuple[Tensor, ...], out: Tensor | None) -> Tensor:
    """torch.ops.stepscope.<name>(*inputs), or <name>_out into `out` (no autograd there)."""
    _require(*inputs)
    if out is None:
        return getattr(torch.ops.stepscope, name)(*inputs)
    _no_grad_for_out(name, *inputs)
    getattr(torch.ops.stepscope, f"{name}_out")(*inputs, out=out)
    return out


def add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """a + b. Backward: (grad, grad)."""
    return _dispatch("add", (a, b), out)


def relu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """max(x, 0), NaN passing through as in torch.relu. Backward: relu_backward(grad, result)."""
    return _dispatch("relu", (x,), out)


def add_relu(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """relu(a + b) in one pass (the fused residual). Backward: relu_backward(grad, result) for both."""
    return _dispatch("add_relu", (a, b), out)


def square(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """x * x. Backward: square_backward(grad, x) = 2 x grad."""
    return _dispatch("square", (x,), out)


def relu_backward(grad: Tensor, result: Tensor, *, out: Tensor | None = None) -> Tensor:
    """grad where result > 0, else 0 (relu's gradient, given relu's output)."""
    return _dispatch("relu_backward", (grad, result), out)


def square_backward(grad: Tensor, x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """2 * x * grad (square's gradient)."""
    return _dispatch("square_backward", (grad, x), out)


def kernel_version_count(family: str = "elementwise") -> int:
    """How many CUDA kernel versions `family` has (numbered 1..count; see csrc/cuda/<family>.cu)."""
    load()
    return torch.ops.stepscope.kernel_version_count(family)


def set_kernel_version(version: int, family: str = "elementwise") -> int:
    """Selects CUDA kernel version `version` of `family` (0 = default, the best); returns the previous."""
    load()
    return torch.ops.stepscope.set_kernel_version(family, version)


@contextlib.contextmanager
def kernel_version(version: int, family: str = "elementwise") -> Iterator[None]:
    """Runs the block with CUDA kernel version `version` of `family`, then restores the previous one."""
    previous = set_kernel_version(version, family)
    try:
        yield
    finally:
        set_kernel_version(previous, family)

"""Typed wrappers for the stepscope elementwise ops (torch.ops.stepscope.*).

    from stepscope import kernels
    kernels.unavailable_reason("cuda")   # None, or one line saying what is missing
    y = kernels.add_relu(a, b)           # == torch.relu(a + b) in one pass; backward runs our kernels

The first call of any wrapper (or of unavailable_reason/load) builds the library, or reuses the
cached build, and loads it; from then on torch.ops.stepscope.<op> exist too. Every op takes
fp32, fp16, bf16 or fp64 tensors of one shape, dtype and device (no broadcasting, no promotion),
any strides, and returns a new tensor laid out like its first input. With out=, the result is
written into `out` instead (same shape, dtype and device; no autograd).

The wrappers are thin: after the first call, `kernels.add_relu(a, b)` is one Python call plus the library's
direct entry point (csrc/python_calls.cpp: the dispatcher call that torch.ops.stepscope.add_relu makes, without
its boxing), or under torch.compile `torch.ops.stepscope.add_relu(a, b)`; dispatch and autograd run in C++
(csrc/autograd.cpp).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from stepscope.kernels import loader
from torch import Tensor

__all__ = [
    "add",
    "add_relu",
    "kernel_version",
    "kernel_version_count",
    "load",
    "relu",
    "relu_backward",
    "set_kernel_version",
    "square",
    "square_backward",
    "unavailable_reason",
]


def unavailable_reason(device_type: str) -> str | None:
    """None if the ops can run on `device_type` ("cpu" or "cuda"), else one line saying what is missing.

    The first call builds (or loads the cached) library, which can take a minute or two.
    """
    if device_type not in loader.DEVICE_TYPES:
        raise ValueError(f"device_type must be one of {', '.join(loader.DEVICE_TYPES)}; got {device_type!r}")
    return _loaded().reasons[device_type]


def load() -> str:
    """Builds (first time) and loads the library; returns its path. Raises RuntimeError if it can't."""
    result = _loaded()
    if result.library is None:
        raise RuntimeError(result.reasons["cpu"])
    return result.library


def _loaded() -> loader.LoadResult:
    """loader.load(), and from then on the wrappers call torch.ops.stepscope, or in eager mode the library's
    direct entry points (csrc/python_calls.cpp), directly."""
    global _ops, _calls
    result = loader.load()
    if result.library is not None:
        _ops, _calls = torch.ops.stepscope, result.calls
    return result


class _Unloaded:
    """Stands in for torch.ops.stepscope until the library is loaded: the first wrapper call loads it.

    Loading before torch.compile traces a wrapper (kernels.load() or unavailable_reason(), as the
    trainer does) keeps that trace free of this object; otherwise its first trace breaks the graph here.
    """

    @torch.compiler.disable
    def __getattr__(self, name: str):
        load()
        return getattr(torch.ops.stepscope, name)


_ops = _Unloaded()  # torch.ops.stepscope once loaded
# Once loaded: add, add_relu and relu without torch.ops' boxed call (the same dispatcher call, about 2 µs less
# per call from Python). Eager mode only: Dynamo cannot trace into them, so under torch.compile the wrappers
# call torch.ops.stepscope.*, which it traces.
_calls = None
_is_compiling = torch.compiler.is_compiling  # one global lookup per call; Dynamo still reads it as "tracing"


def _unavailable(inputs: tuple[Tensor, ...], error: Exception) -> Exception:
    """The one-line reason as a RuntimeError if an input's device has no kernels in this build, else `error`."""
    reasons = loader.load().reasons
    for t in inputs:
        reason = reasons.get(t.device.type)
        if reason is not None:
            return RuntimeError(reason)
    return error


def _into(name: str, inputs: tuple[Tensor, ...], out: Tensor) -> Tensor:
    """torch.ops.stepscope.<name>_out(*inputs, out=out); returns out. No autograd there."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        raise RuntimeError(f"kernels.{name}: out= does not support autograd, but an input requires grad")
    try:
        getattr(_ops, f"{name}_out").default(*inputs, out=out)
    except NotImplementedError as e:
        raise _unavailable(inputs, e) from e
    return out


# Each wrapper calls the op's OpOverload directly: the least Python between the caller and the
# dispatcher, the common case (eager, no out=) tested first (the NotImplementedError branch costs nothing
# unless taken).


def add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """a + b. Backward: (grad, grad)."""
    try:
        if out is None and _calls is not None and not _is_compiling():
            return _calls.add(a, b)
        if out is not None:
            return _into("add", (a, b), out)
        return _ops.add.default(a, b)
    except NotImplementedError as e:
        raise _unavailable((a, b), e) from e


def relu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """max(x, 0), NaN passing through as in torch.relu. Backward: relu_backward(grad, result)."""
    try:
        if out is None and _calls is not None and not _is_compiling():
            return _calls.relu(x)
        if out is not None:
            return _into("relu", (x,), out)
        return _ops.relu.default(x)
    except NotImplementedError as e:
        raise _unavailable((x,), e) from e


def add_relu(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """relu(a + b) in one pass (the fused residual). Backward: relu_backward(grad, result) for both."""
    try:
        if out is None and _calls is not None and not _is_compiling():
            return _calls.add_relu(a, b)
        if out is not None:
            return _into("add_relu", (a, b), out)
        return _ops.add_relu.default(a, b)
    except NotImplementedError as e:
        raise _unavailable((a, b), e) from e


def square(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """x * x. Backward: square_backward(grad, x) = 2 x grad."""
    if out is not None:
        return _into("square", (x,), out)
    try:
        return _ops.square.default(x)
    except NotImplementedError as e:
        raise _unavailable((x,), e) from e


def relu_backward(grad: Tensor, result: Tensor, *, out: Tensor | None = None) -> Tensor:
    """grad where result > 0, else 0 (relu's gradient, given relu's output)."""
    if out is not None:
        return _into("relu_backward", (grad, result), out)
    try:
        return _ops.relu_backward.default(grad, result)
    except NotImplementedError as e:
        raise _unavailable((grad, result), e) from e


def square_backward(grad: Tensor, x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """2 * x * grad (square's gradient)."""
    if out is not None:
        return _into("square_backward", (grad, x), out)
    try:
        return _ops.square_backward.default(grad, x)
    except NotImplementedError as e:
        raise _unavailable((grad, x), e) from e


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

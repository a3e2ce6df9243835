"""Fake impls (torch.compile, meta tensors) and autograd formulas for the stepscope ops.

Imported by kernels.build right after the library is loaded (the ops must exist first); the C++
schemas name this module with set_python_module, so torch imports it by itself when needed.
The fake impls word their errors exactly as csrc/checks.h does (tests assert both texts), and
every backward formula runs our own ops, so backward runs our kernels too.
"""

from __future__ import annotations

import torch
from torch import Tensor

ARGS = {  # op -> argument names, as in the schemas of csrc/ops.cpp
    "add": ("a", "b"),
    "relu": ("x",),
    "add_relu": ("a", "b"),
    "square": ("x",),
    "relu_backward": ("grad", "result"),
    "square_backward": ("grad", "x"),
}
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check_same(op: str, name: str, t: Tensor, ref_name: str, ref: Tensor) -> None:
    if t.device != ref.device:
        raise RuntimeError(
            f"{op}: argument '{name}' is on device {t.device} but '{ref_name}' is on device {ref.device}; "
            "they must be on the same device"
        )
    if t.dtype != ref.dtype:
        raise RuntimeError(
            f"{op}: argument '{name}' has dtype {t.dtype} but '{ref_name}' has dtype {ref.dtype}; "
            "they must match (stepscope ops do no type promotion)"
        )
    if t.shape != ref.shape:
        raise RuntimeError(
            f"{op}: argument '{name}' has shape {list(t.shape)} but '{ref_name}' has shape {list(ref.shape)}; "
            "they must match (stepscope ops do not broadcast)"
        )


def check_inputs(op: str, names: tuple[str, ...], inputs: tuple[Tensor, ...]) -> None:
    """Python twin of check_inputs in csrc/checks.h (op is e.g. "stepscope::add")."""
    for k, (name, t) in enumerate(zip(names, inputs, strict=True)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise RuntimeError(
                f"{op}: argument '{name}' has dtype {t.dtype}; "
                "supported dtypes: torch.float32, torch.float16, torch.bfloat16, torch.float64"
            )
        if k > 0:
            _check_same(op, name, t, names[0], inputs[0])


def _register_fakes(name: str, names: tuple[str, ...]) -> None:
    op, op_out = f"stepscope::{name}", f"stepscope::{name}_out"

    def fake(*inputs: Tensor) -> Tensor:
        check_inputs(op, names, inputs)
        return torch.empty_like(inputs[0])  # same rule as the C++ op: laid out like the first input

    def fake_out(*inputs: Tensor, out: Tensor) -> None:
        check_inputs(op_out, names, inputs)
        _check_same(op_out, "out", out, names[0], inputs[0])

    torch.library.register_fake(op, fake)
    torch.library.register_fake(op_out, fake_out)


for _name, _names in ARGS.items():
    _register_fakes(_name, _names)


# ---------------------------------------------------------------- autograd


def _save_result(ctx, inputs: tuple[Tensor, ...], output: Tensor) -> None:
    ctx.save_for_backward(output)


def _save_inputs(ctx, inputs: tuple[Tensor, ...], output: Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _add_backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
    return grad, grad


def _relu_backward(ctx, grad: Tensor) -> Tensor:
    (result,) = ctx.saved_tensors
    return torch.ops.stepscope.relu_backward(grad, result)


def _add_relu_backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
    (result,) = ctx.saved_tensors
    g = torch.ops.stepscope.relu_backward(grad, result)
    return g, g


def _square_backward(ctx, grad: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    return torch.ops.stepscope.square_backward(grad, x)


# Double backward. relu_backward(g, r) = g * [r > 0]: linear in g, and its derivative in r is zero
# almost everywhere (as for torch's threshold_backward).
def _relu_backward_backward(ctx, gg: Tensor) -> tuple[Tensor, None]:
    _, result = ctx.saved_tensors
    return torch.ops.stepscope.relu_backward(gg, result), None


# square_backward(g, x) = 2 g x, symmetric in g and x: each partial is square_backward(gg, other).
def _square_backward_backward(ctx, gg: Tensor) -> tuple[Tensor | None, Tensor | None]:
    grad, x = ctx.saved_tensors
    d_grad = torch.ops.stepscope.square_backward(gg, x) if ctx.needs_input_grad[0] else None
    d_x = torch.ops.stepscope.square_backward(gg, grad) if ctx.needs_input_grad[1] else None
    return d_grad, d_x


torch.library.register_autograd("stepscope::add", _add_backward)
torch.library.register_autograd("stepscope::relu", _relu_backward, setup_context=_save_result)
torch.library.register_autograd("stepscope::add_relu", _add_relu_backward, setup_context=_save_result)
torch.library.register_autograd("stepscope::square", _square_backward, setup_context=_save_inputs)
torch.library.register_autograd("stepscope::relu_backward", _relu_backward_backward, setup_context=_save_inputs)
torch.library.register_autograd(
    "stepscope::square_backward", _square_backward_backward, setup_context=_save_inputs
)

"""Fake impls of the stepscope ops (torch.compile, meta tensors), registered with torch.library.register_fake.

Imported by kernels.loader right after the library is loaded (the ops must exist first); the C++
library names this module with set_python_module, so torch imports it by itself when needed.
Autograd is not here: it is registered in C++ (csrc/autograd.cpp), so eager calls never enter Python.

The ops are found in the library itself: every stepscope::X with a twin stepscope::X_out is an
elementwise op, and its argument names come from its schema, so adding an op needs nothing here.
The fake impls word their errors exactly as csrc/checks.h does (tests assert both texts).
"""

from __future__ import annotations

import torch
from torch import Tensor

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def elementwise_ops() -> dict[str, tuple[str, ...]]:
    """Every elementwise op of the loaded library: name -> its Tensor argument names, in schema order."""
    names = {n.removeprefix("stepscope::") for n in torch._C._dispatch_get_all_op_names() if n.startswith("stepscope::")}
    ops = {}
    for name in sorted(n for n in names if f"{n}_out" in names):
        schema = getattr(torch.ops.stepscope, name).default._schema
        ops[name] = tuple(arg.name for arg in schema.arguments)
    return ops


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


ARGS = elementwise_ops()  # op -> argument names
for _name, _names in ARGS.items():
    _register_fakes(_name, _names)

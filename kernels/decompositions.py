"""What Inductor compiles instead of our ops: each stepscope op written with ATen ops it can fuse.

To Inductor (torch.compile's default backend) a custom op is opaque: it knows the op's output
shapes (from the fake impl) but not its math, so it calls our kernel as an extern kernel and cannot
fuse across it. In a ResNet, eager runs BatchNorm, then `relu(x + residual)`; Inductor would fuse
BN's normalization, the add and the relu (and in backward, relu's mask with BN's backward) into
one kernel each way, but only if it sees them as ATen ops. An opaque stepscope::add_relu splits
that into two kernels plus our launch, which costs more than native ops under torch.compile.

So every op gets a decomposition in Inductor's decomposition table
(torch._inductor.decomposition.register_decomposition). Inductor applies it while tracing
(AOTAutograd, below autograd): forward and backward graphs hold aten.add / aten.relu / aten.where
where we had stepscope ops, and Inductor fuses them with their neighbours. Eager mode, CUDA graphs
and every other backend (aot_eager, opcheck) still run our kernels. Autograd is unaffected: it is
our C++ autograd (csrc/autograd.cpp) that AOTAutograd traces; only the ops it calls are decomposed.

kernels.loader calls register() after loading the library (it also drops the copy of the table that
Inductor caches at its first compile, which would not see entries added later); importing torch._inductor.decomposition
costs about 0.3 s once torch._dynamo is imported (about 2 s if not). The _out ops stay opaque
(Inductor functionalizes them and calls our kernel); models use the functional ops.

    python -m pytest -q tests/test_kernels.py -k decomposition   # checks values and the compiled code
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# op -> its math in ATen ops, exactly as the kernel computes it (csrc/elementwise.h).
DECOMPOSITIONS: dict[str, Callable[..., Tensor]] = {
    "add": lambda a, b: torch.add(a, b),
    "relu": lambda x: torch.relu(x),
    "add_relu": lambda a, b: torch.relu(torch.add(a, b)),
    "square": lambda x: torch.mul(x, x),
    "relu_backward": lambda grad, result: torch.where(result > 0, grad, 0.0),
    "square_backward": lambda grad, x: torch.mul(torch.mul(x, 2), grad),
}


def register() -> None:
    """Adds every op of DECOMPOSITIONS to Inductor's decomposition table (idempotent)."""
    from torch._inductor import decomposition as inductor

    for name, fn in DECOMPOSITIONS.items():
        op = getattr(torch.ops.stepscope, name).default
        if op not in inductor.decompositions:
            inductor.register_decomposition(op)(fn)
    forget_inductors_copy()


def forget_inductors_copy() -> None:
    """Drops the merged copy of its table that Inductor keeps from its first compile on.

    Inductor compiles with select_decomp_table(), which returns a functools.cache'd copy of the table
    (fast_random_decomps): entries added after the process's first compile are ignored until the copy
    is dropped. Our library may well be loaded after something else was compiled.
    """
    from torch._inductor import decomposition as inductor

    cache_clear = getattr(getattr(inductor, "fast_random_decomps", None), "cache_clear", None)
    if cache_clear is not None:
        cache_clear()

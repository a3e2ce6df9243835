"""stepscope's own elementwise ops: CPU (C++) and CUDA kernels registered as torch.ops.stepscope.*.

    from stepscope import kernels                      # never fails: nothing is built or loaded yet
    kernels.unavailable_reason("cuda")  # None, or one line: what is missing (builds on first call)
    y = kernels.add_relu(a, b)          # builds/loads on first use; autograd and torch.compile work

Prebuild with `python -m stepscope.kernels.build`. See kernels/ops.py for the op semantics and
kernels/csrc/cuda/elementwise.cu for the CUDA kernel versions.
"""

from stepscope.kernels.ops import (
    add,
    add_relu,
    kernel_version,
    kernel_version_count,
    load,
    relu,
    relu_backward,
    set_kernel_version,
    square,
    square_backward,
    unavailable_reason,
)

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

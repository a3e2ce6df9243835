"""stepscope's own elementwise ops: CPU (C++) and CUDA kernels registered as torch.ops.stepscope.*.

    from stepscope import kernels       # never fails; registers torch.ops.stepscope.* at once if already built
    kernels.unavailable_reason("cuda")  # None, or one line: what is missing (builds on first call)
    y = kernels.add_relu(a, b)          # builds/loads on first use if not built yet; autograd, compile work

Prebuild with `python -m stepscope.kernels.build`. See kernels/ops.py for the op semantics and
kernels/csrc/cuda/elementwise.cu for the CUDA kernel versions; kernels/README.md for how the
ops reach the dispatcher, autograd and torch.compile, and for adding an op.
"""

from stepscope.kernels import loader, ops
from stepscope.kernels.ops import *  # noqa: F403  every wrapper, as listed in ops.__all__

__all__ = ops.__all__

loader.load_if_built()  # a library already built for this torch and these sources: its ops exist from here on

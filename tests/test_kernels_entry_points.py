"""The stepscope ops' direct Python entry points (kernels/csrc/python_calls.cpp) against torch.ops.stepscope: the
same results, gradients and errors in eager mode; torch.ops, traced without a graph break, under torch.compile.
CPU; the CUDA side runs in tests/test_kernels_cuda.py through the same wrappers."""

from __future__ import annotations

import pytest
import torch
from stepscope import kernels


def test_eager_calls_take_the_direct_entry_points_and_compile_traces_torch_ops():
    """In eager mode the wrappers call the library's own entry points (csrc/python_calls.cpp), with the same
    results, gradients and errors as torch.ops; under torch.compile they call torch.ops, with no graph break."""
    from stepscope.kernels import ops

    assert kernels.unavailable_reason("cpu") is None
    assert ops._calls is not None and {"add", "add_relu", "relu"} <= set(dir(ops._calls))
    a, b = torch.randn(257), torch.randn(257)
    assert torch.equal(ops._calls.add_relu(a, b), torch.ops.stepscope.add_relu.default(a, b))
    assert torch.equal(kernels.add(a, b), a + b) and torch.equal(kernels.relu(a), torch.relu(a))
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()
    ops._calls.add_relu(ag, bg).sum().backward()
    assert torch.equal(ag.grad, (a + b > 0).to(a.dtype)) and torch.equal(bg.grad, ag.grad)
    with pytest.raises(RuntimeError, match="argument 'b' has shape \\[3\\] but 'a' has shape \\[257\\]"):
        kernels.add_relu(a, torch.randn(3))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda x, y: kernels.relu(kernels.add_relu(x, y)) * 2)(a, b)
    assert explained.graph_break_count == 0 and explained.graph_count == 1

"""CUDA-only behaviour of the stepscope ops: kernel versions, graphs, torch.compile, streams, profiler names.

    pytest -q tests/test_kernels_cuda.py tests/test_kernels.py    # on a GPU machine (skipped without one)

The value/layout/gradient/opcheck matrix runs on cuda from test_kernels.py's cuda-parametrized
cases; this file adds what only a GPU has. Needs about 20 GiB of GPU memory (the int64 test).
"""

from __future__ import annotations

import pytest
import torch
from stepscope import kernels
from stepscope.capture.phases import Phases
from stepscope.demo.config import ModelConfig, OptimConfig
from stepscope.demo.env import Env
from stepscope.demo.models import build_model
from stepscope.demo.optim import build_optimizer, loss_fn
from stepscope.demo.step import build_step
from test_kernels import (
    ARITY,
    DTYPES,
    OPS,
    assert_exact,
    block,
    block_inputs,
    compiled_code,
    make,
    reference,
    run,
)

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")]
CUDA = "cuda"


@pytest.fixture(scope="module", autouse=True)
def library():
    kernels.load()
    assert kernels.unavailable_reason("cuda") is None


def profiled(fn) -> tuple[set[str], list[str]]:
    """(CPU op names, CUDA kernel names) that running fn produces under torch.profiler."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        torch.cuda.synchronize()  # sync point: the kernels must have run before the profile closes
    events = prof.events()
    cpu_ops = {e.name for e in events if e.device_type == torch.autograd.DeviceType.CPU}
    kernel_names = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    return cpu_ops, kernel_names


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_version_exact_and_selected(version):
    assert kernels.kernel_version_count() == 3
    with kernels.kernel_version(version):
        for op in OPS:
            for dtype in [*DTYPES, torch.float64]:
                for numel in [1, 3, 7, 9, 4097, 2**20 + 3]:
                    inputs = [make((numel,), "contiguous", dtype, CUDA) for _ in range(ARITY[op])]
                    buffer = torch.full((numel + 1,), float("nan"), dtype=dtype, device=CUDA)
                    assert_exact(run(op, *inputs, out=buffer[:numel]), reference(op, *inputs))
                    assert buffer[-1].isnan(), "wrote past the end of `out`"
        aligned = [make((4097,), "contiguous", torch.float32, CUDA) for _ in range(2)]
        _, names = profiled(lambda: kernels.add_relu(*aligned))
        assert len(names) == 1 and f"kernel{version}<stepscope::AddReluOp" in names[0], names
    misaligned = [make((4097,), "sliced", torch.float32, CUDA) for _ in range(2)]
    _, names = profiled(lambda: kernels.add_relu(*misaligned))
    assert "kernel1<stepscope::AddReluOp" in names[0], names  # vector versions need 16-byte alignment
    mixed = [make((64, 33), "transposed", torch.float32, CUDA), make((64, 33), "contiguous", torch.float32, CUDA)]
    _, names = profiled(lambda: kernels.add_relu(*mixed))
    assert "kernel_strided<stepscope::AddReluOp" in names[0], names


def test_set_kernel_version_errors():
    with pytest.raises(RuntimeError) as info:
        kernels.set_kernel_version(7)
    assert str(info.value) == (
        "stepscope::set_kernel_version: family 'elementwise' has versions 1..3 (0 selects the default, 2), got 7"
    )
    with pytest.raises(RuntimeError) as info:
        kernels.set_kernel_version(1, family="nope")
    assert str(info.value) == "stepscope::set_kernel_version: unknown kernel family 'nope'; known: elementwise"


@pytest.mark.parametrize("op", OPS)
def test_functional_output_lands_in_poisoned_block(op):
    for dtype in DTYPES:
        inputs = [make((2**20 + 3,), "contiguous", dtype, CUDA) for _ in range(ARITY[op])]
        poison = torch.full((2**20 + 3,), float("nan"), dtype=dtype, device=CUDA)
        block = poison.data_ptr()
        del poison  # the caching allocator hands this NaN-filled block to the op's output
        out = run(op, *inputs)
        assert out.data_ptr() == block
        assert_exact(out, reference(op, *inputs))


def test_int64_indexing_past_2_pow_31_elements():
    n = 2**31 + 5
    x = torch.randn(n, dtype=torch.float16, device=CUDA)
    for version in (1, 2, 3):
        with kernels.kernel_version(version):
            assert torch.equal(kernels.relu(x), torch.relu(x))
    del x
    grad = torch.randn(2**16, 2**15 + 1, dtype=torch.float16, device=CUDA)
    result = torch.randn(2**15 + 1, 2**16, dtype=torch.float16, device=CUDA).t()  # strided kernel
    assert torch.equal(kernels.relu_backward(grad, result), torch.where(result > 0, grad, 0))


def test_device_mismatch_error():
    a, b = torch.ones(2, device=CUDA), torch.ones(2)
    with pytest.raises(RuntimeError) as info:
        kernels.add(a, b)
    assert str(info.value) == (
        "stepscope::add: argument 'b' is on device cpu but 'a' is on device cuda:0; they must be on the same device"
    )


def test_cuda_graph_capture_and_replay_with_fresh_inputs():
    a, b = torch.randn(2**20 + 3, device=CUDA), torch.randn(2**20 + 3, device=CUDA)
    w = torch.randn(2**20 + 3, device=CUDA, requires_grad=True)
    static_out = torch.empty_like(a)

    def step():
        y = kernels.add_relu(a, b)
        kernels.relu(a, out=static_out)
        kernels.square(kernels.add_relu(w, y)).sum().backward()
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graphs requires
        for _ in range(3):
            w.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    w.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step()
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        b.copy_(torch.randn_like(b))
        graph.replay()
        torch.cuda.synchronize()  # sync point: read the replay's results
        assert_exact(y, torch.relu(a + b))
        assert_exact(static_out, torch.relu(a))
        h = torch.relu(w.detach() + torch.relu(a + b))
        torch.testing.assert_close(w.grad, 2 * h * (h > 0))


def conv_block(channels_last: bool):
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, device=CUDA)
    if channels_last:
        conv = conv.to(memory_format=torch.channels_last)

    def ours(x, skip):
        return kernels.square(kernels.add_relu(conv(x), skip))

    def eager(x, skip):
        return torch.square(torch.relu(conv(x) + skip))

    return conv, ours, eager


def inputs_for(channels_last: bool):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(8, 16, 20, 20, device=CUDA).contiguous(memory_format=fmt)
    return x, torch.randn(8, 16, 20, 20, device=CUDA).contiguous(memory_format=fmt)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("ops", ["stepscope", "native"])  # native: the control, same loop on PyTorch's ops
def test_torch_compile_training_with_conv_before_the_op(ops, channels_last, monkeypatch):
    # Full fp32 convolutions, so compiled and eager differ only by summation order.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.compiler.reset()
    conv, ours, eager = conv_block(channels_last)
    compiled = torch.compile(ours if ops == "stepscope" else eager, fullgraph=True)
    for _ in range(3):
        x, skip = inputs_for(channels_last)
        got = compiled(x, skip)
        got.sum().backward()
        got_grad = conv.weight.grad.clone()
        conv.weight.grad = None
        expected = eager(x, skip)
        expected.sum().backward()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_grad, conv.weight.grad, rtol=1e-4, atol=1e-4)
        conv.weight.grad = None


@pytest.mark.parametrize("ops", ["custom", "native"])  # native: the control
def test_reduce_overhead_training_in_the_trainers_step_matches_eager(ops, monkeypatch):
    """`--compile reduce-overhead` as the trainer runs it (trainer.step.CompiledStep: a compiled ResNet, eager
    loss and fused SGD, a new cudagraph-trees step per call): warm-up, recording and replays give eager's
    per-step losses, with our ops as with PyTorch's.

    A hand-written loop (compiled conv block, `out.sum().backward()`, an eager reference pass in between) fails
    on torch 2.11 with "accessing tensor output of CUDAGraphs that has been overwritten", for PyTorch's own ops
    as much as for ours (seen on H100 and H200), so the test runs the trainer's step instead.
    """
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    env = Env(torch.device(CUDA), None, False)  # fp32, so compiled and eager differ only by summation order
    g = torch.Generator(device=CUDA).manual_seed(0)
    batches = [(torch.randn(32, 3, 32, 32, device=CUDA, generator=g),
                torch.randint(0, 10, (32,), device=CUDA, generator=g)) for _ in range(6)]
    losses = {}
    for kind in ("eager", "compile"):
        torch.compiler.reset()
        torch.manual_seed(0)
        model = build_model(ModelConfig(arch="resnet8", ops=ops)).to(CUDA)
        opt, _sched = build_optimizer(OptimConfig(), model, env.device, 32, len(batches))
        step = build_step(kind, model, opt, loss_fn(0.1), env, Phases(False), compile_mode="reduce-overhead")
        losses[kind] = []
        for x, y in batches:
            step(x, y)
            losses[kind].append(step.take_loss()[0].item())  # sync point: a test, per step
    assert losses["compile"] == pytest.approx(losses["eager"], rel=5e-3)
    assert len(set(losses["eager"])) == len(batches)  # the model trains: every step's loss differs


@pytest.mark.parametrize("channels_last", [False, True])
def test_torch_compile_reduce_overhead_inference(channels_last, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.compiler.reset()
    _, ours, eager = conv_block(channels_last)
    compiled = torch.compile(ours, fullgraph=True, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            torch.compiler.cudagraph_mark_step_begin()  # inference: each call is a new step
            x, skip = inputs_for(channels_last)
            torch.testing.assert_close(compiled(x, skip), eager(x, skip), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_inductor_fuses_our_ops_into_its_own_kernels(mode, monkeypatch):
    # Our ops reach Inductor as ATen ops (kernels/decompositions.py): BatchNorm + add_relu + square fuse
    # into Triton kernels, forward and backward, and no stepscope op is called from the compiled code.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)  # compile for real
    inputs = block_inputs(CUDA, torch.float32)
    y, grads, code = compiled_code(block, *inputs, mode=mode)
    assert "torch.ops.stepscope" not in code and "@triton.jit" in code  # comments may name the source ops
    y_eager = block(*inputs)
    torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-4)
    for got, expected in zip(grads, torch.autograd.grad(y_eager.sum(), inputs), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_side_stream():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # Keep `side` busy first: a kernel launched on any other stream would run before the
        # inputs below are written and read garbage. (torch.cuda._sleep is PyTorch's own test helper.)
        torch.cuda._sleep(100_000_000)
        a, b = torch.randn(2**22, device=CUDA), torch.randn(2**22, device=CUDA)
        y = kernels.add_relu(a, b)
        expected = torch.relu(a + b)
    side.synchronize()  # sync point: results of the side stream
    assert_exact(y, expected)


def test_autocast_bf16_and_profiler_names():
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, device=CUDA)
    x, skip = inputs_for(channels_last=True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = kernels.add_relu(conv(x), skip.bfloat16())
        assert y.dtype == torch.bfloat16  # no upcast
        y.float().sum().backward()

    cpu_ops, names = profiled(step)
    assert {"stepscope::add_relu", "stepscope::relu_backward"} <= cpu_ops
    assert any("AddReluOp, c10::BFloat16" in n for n in names), names
    assert any("ReluBackwardOp, c10::BFloat16" in n for n in names), names


def test_bench_step_ops_checks_then_times_both_steps(tmp_path):
    """scripts/bench_step_ops.py: native and custom ResNet-8 trainer steps from the same weights give the same
    loss and gradients, then both are timed in one process and the JSON says so."""
    import json
    import subprocess
    import sys

    from trainrun import REPO

    out = tmp_path / "step_ops.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_step_ops.py"), "--arch", "resnet8",
                           "--steps", "20", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["variant"] == "eager" and result["steps"] == 20
    assert set(result["median_ms"]) == {"native", "custom"} and all(v > 0 for v in result["median_ms"].values())
    assert result["custom_over_native"] == pytest.approx(result["median_ms"]["custom"] / result["median_ms"]["native"])
    assert "custom/native" in done.stdout

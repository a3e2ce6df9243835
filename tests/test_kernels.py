"""Tests of the stepscope ops (kernels/): values, layouts, poisoned outputs, gradients, opcheck, fuzz, errors.

    pytest -q tests/test_kernels.py     # CPU here (CI); on a GPU machine the cuda cases run too

Every value test runs on cpu and on cuda (skipped without a GPU) against `reference`: PyTorch on
the inputs widened to op-math (fp32, or fp64 for fp64) and rounded once, which is what eager
PyTorch computes, so results must be bit-identical. The first test builds the CPU library (about
90 s on 2 cores; cached in ~/.cache/stepscope afterwards, per version of the sources). Also here: the
autograd kernels are C++ (no Python runs in forward or backward), torch.compile gets our ops
decomposed into ATen ops it can fuse, and scripts/bench_ops.py refuses bad flags up front.
GPU-only behaviour (graphs, compile, streams, kernel versions) is in test_kernels_cuda.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from few_by_default import few_by_default
from hypothesis import given, settings
from hypothesis import strategies as st
from in_process import run_main
from stepscope import kernels
from stepscope.kernels import decompositions, loader

REPO = Path(__file__).resolve().parent.parent
OPS = {  # op -> reference on op-math tensors; the number of inputs is the reference's arity
    "add": lambda a, b: a + b,
    "relu": torch.relu,
    "add_relu": lambda a, b: torch.relu(a + b),
    "square": lambda x: x * x,
    "relu_backward": lambda grad, result: torch.where(result > 0, grad, torch.zeros_like(grad)),
    "square_backward": lambda grad, x: 2 * x * grad,
}
ARITY = {"add": 2, "relu": 1, "add_relu": 2, "square": 1, "relu_backward": 2, "square_backward": 2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [0, 1, 3, 4097, 2**20 + 3]
SHAPE = (3, 5, 7, 9)  # 945 elements: odd, so every vectorized path has a scalar tail
HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="no GPU")])]


@pytest.fixture(scope="module", autouse=True)
def library():
    return kernels.load()  # builds once (cached); fails every test with the one-line reason if it can't


def reference(op: str, *inputs: torch.Tensor) -> torch.Tensor:
    acc = torch.float64 if inputs[0].dtype == torch.float64 else torch.float32
    return OPS[op](*(t.to(acc) for t in inputs)).to(inputs[0].dtype)


def run(op: str, *inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return getattr(kernels, op)(*inputs, out=out)


def assert_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def make(shape, layout: str, dtype, device, requires_grad: bool = False) -> torch.Tensor:
    """A random tensor (never zeros) of logical `shape`, laid out in memory as `layout`."""
    n = 1
    for s in shape:
        n *= s
    rand = lambda *size: torch.randn(*size, dtype=dtype, device=device)  # noqa: E731
    if layout == "contiguous":
        t = rand(*shape)
    elif layout == "transposed":  # every dimension reversed: dense, but no stride is 1 where expected
        t = rand(*shape[::-1]).permute(*reversed(range(len(shape))))
    elif layout == "sliced":  # x[1:]: storage offset 1, so not 16-byte aligned
        t = rand(n + 1)[1:].view(shape)
    elif layout == "strided":  # every other element of the last dimension: not dense
        t = rand(*shape[:-1], 2 * shape[-1])[..., ::2]
    elif layout == "channels_last":
        t = rand(*shape).contiguous(memory_format=torch.channels_last)
    elif layout == "expanded":  # stride 0 along the last dimension (inputs only)
        t = rand(*shape[:-1], 1).expand(shape)
    else:
        raise ValueError(layout)
    return t.requires_grad_(requires_grad)


def sample_inputs(op: str, device, *, requires_grad: bool, dtype=torch.float32) -> list[tuple[torch.Tensor, ...]]:
    """Input tuples covering contiguous, transposed, misaligned and strided layouts (extension-cpp style)."""
    cases = []
    for layouts in [("contiguous",) * 2, ("transposed", "contiguous"), ("sliced", "strided")]:
        cases.append(tuple(make((3, 5), layouts[k], dtype, device, requires_grad) for k in range(ARITY[op])))
    return cases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("numel", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_parity_sizes_into_poisoned_output(op, dtype, numel, device):
    inputs = [make((numel,), "contiguous", dtype, device) for _ in range(ARITY[op])]
    expected = reference(op, *inputs)
    assert_exact(run(op, *inputs), expected)
    for offset in (0, 1):  # aligned, then misaligned; NaN guard elements on both sides
        buffer = torch.full((numel + 2,), float("nan"), dtype=dtype, device=device)
        assert_exact(run(op, *inputs, out=buffer[offset : offset + numel]), expected)
        guards = torch.cat([buffer[:offset], buffer[offset + numel :]])
        assert guards.isnan().all(), "wrote outside `out`"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_special_values(op, device):
    # NaN passes through relu as in torch.relu; inf, -0.0, subnormals and fp16/bf16 overflow behave as eager.
    values = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-40, -1e-40, 300.0, -300.0, 3e38, 1.0, -1.0]
    for dtype in [*DTYPES, torch.float64]:
        x = torch.tensor(values, dtype=dtype, device=device)
        inputs = [x, x.flip(0)][: ARITY[op]]
        assert_exact(run(op, *inputs), reference(op, *inputs))


LAYOUTS = ["contiguous", "transposed", "sliced", "strided", "channels_last", "expanded"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
def test_parity_layouts(op, layout, device):
    for dtype in DTYPES:
        combos = [(layout,) * 2, (layout, "contiguous"), ("contiguous", layout)]
        for combo in combos[: 1 if ARITY[op] == 1 else 3]:
            inputs = [make(SHAPE, combo[k], dtype, device) for k in range(ARITY[op])]
            got = run(op, *inputs)
            assert_exact(got, reference(op, *inputs))
            assert got.stride() == torch.empty_like(inputs[0]).stride()  # same layout rule as the fake impl


def out_view(buffer: torch.Tensor, layout: str) -> torch.Tensor:
    """A view of SHAPE into `buffer` (numel 2 * 945 + 1) laid out as `layout`; the rest is untouched."""
    n = 945
    if layout == "contiguous":
        return buffer[:n].view(SHAPE)
    if layout == "sliced":
        return buffer[1 : n + 1].view(SHAPE)
    if layout == "transposed":
        return buffer[:n].view(SHAPE[::-1]).permute(3, 2, 1, 0)
    if layout == "strided":
        return buffer[: 2 * n].view(*SHAPE[:-1], 2 * SHAPE[-1])[..., ::2]
    if layout == "channels_last":
        return buffer[:n].view(SHAPE[0], SHAPE[2], SHAPE[3], SHAPE[1]).permute(0, 3, 1, 2)
    raise ValueError(layout)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("out_layout", ["contiguous", "sliced", "transposed", "strided", "channels_last"])
@pytest.mark.parametrize("op", OPS)
def test_poisoned_out_layouts(op, out_layout, device):
    for dtype in DTYPES:
        for in_layout in ["contiguous", out_layout]:
            inputs = [make(SHAPE, in_layout, dtype, device) for _ in range(ARITY[op])]
            buffer = torch.full((2 * 945 + 1,), float("nan"), dtype=dtype, device=device)
            written = torch.zeros(buffer.shape, dtype=torch.bool, device=device)
            out_view(written, out_layout).fill_(True)
            assert_exact(run(op, *inputs, out=out_view(buffer, out_layout)), reference(op, *inputs))
            assert buffer[~written].isnan().all(), "wrote outside `out`"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
def test_gradcheck_float64(op, device):
    # fp64 is a native dtype of every kernel, so gradcheck runs the real kernels, not a shadow path.
    fn = getattr(torch.ops.stepscope, op)
    for inputs in sample_inputs(op, device, requires_grad=True, dtype=torch.float64):
        assert torch.autograd.gradcheck(fn, inputs)
        assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["add", "relu", "add_relu", "square"])
def test_gradients_match_pytorch(op, dtype, device):
    for inputs in sample_inputs(op, device, requires_grad=True, dtype=dtype):
        ours = [t.detach().clone().requires_grad_() for t in inputs]
        grad = torch.randn_like(inputs[0])
        theirs = torch.autograd.grad(OPS[op](*inputs), inputs, grad)  # eager PyTorch in `dtype`
        mine = torch.autograd.grad(run(op, *ours), ours, grad)
        for m, t in zip(mine, theirs, strict=True):
            torch.testing.assert_close(m, t)


# opcheck checks each op's registration (schema, fake kernel, autograd, out variant) on sample inputs. On the
# CPU: float32 by default, bfloat16 (the same registrations) in the slow set; on a GPU both. Every op's
# registrations come from the same templates (csrc/registration.h, csrc/autograd.cpp) and the same Python fake
# impl (_registrations.py), so by default the CPU checks a binary op that saves nothing for backward (add), a
# unary one that saves its result (relu) and a backward op that saves its inputs (square_backward); the other
# ops' CPU cases are slow (their values and gradients are checked above for every op).
CUDA_MARKS = DEVICES[1].marks
OPCHECK_CPU_FLOAT32 = [pytest.param(*p.values[0], id=p.id, marks=p.marks) for p in
                       few_by_default([(op, "cpu", torch.float32) for op in OPS],
                                      ["add-cpu-float32", "relu-cpu-float32", "square_backward-cpu-float32"],
                                      ids=[f"{op}-cpu-float32" for op in OPS])]
OPCHECK_CASES = [*OPCHECK_CPU_FLOAT32,
                 *(pytest.param(op, "cpu", torch.bfloat16, id=f"{op}-bfloat16", marks=pytest.mark.slow) for op in OPS),
                 *(pytest.param(op, "cuda", dtype, id=f"{op}-cuda-{dtype}", marks=CUDA_MARKS)
                   for op in OPS for dtype in (torch.float32, torch.bfloat16))]


@pytest.mark.parametrize("op, device, dtype", OPCHECK_CASES)
def test_opcheck(op, dtype, device):
    functional, out_op = getattr(torch.ops.stepscope, op).default, getattr(torch.ops.stepscope, f"{op}_out").default
    for requires_grad in (False, True):
        for inputs in sample_inputs(op, device, requires_grad=requires_grad, dtype=dtype):
            torch.library.opcheck(functional, inputs)
    for inputs in sample_inputs(op, device, requires_grad=False, dtype=dtype):
        torch.library.opcheck(out_op, inputs, {"out": torch.empty_like(inputs[0])})


def fuzz_tensor(data, shape: list[int], dtype, device) -> torch.Tensor:
    """A view of `shape` into a bigger random tensor: any dimension order, step and offset."""
    perm = data.draw(st.permutations(range(len(shape))))
    steps = [data.draw(st.integers(1, 3)) for _ in shape]
    offsets = [data.draw(st.integers(0, 2)) for _ in shape]
    extent = [o + max(s - 1, 0) * k + 1 for s, k, o in zip(shape, steps, offsets, strict=True)]
    base = torch.randn([extent[p] for p in perm], dtype=dtype, device=device)
    logical = base.permute(tuple(perm.index(d) for d in range(len(shape))))
    return logical[tuple(slice(o, o + max(s - 1, 0) * k + 1 if s else o, k) for s, k, o in zip(shape, steps, offsets, strict=True))]


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_fuzz_shapes_strides_dtypes(device, data):
    op = data.draw(st.sampled_from(sorted(OPS)))
    dtype = data.draw(st.sampled_from([*DTYPES, torch.float64]))
    shape = data.draw(st.lists(st.integers(0, 6), max_size=4))
    inputs = [fuzz_tensor(data, shape, dtype, device) for _ in range(ARITY[op])]
    expected = reference(op, *inputs)
    assert_exact(run(op, *inputs), expected)
    out = fuzz_tensor(data, shape, dtype, device).fill_(float("nan"))
    assert_exact(run(op, *inputs, out=out), expected)


def error_of(fn) -> str:
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value)


ERROR_CASES = {  # case -> (call on tensors made on `device`, exact message)
    "dtype": (
        lambda d: torch.ops.stepscope.add(torch.ones(2, device=d), torch.ones(2, dtype=torch.float16, device=d)),
        "stepscope::add: argument 'b' has dtype torch.float16 but 'a' has dtype torch.float32; "
        "they must match (stepscope ops do no type promotion)",
    ),
    "shape": (
        lambda d: torch.ops.stepscope.add_relu(torch.ones(2, 3, device=d), torch.ones(3, device=d)),
        "stepscope::add_relu: argument 'b' has shape [3] but 'a' has shape [2, 3]; "
        "they must match (stepscope ops do not broadcast)",
    ),
    "unsupported": (
        lambda d: torch.ops.stepscope.relu(torch.ones(2, dtype=torch.int32, device=d)),
        "stepscope::relu: argument 'x' has dtype torch.int32; "
        "supported dtypes: torch.float32, torch.float16, torch.bfloat16, torch.float64",
    ),
    "out_shape": (
        lambda d: torch.ops.stepscope.square_out(torch.ones(4, device=d), out=torch.ones(5, device=d)),
        "stepscope::square_out: argument 'out' has shape [5] but 'x' has shape [4]; "
        "they must match (stepscope ops do not broadcast)",
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ERROR_CASES)
def test_error_messages_eager_and_fake_alike(case, device):
    call, message = ERROR_CASES[case]
    assert error_of(lambda: call(device)) == message
    assert error_of(lambda: call("meta")) == message  # meta runs the Python fake impl


@pytest.mark.parametrize("device", DEVICES)
def test_out_overlap_errors(device):
    x = torch.randn(4, device=device)
    assert error_of(lambda: kernels.relu(x, out=torch.empty(1, device=device).expand(4))) == (
        "stepscope::relu_out: argument 'out' has elements that share memory (e.g. from expand()); "
        "pass a tensor with its own memory for each element"
    )
    buffer = torch.randn(5, device=device)
    assert error_of(lambda: kernels.add(buffer[:4], x, out=buffer[1:])) == (
        "stepscope::add_out: argument 'out' partially overlaps argument 'a'; pass a separate tensor or exactly that argument"
    )
    kernels.add(buffer[:4], x, out=buffer[:4])  # exactly the input: in place, allowed
    with pytest.raises(RuntimeError, match=r"^kernels.add: out= does not support autograd, but an input requires grad$"):
        kernels.add(x.requires_grad_(), x, out=torch.empty_like(x))


def test_autocast_keeps_bf16():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = torch.nn.functional.linear(torch.randn(4, 8), torch.randn(8, 8))
        y = kernels.add_relu(h, h)
    assert h.dtype == y.dtype == torch.bfloat16
    assert_exact(y, reference("add_relu", h, h))


def test_unavailable_reason_here():
    assert kernels.unavailable_reason("cpu") is None
    expected = None if HAS_CUDA else "no CUDA GPU available (torch.cuda.is_available() is False)"
    assert kernels.unavailable_reason("cuda") == expected
    with pytest.raises(ValueError, match="device_type must be one of cpu, cuda; got 'tpu'"):
        kernels.unavailable_reason("tpu")


PROBE = """
import torch, kernels
print(kernels.unavailable_reason("cpu"))
try:
    kernels.relu(torch.ones(2))
except RuntimeError as e:
    print("RuntimeError:", e)
"""


@pytest.mark.parametrize(
    "env, reason",
    [({"PATH": "/nonexistent"}, "ninja not installed (pip install ninja)"),
     pytest.param({"CXX": "no-such-c++"}, "no C++ compiler (no-such-c++) found", marks=pytest.mark.slow)],
)
def test_missing_tools_give_one_line_reason(tmp_path, env, reason):
    full_env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PYTHONPATH": str(REPO), **env}
    done = subprocess.run([sys.executable, "-c", PROBE], env=full_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # `import kernels` itself never fails
    assert done.stdout.splitlines() == [reason, f"RuntimeError: {reason}"]
    assert list(tmp_path.iterdir()) == []  # nothing was built


def test_missing_host_tools_are_named_one_at_a_time(monkeypatch):
    """The reasons the probe above prints, from the check itself, for both tools (a process each is slow)."""
    monkeypatch.setenv("CXX", "no-such-c++")
    assert loader.missing_host_tools() == "no C++ compiler (no-such-c++) found"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert loader.missing_host_tools() == "ninja not installed (pip install ninja)"  # the first missing one
    monkeypatch.undo()
    assert loader.missing_host_tools() is None


def test_bench_ops_cpu_quick(tmp_path, capsys):
    # in this process, where the library is loaded (test_bench_ops_process_refuses_before_it_builds runs the script)
    from bench.ops import main

    out, plot = tmp_path / "bench.json", tmp_path / "sweep.png"
    argv = ["--device", "cpu", "--quick", "--no-compile", "--out", str(out), "--plot", str(plot)]
    code, stdout, stderr = run_main(main, argv, capsys)
    assert code == 0, stdout + stderr
    results = json.loads(out.read_text())
    ops = {(row["op"], row["dtype"], row["impl"]) for row in results["ops"]}
    assert ("add_relu", "float32", "custom") in ops and ("add_relu", "bfloat16", "eager") in ops
    assert all(row["us"] > 0 for row in results["ops"])
    assert [p["numel"] for p in results["sweep"]["points"]] == sorted(p["numel"] for p in results["sweep"]["points"])
    assert plot.stat().st_size > 1000


# ---------------------------------------------------------------- autograd in C++


@pytest.mark.parametrize("op", OPS)
def test_autograd_kernel_is_registered_in_cpp(op):
    name = f"stepscope::{op}"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd")
    autograd_lines = [line for line in torch._C._dispatch_dump(name).splitlines() if line.startswith("Autograd")]
    assert len(autograd_lines) == 1 and "csrc/autograd.cpp" in autograd_lines[0], autograd_lines
    inputs = [torch.randn(3, requires_grad=True) for _ in range(ARITY[op])]
    out = getattr(torch.ops.stepscope, op)(*inputs)
    assert out.grad_fn.name() == f"stepscope::{op}_backward"
    assert [fn.name() for fn, _ in out.grad_fn.next_functions] == ["torch::autograd::AccumulateGrad"] * ARITY[op]


def test_a_saved_result_is_released_after_backward_and_reused_within_it():
    """The node keeps the result for backward (relu's mask) and frees it once backward has run: a second
    backward through it fails as a native op's does, unless the graph was retained."""
    a, b = (torch.randn(5, requires_grad=True) for _ in range(2))
    kernels.add_relu(a, b).sum().backward(retain_graph=True)
    out = kernels.add_relu(a, b)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.sum().backward()


def test_forward_mode_ad_is_refused_not_silently_wrong():
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        x = fwAD.make_dual(torch.randn(4), torch.ones(4))
        with pytest.raises(RuntimeError, match="does not support forward-mode AD"):
            kernels.relu(x)


THIS_FILE = Path(__file__).resolve().as_posix()


def python_calls(fn) -> set[str]:
    """"file:function" of every Python function that runs while fn() runs."""
    calls = set()

    def hook(frame, event, arg):
        if event == "call":
            calls.add(f"{Path(frame.f_code.co_filename).as_posix()}:{frame.f_code.co_name}")

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_forward_and_backward_run_no_python_autograd():
    a, b = (torch.randn(64, requires_grad=True) for _ in range(2))
    op = torch.ops.stepscope.add_relu.default
    op(a, b)  # first call: lazy caches
    out = {}
    forward = {c for c in python_calls(lambda: out.setdefault("y", op(a, b))) if not c.startswith(THIS_FILE)}
    assert {c.rsplit("/", 1)[-1] for c in forward} == {"_ops.py:__call__"}, forward  # OpOverload.__call__, then C++
    grads = {}
    backward = python_calls(lambda: grads.setdefault("ab", torch.autograd.grad(out["y"], (a, b), torch.ones(64))))
    python_autograd = [c for c in backward if "/torch/_library/" in c or "/torch/autograd/function.py" in c or "/kernels/" in c]
    assert python_autograd == [], python_autograd
    expected = (torch.relu(a + b) > 0).float()
    assert_exact(grads["ab"][0], expected)
    assert_exact(grads["ab"][1], expected)


def test_autograd_records_only_when_an_input_requires_grad():
    a, b = torch.randn(8, requires_grad=True), torch.randn(8)
    y = torch.ops.stepscope.add_relu(a, b)  # one of two inputs requires grad: recorded, gradient for that one
    assert y.requires_grad and y.grad_fn is not None
    (grad_a,) = torch.autograd.grad(y, a, torch.ones(8))
    assert_exact(grad_a, (torch.relu(a + b) > 0).to(a.dtype))
    with torch.no_grad():
        in_no_grad = torch.ops.stepscope.add_relu(a, b)
    for y in (torch.ops.stepscope.add_relu(a.detach(), b), in_no_grad):
        assert not y.requires_grad and y.grad_fn is None  # nothing to record: straight to the kernel
        assert_exact(y, torch.relu(a.detach() + b))


def test_argument_names_come_from_the_schemas():
    from stepscope.kernels import _registrations

    assert _registrations.ARGS == {
        "add": ("a", "b"), "add_relu": ("a", "b"), "relu": ("x",), "relu_backward": ("grad", "result"),
        "square": ("x",), "square_backward": ("grad", "x"),
    }  # fmt: skip
    assert str(torch.ops.stepscope.add_relu_out.default._schema) == (
        "stepscope::add_relu_out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()"
    )


def test_library_name_changes_with_sources_and_flags(monkeypatch):
    name = loader.library_name(False)
    assert name.startswith("stepscope_ops_torch") and name.rsplit("_", 1)[1] == loader.sources_hash(False)
    monkeypatch.setattr(loader, "CXX_FLAGS", [*loader.CXX_FLAGS, "-DSOMETHING_ELSE"])
    assert loader.library_name(False) != name
    monkeypatch.undo()
    cuda_name = loader.library_name(True)
    monkeypatch.setattr(loader, "CUDA_FLAGS", [*loader.CUDA_FLAGS, "-DSOMETHING_ELSE"])
    assert loader.library_name(True) != cuda_name and loader.library_name(False) == name  # CUDA flags: CUDA builds only


# ---------------------------------------------------------------- torch.compile: Inductor decompositions


def test_every_op_has_a_decomposition_equal_to_the_kernel():
    from stepscope.kernels import _registrations

    assert set(decompositions.DECOMPOSITIONS) == set(_registrations.ARGS)
    for op, decomposed in decompositions.DECOMPOSITIONS.items():
        for dtype in (torch.float32, torch.float64):
            inputs = [make(SHAPE, "contiguous", dtype, "cpu") for _ in range(ARITY[op])]
            assert_exact(decomposed(*inputs), run(op, *inputs))


def compiled_code(fn, *inputs, device: str = "cpu", **compile_options) -> tuple[object, tuple, str]:
    """(output, input grads, all code Inductor generated) of torch.compile(fn)(*inputs) then backward."""
    from torch._inductor.utils import run_and_get_code

    torch.compiler.reset()
    compiled = torch.compile(fn, fullgraph=True, **compile_options)

    def forward_backward():
        y = compiled(*inputs)
        if not y.requires_grad:
            return y, ()
        return y, torch.autograd.grad(y.sum(), inputs)

    (y, grads), codes = run_and_get_code(forward_backward)
    return y, grads, "\n".join(codes)


def block(x, weight, skip):
    """BatchNorm, then our add_relu and square: the end of a residual block."""
    h = torch.nn.functional.batch_norm(x, None, None, weight, None, training=True)
    return kernels.square(kernels.add_relu(h, skip))


def block_inputs(device: str, dtype=torch.float64) -> tuple[torch.Tensor, ...]:
    x, skip = (torch.randn(4, 8, 5, 5, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
    return x, torch.randn(8, dtype=dtype, device=device, requires_grad=True), skip


@pytest.mark.slow
def test_inductor_compiles_our_ops_as_fusable_aten_ops(monkeypatch):
    # Compile for real: Inductor's on-disk caches key on the traced graph, not on the decomposition table.
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)
    inputs = block_inputs("cpu")
    y, grads, code = compiled_code(block, *inputs)
    assert "torch.ops.stepscope" not in code  # no extern call of our ops, forward or backward: all fused
    y_eager = block(*inputs)
    torch.testing.assert_close(y, y_eager)
    for got, expected in zip(grads, torch.autograd.grad(y_eager.sum(), inputs), strict=True):
        torch.testing.assert_close(got, expected)
    # Control: without its decomposition add_relu stays an opaque extern call, which the check above would
    # see. Inductor keeps a copy of its table from its first compile on: register() must reach it.
    from torch._inductor.decomposition import decompositions as table

    del table[torch.ops.stepscope.add_relu.default]
    decompositions.forget_inductors_copy()
    try:
        a = torch.randn(16)
        _, _, opaque = compiled_code(lambda a, b: kernels.add_relu(a, b) * 2, a, a)
        assert "torch.ops.stepscope.add_relu.default(" in opaque
        decompositions.register()
        _, _, fused = compiled_code(lambda a, b: kernels.add_relu(a, b) * 2, a, a)
        assert "torch.ops.stepscope" not in fused
    finally:
        decompositions.register()  # puts it back (idempotent)


# ---------------------------------------------------------------- scripts/bench_ops.py flags


def assert_refused_in_one_line(code: int, err: str, prefix: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and err.count("\n") == 1 and len(lines) == 1 and lines[0].startswith(prefix), (code, err)
    return lines[0]


BENCH_OPS_REFUSALS = {  # flags -> the one line (None: any bench_ops.py error line)
    ("--reps", "0"): "bench_ops.py: error: --reps 0 is too few; use at least 2 (the median and quantiles need them)",
    ("--plot", "{tmp}"): "bench_ops.py: error: --plot {tmp} must name a .png file",
    ("--plot", "{tmp}/dir.png"): "bench_ops.py: error: --plot {tmp}/dir.png is a folder; give a file name",
    ("--out", "{tmp}/file/out.json"):
        "bench_ops.py: error: --out {tmp}/file/out.json: cannot create its folder (File exists)",
    ("--device", "cuda"): None,  # refused on a machine without a GPU
}


def bench_ops_argv(tmp_path: Path, flags) -> list[str]:
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "file").write_text("")
    flags = [f.format(tmp=tmp_path) for f in flags]
    defaults = {"--device": "cpu", "--out": str(tmp_path / "b.json"), "--plot": str(tmp_path / "s.png")}
    for flag, value in defaults.items():
        if flag not in flags:
            flags += [flag, value]
    return ["--quick", "--no-compile", *flags]


@pytest.mark.parametrize("flags", BENCH_OPS_REFUSALS, ids=" ".join)
def test_bench_ops_refuses_bad_flags_up_front(tmp_path, capsys, flags):
    from bench.ops import main

    if flags[0] == "--device" and HAS_CUDA:
        pytest.skip("this machine has a GPU")
    code, out, err = run_main(main, bench_ops_argv(tmp_path, flags), capsys)
    line = assert_refused_in_one_line(code, err, "bench_ops.py: error: ")
    if BENCH_OPS_REFUSALS[flags] is not None:
        assert line == BENCH_OPS_REFUSALS[flags].format(tmp=tmp_path)
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.png", "file"]  # wrote nothing, no <dir>.png


def test_bench_ops_process_refuses_before_it_builds(tmp_path):
    """The script as a process (the refusals' messages are checked above, in-process): one line, exit 2, and
    no build of the library in its own empty extensions folder."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    command = [sys.executable, str(REPO / "scripts" / "bench_ops.py"), *bench_ops_argv(tmp_path, ["--reps", "0"])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [BENCH_OPS_REFUSALS[("--reps", "0")]], done.stderr
    assert not (tmp_path / "ext").exists(), "built the library before refusing"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.png", "file"]


@pytest.mark.slow  # a second full run of the script; test_bench_ops_cpu_quick runs it by default
def test_bench_ops_per_call_cpu_quick(tmp_path):
    out = tmp_path / "per_call.json"
    command = [sys.executable, str(REPO / "scripts" / "bench_ops.py"), "--device", "cpu", "--quick", "--per-call"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())["per_call"]
    assert {r["numel"] for r in rows} == {100, 1000, 10000, 100000}
    assert {r["impl"] for r in rows} == {"ours", "ours torch.ops", "torch.relu", "a + b", "relu(a + b)"}
    assert all(r["us"] > 0 and r["device"] == "cpu" and r["vs_relu"] > 0 for r in rows)
    assert all(r["vs_relu"] == 1.0 for r in rows if r["impl"] == "torch.relu")
    assert "ours/relu" in done.stdout


def test_import_registers_the_ops_of_an_existing_build():
    """Once the library is built for this torch, `import stepscope.kernels` alone makes torch.ops.stepscope.*
    callable; before that the first call builds it (kernels.load)."""
    kernels.load()  # make sure a build exists (cached after the first test that needed it)
    script = ("import torch\n"
              "from stepscope import kernels\n"
              "print(torch.ops.stepscope.add_relu(torch.ones(2), -2 * torch.ones(2)).tolist())")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "[0.0, 0.0]", r.stderr[-2000:]



@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_bench_step_ops_refuses_without_a_gpu(tmp_path, capsys):
    from bench.step_ops import main

    out = tmp_path / "step_ops.json"
    code, stdout, stderr = run_main(main, ["--out", str(out)], capsys)
    assert code == 2 and stderr == "bench_step_ops.py: error: needs a CUDA GPU\n" and stdout == ""
    assert not out.exists()


STEP_OPS_REFUSALS = {("--arch", "nope"): "argument --arch: invalid choice: 'nope'",
                     ("--steps", "0"): "--steps and --batch-size must be at least 1; got 0 and 128",
                     ("--out", "/proc/no/such.json"): "--out /proc/no/such.json: cannot create its folder"}


@pytest.mark.parametrize("args", STEP_OPS_REFUSALS, ids=" ".join)
def test_bench_step_ops_refuses_bad_values_in_one_line(args, capsys):
    from bench.step_ops import main

    code, _, stderr = run_main(main, list(args), capsys)
    line = assert_refused_in_one_line(code, stderr, "bench_step_ops.py: error: ")
    assert STEP_OPS_REFUSALS[args] in line, stderr


def test_bench_step_ops_process_refuses_in_one_line():
    """The script as a process: one line on stderr, exit code 2 (every message is checked in-process above)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_step_ops.py"), "--steps", "0"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert STEP_OPS_REFUSALS[("--steps", "0")] in done.stderr, done.stderr


def test_bench_ops_processes_summary_pairs_runs_and_tests_their_split():
    from bench import ops_processes as bop

    def run(pair, ops, ms):
        return {"pair": pair, "ops": ops, "median_step_ms": ms,
                "telemetry": {"step_ms": ms, "dispatch_ms": ms - 1, "data_ms": 0.1, "copy_host_ms": 0.0, "cpu_ms": ms}}

    runs = [run(0, "native", 10.0), run(0, "custom", 11.0), run(1, "custom", 9.0), run(1, "native", 12.0),
            run(2, "native", 8.0)]  # pair 2 is incomplete (an interrupted run) and is left out
    s = bop.summarize(runs)
    assert [(r["pair"], r["first"]) for r in s["pairs"]] == [(0, "native"), (1, "custom")]
    assert s["custom_slower"] == 1 and s["complete_pairs"] == 2
    assert s["median_ratio"] == pytest.approx((1.1 + 0.75) / 2)
    assert s["median_phases"]["native"]["step_ms"] == 10.0
    # the sign test: 8 of 14 is no evidence (p 0.79), 14 of 14 is (2 / 2^14), and it is symmetric
    assert bop.sign_test_p(8, 14) == pytest.approx(0.7905, abs=1e-4)
    assert bop.sign_test_p(14, 14) == pytest.approx(2 / 2 ** 14)
    assert bop.sign_test_p(0, 14) == bop.sign_test_p(14, 14) and bop.sign_test_p(7, 14) == 1.0


PROCESSES_REFUSALS = {("--pairs", "0"): "need --pairs >= 1, --steps >= 30 and --batch-size >= 1; got 0, 250, 128",
                      ("--steps", "10"): "got 16, 10, 128",
                      ("--compile", "fast"): "argument --compile: invalid choice: 'fast'",
                      ("--out", "/proc/no/such.json"): "--out /proc/no/such.json: cannot create its folder"}


@pytest.mark.parametrize("args", PROCESSES_REFUSALS, ids=" ".join)
def test_bench_ops_processes_refuses_bad_values_in_one_line(args, tmp_path, capsys):
    from bench.ops_processes import main

    code, _, stderr = run_main(main, [*args, "--logdir", str(tmp_path / "runs")], capsys)
    line = assert_refused_in_one_line(code, stderr, "bench_ops_processes.py: error: ")
    assert PROCESSES_REFUSALS[args] in line, stderr
    assert not (tmp_path / "runs").exists()


def test_bench_ops_processes_process_refuses_in_one_line(tmp_path):
    """The script as a process: one line on stderr, exit code 2, no logdir (messages: in-process above)."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_ops_processes.py"), "--pairs", "0",
                           "--logdir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert PROCESSES_REFUSALS[("--pairs", "0")] in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()

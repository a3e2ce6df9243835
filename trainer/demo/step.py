"""One training step, three ways: eager, `torch.compile`d, or replayed from a whole-step CUDA graph.

Each step object has `__call__(x, y)` and accumulates the loss on the device, so the loop never syncs per
step; at its logging cadence the loop calls `take_loss()`, which hands back the device sum and the number of
steps in it and starts a new sum.

Inside a step the phases are `record_function` ranges (and NVTX ranges with --nvtx): data, forward,
backward, optimizer for eager and compiled steps; data, graph_replay for the CUDA-graph step (the loop
opens the data range around fetching the batch).
"""

from __future__ import annotations

import contextlib

import torch
from stepscope.capture.phases import Phases
from stepscope.demo.env import Env
from torch import nn


class LossAccumulator:
    """The loss summed on the device over the steps since the last `take_loss()`."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), device=device)
        self.loss_count = 0

    def take_loss(self) -> tuple[torch.Tensor, int]:
        """(device tensor holding the sum, number of steps in it), and a fresh sum. No host sync."""
        taken = (self.loss_sum.clone(), self.loss_count)
        self.loss_sum.zero_()
        self.loss_count = 0
        return taken


class EagerStep(LossAccumulator):
    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, loss_fn, env: Env, phases: Phases) -> None:
        super().__init__(env.device)
        self.model, self.opt, self.loss_fn, self.env, self.phases = model, opt, loss_fn, env, phases

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with self.phases("forward"):
            with self.env.autocast():
                loss = self.loss_fn(self.model(x), y)
        with self.phases("backward"):
            loss.backward()
        with self.phases("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        self.loss_sum += loss.detach()
        self.loss_count += 1


class CompiledStep(EagerStep):
    """The eager step around `torch.compile(model, mode=...)`; the optimizer step stays eager (fused)."""

    def __init__(self, model: nn.Module, opt, loss_fn, env: Env, phases: Phases, mode: str) -> None:
        super().__init__(torch.compile(model, mode=mode), opt, loss_fn, env, phases)
        self.mode = mode

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.mode == "reduce-overhead":
            # tells cudagraph trees that a new iteration starts, so the last step's outputs may be reused
            torch.compiler.cudagraph_mark_step_begin()
        super().__call__(x, y)


class GraphedStep(LossAccumulator):
    """Forward, backward and optimizer captured as one CUDA graph over static input tensors.

    Capture follows the PyTorch recipe: warm up on the capture stream (cuDNN autotuning, allocator, momentum
    buffers; under DDP also its bucket rebuild and first-iterations logging), then capture on that stream with
    autocast's weight cache off. Under DDP the graph holds the gradient all-reduces too, overlapping the
    backward as in eager mode. The warm-up's updates are undone before training starts (weights, BN statistics
    and momentum restored), so step 1 sees the initial model. Each call copies the batch into the static
    inputs and replays: no host sync inside the step.
    """

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, loss_fn, env: Env, phases: Phases,
                 sample: tuple[torch.Tensor, torch.Tensor], stream: torch.cuda.Stream, warmup_iters: int) -> None:
        super().__init__(env.device)
        self.phases = phases
        self.static_x = sample[0].clone()
        self.static_y = sample[1].clone()
        saved = [t.detach().clone() for t in model.state_dict().values()]

        def fwd_bwd_opt() -> torch.Tensor:
            with env.autocast(cache_enabled=False):
                loss = loss_fn(model(self.static_x), self.static_y)
            loss.backward()
            opt.step()
            return loss

        with on_stream(stream):
            for _ in range(warmup_iters):
                opt.zero_grad(set_to_none=True)
                fwd_bwd_opt()
        opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        # sync point, once: entering torch.cuda.graph synchronizes, so no warm-up collective is in flight
        with torch.cuda.graph(self.graph, stream=stream):
            loss = fwd_bwd_opt()
            self.loss_sum += loss.detach()
        with torch.no_grad():
            for t, s in zip(model.state_dict().values(), saved):
                t.copy_(s)
            for state in opt.state.values():
                buf = state.get("momentum_buffer")
                if buf is not None:
                    buf.zero_()  # zero momentum == the first step's buf = grad
        self.loss_sum.zero_()

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        with self.phases("graph_replay"):
            self.graph.replay()
        self.loss_count += 1


def capture_stream(env: Env, cuda_graphs: bool) -> torch.cuda.Stream | None:
    """The stream that --cuda-graphs warms up and captures on; None without graphs."""
    return torch.cuda.Stream(env.device) if cuda_graphs else None


@contextlib.contextmanager
def on_stream(stream: torch.cuda.Stream | None):
    """Run the block on `stream`, ordered after the work queued so far and before the work queued next.

    DDP must be built inside this block when the step is captured: it keeps each parameter's gradient
    accumulator, and an accumulator made on another stream would make the captured backward wait on that
    (uncaptured) stream. With `stream` None the block runs as is.
    """
    if stream is None:
        yield
        return
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream(stream.device).wait_stream(stream)


def capture_graph(fn, warmup: int = 3, capture_error_mode: str = "global") -> torch.cuda.CUDAGraph:
    """`fn`'s device work as a CUDA graph: `warmup` calls on a side stream first (cuDNN autotuning, the caching
    allocator, lazy module loading stay out of the capture), then one captured call. Replay with `.replay()`.
    The benchmarks' recipe; `GraphedStep` adds what a training step needs (DDP, undoing the warm-up)."""
    with on_stream(torch.cuda.Stream()):
        for _ in range(warmup):
            fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
        fn()
    return graph


def build_step(kind: str, model: nn.Module, opt, loss_fn, env: Env, phases: Phases,
               sample: tuple[torch.Tensor, torch.Tensor] | None = None, compile_mode: str | None = None,
               stream: torch.cuda.Stream | None = None, graph_warmup_iters: int = 3):
    if kind == "eager":
        return EagerStep(model, opt, loss_fn, env, phases)
    if kind == "compile":
        return CompiledStep(model, opt, loss_fn, env, phases, compile_mode or "default")
    if kind == "cuda-graphs":
        return GraphedStep(model, opt, loss_fn, env, phases, sample, stream, graph_warmup_iters)
    raise ValueError(f"unknown step kind {kind!r}")

"""The workload library: training steps with one injected, known bottleneck each, and their parts.

    w = resnet18(torch.device("cuda"), "resnet18_bs128", 128, "launch_bound")
    w.step()            # one training step, inside record_function ranges data/forward/backward/optimizer
    w.step(clock)       # the same, its phases timed by a stepscope.demo.timing.StepClock (the unprofiled telemetry)
    w.gpu_part          # the step's device work alone, capturable as a CUDA graph (where `capturable()`)
    w.copy_bytes        # host->device bytes copied per step (0 for data already on the device)
    w.cause             # the injected cause: the verdict the step has unless the GPU is busy anyway
    w.fixed()           # the same workload with the cause removed (the intervention), or None

Knobs of `Workload` that inject a cause: a DataLoader in the main process or fed by too few workers
(`loader`), a pageable host->device copy (`host_input`, `pinned`), Python work after a device-to-host copy
(`host_work`), a `.item()` after every convolution (`item_hooks`), CPU-side optimizer scalars
(`opt="adamw_loop"`), torch.compile modes (`compile_mode`), and the whole step replayed as one CUDA graph
(`graphed`). `TinyOps` is a step of nothing but launches. Parts: `NO_CLOCK`, `SlowSamples` (a slow per-sample
dataset), `Decoder` (a nanoGPT-style decoder), the batch makers `cifar_batch`, `image_batch`, `token_batch`,
the losses `ce_loss`, `lm_loss`, and the models `cifar_resnet18`, `resnet50`, `small_cnn`, `pooled_linear`.

The sets built from it: bench.verdicts (gpu, holdout, cpu) and bench.scenarios (the
traces under tests/data). Nothing here prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from stepscope.analysis.verdicts import DATA_BOUND, GPU_BOUND, LAUNCH_BOUND
from torch.profiler import record_function


class NoClock:
    """A step clock that times nothing: what `step()` gets when nobody times its phases."""

    def begin(self) -> None:
        pass

    batch_ready = dispatched = begin

    def copy(self, fn: Callable[[], object]):
        return fn()


NO_CLOCK = NoClock()


class SlowSamples(torch.utils.data.Dataset):
    """A per-sample Python dataset that costs `sample_ms` a sample, like a slow decode."""

    def __init__(self, n: int, sample_ms: float, shape=(3, 32, 32)) -> None:
        self.n, self.sample_ms, self.shape = n, sample_ms, shape

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sample_ms / 1e3)
        return torch.rand(self.shape, generator=torch.Generator().manual_seed(i)), i % 10


class Decoder(nn.Module):
    """A nanoGPT-style causal decoder: token + position embeddings, pre-LN blocks, tied head."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "proj": nn.Linear(d, d),
            "ln2": nn.LayerNorm(d), "fc": nn.Linear(d, 4 * d), "out": nn.Linear(4 * d, d)}) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).view(b, t, 3, self.heads, -1).transpose(1, 3).unbind(2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
            x = x + blk["proj"](a)
            x = x + blk["out"](F.gelu(blk["fc"](blk["ln2"](x))))
        return self.ln(x) @ self.tok.weight.t()


def cifar_batch(batch: int, classes: int = 10):
    def make(g):
        return torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return make


def image_batch(batch: int, size: int):
    def make(g):
        return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g)
    return make


def token_batch(batch: int, seq: int, vocab: int):
    def make(g):
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    return make


def ce_loss(out, y):
    return F.cross_entropy(out.float(), y)


def lm_loss(out, y):
    return F.cross_entropy(out.float().flatten(0, 1), y.flatten())

def sync_host_work(out: torch.Tensor, iters: int, calls: bool = True) -> None:
    """Copy the logits to the host (a sync), then `iters` iterations of Python, like per-sample metrics."""
    logits = out.detach().float().cpu()  # sync point: deliberate, the anti-pattern under test
    acc = 0.0
    if calls:
        for i in range(iters):  # per-sample metrics in Python, a built-in call each (with_stack records them)
            acc += math.sqrt(i)
    else:
        for i in range(iters):  # the same without calls: nothing for with_stack to record
            acc += i * 0.5
    logits.numpy().argsort(axis=1)


def _item_hook(_mod: nn.Module, _inp, out: torch.Tensor) -> None:
    out.float().mean().item()  # sync point: deliberate, the anti-pattern under test


class Workload:
    """A model, an optimizer, inputs, and the knobs that inject a cause (see the module docstring). `opt` is
    "sgd", "adamw_loop", "adamw_fused" or a function of the parameters that returns an optimizer; `cause` is
    None where the workload was built to show no one cause."""

    def __init__(self, name: str, family: str, cause: str | None, device: torch.device, model: nn.Module,
                 make_batch: Callable[[torch.Generator], tuple], loss: Callable, *,
                 opt: str | Callable[..., torch.optim.Optimizer] = "sgd",
                 loader: torch.utils.data.DataLoader | None = None, host_input: bool = False,
                 pinned: bool = False, host_work: int = 0, host_calls: bool = True,
                 compile_mode: str | None = None, graph_compiled: bool = False,
                 bf16: bool = True, item_hooks: bool = False, graphed: bool = False,
                 fixed: Callable[[], Workload] | None = None) -> None:
        self.name, self.family, self.cause, self.device = name, family, cause, device
        self.cuda = device.type == "cuda"
        self.model = model.to(device)
        if self.cuda and family.startswith("resnet"):
            self.model = self.model.to(memory_format=torch.channels_last)
        params = self.model.parameters()
        if callable(opt):
            self.opt = opt(params)
        elif opt == "adamw_loop":  # per-parameter kernels; step counters are CPU tensors read with .item()
            self.opt = torch.optim.AdamW(params, lr=1e-4, foreach=False, capturable=False)
        elif opt == "adamw_fused":
            self.opt = torch.optim.AdamW(params, lr=1e-4, fused=self.cuda)
        else:
            self.opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, fused=self.cuda)
        g = torch.Generator().manual_seed(0)
        x, y = make_batch(g)
        self.host_x, self.host_y = x, y
        if host_input and pinned:
            self.host_x, self.host_y = x.pin_memory(), y.pin_memory()
        self.x, self.y = x.to(device), y.to(device)
        self.loss_fn, self.loader, self.host_input, self.pinned = loss, loader, host_input, pinned
        self.loader_iter = None  # started at the first step, after the truth's graph capture
        self.host_work, self.host_calls, self.bf16 = host_work, host_calls, bf16 and self.cuda
        self.fwd = torch.compile(self.model, mode=compile_mode) if compile_mode else self.model
        # a compiled forward that may be captured in a CUDA graph (mode "default": Inductor's kernels, no
        # graphs of its own), so that the truth can time the step's device work alone
        self.graph_compiled = graph_compiled and compile_mode == "default"
        self.gpu_twin: Callable[[], Workload] | None = None
        self._fixed = fixed
        self.copy_bytes = (x.numel() * x.element_size() + y.numel() * y.element_size()) if host_input else 0
        if item_hooks:
            for mod in self.model.modules():
                if isinstance(mod, nn.Conv2d):
                    mod.register_forward_hook(_item_hook)
        self.graph = self._capture() if graphed else None

    def _capture(self) -> torch.cuda.CUDAGraph:
        """The whole step's device work as one CUDA graph, which `step()` then replays."""
        from stepscope.demo.step import capture_graph

        def graph_step() -> None:
            self.opt.zero_grad(set_to_none=True)
            self.gpu_part()

        return capture_graph(graph_step)

    def _forward(self):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=False):
            out = self.fwd(self.x)
            return self.loss_fn(out, self.y), out

    def gpu_part(self) -> None:
        """Forward, backward and optimizer on the inputs already on the device: what a CUDA graph can hold."""
        loss, _ = self._forward()
        loss.backward()
        self.opt.step()

    def capturable(self) -> bool:
        return self.cuda and self.compile_free and self.opt_capturable

    @property
    def compile_free(self) -> bool:
        return self.fwd is self.model or self.graph_compiled

    @property
    def opt_capturable(self) -> bool:
        return isinstance(self.opt, torch.optim.SGD) or bool(self.opt.defaults.get("fused"))

    def step(self, clock=NO_CLOCK) -> None:
        """One training step; `clock` (a stepscope.demo.timing.StepClock) times its phases as the trainer does."""
        clock.begin()
        with record_function("data"):
            if self.loader is not None:
                if self.loader_iter is None:
                    self.loader_iter = iter(self.loader)
                xb, yb = next(self.loader_iter)
                clock.batch_ready()
                clock.copy(lambda: (self.x.copy_(xb.to(self.device, non_blocking=True)),
                                    self.y.copy_(yb.to(self.device, non_blocking=True))))
            elif self.host_input:
                clock.batch_ready()
                clock.copy(lambda: (self.x.copy_(self.host_x, non_blocking=self.pinned),
                                    self.y.copy_(self.host_y, non_blocking=self.pinned)))
            else:
                clock.batch_ready()
        if self.graph is not None:
            with record_function("graph_replay"):
                self.graph.replay()
            clock.dispatched()
            return
        with record_function("forward"):
            loss, out = self._forward()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.host_work:
            with record_function("host_postprocess"):
                sync_host_work(out, self.host_work, self.host_calls)
        clock.dispatched()

    def fixed(self) -> Workload | None:
        return self._fixed() if self._fixed is not None else None


class TinyOps:
    """Thousands of tiny elementwise ops on a 1 Ki-element tensor: nothing but launches."""

    family, cause, copy_bytes = "elementwise", LAUNCH_BOUND.name, 0

    def __init__(self, device: torch.device, n_ops: int = 3000, name: str = "tiny_ops") -> None:
        self.name, self.device, self.n_ops = name, device, n_ops
        self.cuda = device.type == "cuda"
        self.x = torch.randn(1024, device=device)

    def gpu_part(self) -> None:
        x = self.x
        for _ in range(self.n_ops // 2):
            x = x * 1.0001 + 0.0001
        self.out = x

    def capturable(self) -> bool:
        return self.cuda

    def step(self, clock=NO_CLOCK) -> None:
        clock.begin()
        clock.batch_ready()
        with record_function("forward"):
            self.gpu_part()
        clock.dispatched()

    def fixed(self):
        return None  # the intervention is the CUDA graph of gpu_part itself (verdicts/truth.py)


def cifar_resnet18() -> nn.Module:
    from stepscope.demo.models import torchvision_cifar_resnet18
    return torchvision_cifar_resnet18(10)


def resnet50() -> nn.Module:
    import torchvision
    return torchvision.models.resnet50(num_classes=10)


def small_cnn() -> nn.Module:
    from stepscope.demo.config import ModelConfig
    from stepscope.demo.models import build_model
    return build_model(ModelConfig(arch="resnet8"))


def pooled_linear() -> nn.Module:
    return nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(192, 10))


def resnet18(d, name, batch, cause, **kw):
    return Workload(name, "resnet18", cause, d, cifar_resnet18(), cifar_batch(batch), ce_loss, **kw)


def gpt(d, name, batch, seq, width, layers, cause, **kw):
    return Workload(name, "gpt", cause, d, Decoder(2048, width, layers, max(2, width // 64), seq),
                    token_batch(batch, seq, 2048), lm_loss, **kw)


def hf_gpt2(d):
    from transformers import GPT2Config, GPT2LMHeadModel

    class LogitsOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_positions=128, n_embd=128, n_layer=4, n_head=4))

        def forward(self, idx):
            return self.m(idx).logits

    return Workload("hf_gpt2_small", "hf-gpt2", LAUNCH_BOUND.name, d, LogitsOnly(), token_batch(4, 128, 2048), lm_loss)


def loader(d, name, workers, sample_ms, batch=32, fix_workers=None, cause=DATA_BOUND.name):
    def make():
        dl = torch.utils.data.DataLoader(SlowSamples(1_000_000, sample_ms), batch_size=batch, shuffle=False,
                                         num_workers=workers, pin_memory=d.type == "cuda",
                                         persistent_workers=workers > 0, prefetch_factor=2 if workers else None)
        fix = (lambda: loader(d, name + "_fixed", fix_workers, sample_ms, batch)) if fix_workers else None
        return resnet18(d, name, batch, cause, loader=dl, fixed=fix)
    return make()


def reduce_overhead(d):
    """ResNet-18 batch 128 under torch.compile(mode="reduce-overhead"), as scripts/compare.py runs it. Its
    device work is timed on a twin compiled with mode "default" (the same Inductor kernels) replayed as one
    CUDA graph: reduce-overhead's own graphs cannot be captured inside another."""
    w = Workload("compile_reduce_overhead", "resnet18-compiled", GPU_BOUND.name, d, cifar_resnet18(), cifar_batch(128), ce_loss,
                 compile_mode="reduce-overhead")

    def twin():
        t = Workload("compile_default_twin", "resnet18-compiled", GPU_BOUND.name, d, cifar_resnet18(), cifar_batch(128), ce_loss,
                     compile_mode="default", graph_compiled=True)
        t.model.load_state_dict(w.model.state_dict())
        return t

    w.gpu_twin = twin
    return w



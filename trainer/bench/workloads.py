"""Training workloads with one injected, known bottleneck each, for scripts/verdict_bench.py.

    w = WORKLOADS["gpt_tiny"](torch.device("cuda"))
    w.step()            # one training step, inside record_function ranges data/forward/backward/optimizer
    w.step(clock)       # the same, its phases timed by a trainer.timing.StepClock (the unprofiled telemetry)
    w.gpu_part          # the step's device work alone, capturable as a CUDA graph (None where it is not)
    w.copy_bytes        # host->device bytes copied per step (0 for data already on the device)
    w.cause             # the injected cause: the verdict the step has unless the GPU is busy anyway
    w.fixed()           # the same workload with the cause removed (the intervention), or None

Families: CIFAR ResNet-18 and ResNet-50 (torchvision), a nanoGPT-style decoder, Hugging Face's GPT-2 (when
transformers is installed), a small CNN under torch.compile, a 1 Ki-element elementwise chain. Causes: kernel
launches, a DataLoader in the main process or fed by too few workers, a pageable host->device copy, Python
work after a device-to-host copy, CPU-side optimizer scalars (AdamW with foreach=False), and a profiled
window that holds the process's first CUDA work. Run by verdict_bench.py; nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
from torch.profiler import record_function
from verdict_parts import NO_CLOCK, Decoder, SlowSamples, _ce, _cifar, _images, _lm, _tokens


def _sync_host_work(out: torch.Tensor, iters: int, calls: bool = True) -> None:
    logits = out.detach().float().cpu()  # sync point: deliberate, the anti-pattern under test
    acc = 0.0
    if calls:
        for i in range(iters):  # per-sample metrics in Python, a built-in call each (with_stack records them)
            acc += math.sqrt(i)
    else:
        for i in range(iters):  # the same without calls: nothing for with_stack to record
            acc += i * 0.5
    logits.numpy().argsort(axis=1)


class Workload:
    """A model, an optimizer, inputs, and the knobs that inject a cause (see the module docstring)."""

    def __init__(self, name: str, family: str, cause: str, device: torch.device, model: nn.Module,
                 make_batch: Callable[[torch.Generator], tuple], loss: Callable, *, opt: str = "sgd",
                 loader: torch.utils.data.DataLoader | None = None, host_input: bool = False,
                 pinned: bool = False, host_work: int = 0, host_calls: bool = True,
                 compile_mode: str | None = None, graph_compiled: bool = False,
                 bf16: bool = True, fixed: Callable[[], Workload] | None = None) -> None:
        self.name, self.family, self.cause, self.device = name, family, cause, device
        self.cuda = device.type == "cuda"
        self.model = model.to(device)
        if self.cuda and family.startswith("resnet"):
            self.model = self.model.to(memory_format=torch.channels_last)
        params = self.model.parameters()
        if opt == "adamw_loop":  # per-parameter kernels; step counters are CPU tensors read with .item()
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
        """One training step; `clock` (a trainer.timing.StepClock) times its phases as the trainer does."""
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
        with record_function("forward"):
            loss, out = self._forward()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.host_work:
            with record_function("host_postprocess"):
                _sync_host_work(out, self.host_work, self.host_calls)
        clock.dispatched()

    def fixed(self) -> Workload | None:
        return self._fixed() if self._fixed is not None else None


class TinyOps:
    """Thousands of tiny elementwise ops on a 1 Ki-element tensor: nothing but launches."""

    family, cause, copy_bytes = "elementwise", "launch_bound", 0

    def __init__(self, device: torch.device, n_ops: int = 3000) -> None:
        self.name, self.device, self.n_ops = "tiny_ops", device, n_ops
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
        return None  # the intervention is the CUDA graph of gpu_part itself (verdict_bench.py)


def _resnet18():
    from ..models import torchvision_cifar_resnet18
    return torchvision_cifar_resnet18(10)


def _resnet50():
    import torchvision
    return torchvision.models.resnet50(num_classes=10)


def _small_cnn():
    from ..config import ModelConfig
    from ..models import build_model
    return build_model(ModelConfig(arch="resnet8"))


def _pooled_linear():
    return nn.Sequential(nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(192, 10))


def resnet18(d, name, batch, cause, **kw):
    return Workload(name, "resnet18", cause, d, _resnet18(), _cifar(batch), _ce, **kw)


def gpt(d, name, batch, seq, width, layers, cause, **kw):
    return Workload(name, "gpt", cause, d, Decoder(2048, width, layers, max(2, width // 64), seq),
                    _tokens(batch, seq, 2048), _lm, **kw)


def hf_gpt2(d):
    from transformers import GPT2Config, GPT2LMHeadModel

    class LogitsOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_positions=128, n_embd=128, n_layer=4, n_head=4))

        def forward(self, idx):
            return self.m(idx).logits

    return Workload("hf_gpt2_small", "hf-gpt2", "launch_bound", d, LogitsOnly(), _tokens(4, 128, 2048), _lm)


def loader(d, name, workers, sample_ms, batch=32, fix_workers=None, cause="data_bound"):
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
    w = Workload("compile_reduce_overhead", "resnet18-compiled", "gpu_bound", d, _resnet18(), _cifar(128), _ce,
                 compile_mode="reduce-overhead")

    def twin():
        t = Workload("compile_default_twin", "resnet18-compiled", "gpu_bound", d, _resnet18(), _cifar(128), _ce,
                     compile_mode="default", graph_compiled=True)
        t.model.load_state_dict(w.model.state_dict())
        return t

    w.gpu_twin = twin
    return w


WORKLOADS: dict[str, Callable[[torch.device], object]] = {
    # the process's first CUDA work inside the profiled window; the verdict is that of the warm steps
    "cold_start": lambda d: resnet18(d, "cold_start", 128, "launch_bound"),
    "resnet18_bs32": lambda d: resnet18(d, "resnet18_bs32", 32, "launch_bound"),
    "resnet18_bs128": lambda d: resnet18(d, "resnet18_bs128", 128, "launch_bound"),
    "resnet18_bs1024": lambda d: resnet18(d, "resnet18_bs1024", 1024, "gpu_bound"),
    "resnet50_pinned": lambda d: Workload("resnet50_pinned", "resnet50", "gpu_bound", d, _resnet50(),
                                          _images(128, 64), _ce, host_input=True, pinned=True),
    "gpt_tiny": lambda d: gpt(d, "gpt_tiny", 2, 64, 128, 4, "launch_bound"),
    "gpt_large": lambda d: gpt(d, "gpt_large", 16, 512, 1024, 8, "gpu_bound"),
    "hf_gpt2_small": hf_gpt2,
    "compile_default": lambda d: Workload("compile_default", "resnet8-compiled", "launch_bound", d, _small_cnn(),
                                          _cifar(32), _ce, compile_mode="default",
                                          fixed=lambda: Workload("compile_default_fixed", "resnet8-compiled",
                                                                 "launch_bound", d, _small_cnn(), _cifar(32), _ce,
                                                                 compile_mode="reduce-overhead")),
    "tiny_ops": TinyOps,
    "compile_reduce_overhead": reduce_overhead,
    "loader_in_process": lambda d: loader(d, "loader_in_process", 0, 0.3, batch=64, fix_workers=8),
    "loader_two_workers": lambda d: loader(d, "loader_two_workers", 2, 2.0, batch=32, fix_workers=16),
    # 2 workers slower than the unprofiled step (about 16 ms a batch against 10) but faster than the profiled
    # one (about 19): profiled straight from the data-bound steady state (verdict_bench.py STEADY_FIRST), the
    # queue is empty when the profiler starts and the workers catch up while it slows the steps
    "loader_catching_up": lambda d: loader(d, "loader_catching_up", 2, 1.0, batch=32, fix_workers=16),
    # a worker-fed loader that keeps up with room to spare: its waits are the hand-off of a ready batch
    "loader_ahead": lambda d: loader(d, "loader_ahead", 8, 0.05, batch=32, cause="launch_bound"),
    # 151 MB of float32 images per step into a model that pools them at once: the copy is the step
    "pageable_copy": lambda d: Workload(
        "pageable_copy", "pooled-linear", "transfer_bound", d, _pooled_linear(), _images(768, 128), _ce,
        host_input=True, pinned=False,
        fixed=lambda: Workload("pageable_copy_fixed", "pooled-linear", "transfer_bound", d, _pooled_linear(),
                               _images(768, 128), _ce, host_input=True, pinned=True)),
    "host_python": lambda d: resnet18(d, "host_python", 128, "host_bound", host_work=120_000,
                                      fixed=lambda: resnet18(d, "host_python_fixed", 128, "host_bound")),
    "adamw_cpu_scalars": lambda d: resnet18(d, "adamw_cpu_scalars", 128, "launch_bound", opt="adamw_loop",
                                            fixed=lambda: resnet18(d, "adamw_fused", 128, "launch_bound",
                                                                   opt="adamw_fused")),
}

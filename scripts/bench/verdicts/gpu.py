"""The verdict benchmark's main GPU set: one workload per scenario, each with one injected, known cause.

    w = WORKLOADS["gpt_tiny"](torch.device("cuda"))     # a bench.workloads.Workload

Families: CIFAR ResNet-18 and ResNet-50 (torchvision), a nanoGPT-style decoder, Hugging Face's GPT-2 (when
transformers is installed), a small CNN under torch.compile, a 1 Ki-element elementwise chain. Causes: kernel
launches, a DataLoader in the main process or fed by too few workers, a pageable host->device copy, Python
work after a device-to-host copy, CPU-side optimizer scalars (AdamW with foreach=False), and a profiled
window that holds the process's first CUDA work. Run by bench.py; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from stepscope.analysis.verdicts import GPU_BOUND, HOST_BOUND, LAUNCH_BOUND, TRANSFER_BOUND

from bench.workloads import (
                         TinyOps,
                         Workload,
                         ce_loss,
                         cifar_batch,
                         gpt,
                         hf_gpt2,
                         image_batch,
                         loader,
                         pooled_linear,
                         reduce_overhead,
                         resnet18,
                         resnet50,
                         small_cnn,
)

WORKLOADS: dict[str, Callable[[torch.device], object]] = {
    # the process's first CUDA work inside the profiled window; the verdict is that of the warm steps
    "cold_start": lambda d: resnet18(d, "cold_start", 128, LAUNCH_BOUND.name),
    "resnet18_bs32": lambda d: resnet18(d, "resnet18_bs32", 32, LAUNCH_BOUND.name),
    "resnet18_bs128": lambda d: resnet18(d, "resnet18_bs128", 128, LAUNCH_BOUND.name),
    "resnet18_bs1024": lambda d: resnet18(d, "resnet18_bs1024", 1024, GPU_BOUND.name),
    "resnet50_pinned": lambda d: Workload("resnet50_pinned", "resnet50", GPU_BOUND.name, d, resnet50(),
                                          image_batch(128, 64), ce_loss, host_input=True, pinned=True),
    "gpt_tiny": lambda d: gpt(d, "gpt_tiny", 2, 64, 128, 4, LAUNCH_BOUND.name),
    "gpt_large": lambda d: gpt(d, "gpt_large", 16, 512, 1024, 8, GPU_BOUND.name),
    "hf_gpt2_small": hf_gpt2,
    "compile_default": lambda d: Workload("compile_default", "resnet8-compiled", LAUNCH_BOUND.name, d, small_cnn(),
                                          cifar_batch(32), ce_loss, compile_mode="default",
                                          fixed=lambda: Workload("compile_default_fixed", "resnet8-compiled",
                                                                 LAUNCH_BOUND.name, d, small_cnn(), cifar_batch(32), ce_loss,
                                                                 compile_mode="reduce-overhead")),
    "tiny_ops": TinyOps,
    "compile_reduce_overhead": reduce_overhead,
    "loader_in_process": lambda d: loader(d, "loader_in_process", 0, 0.3, batch=64, fix_workers=8),
    "loader_two_workers": lambda d: loader(d, "loader_two_workers", 2, 2.0, batch=32, fix_workers=16),
    # 2 workers slower than the unprofiled step (about 16 ms a batch against 10) but faster than the profiled
    # one (about 19): profiled straight from the data-bound steady state (verdicts/bench.py STEADY_FIRST), the
    # queue is empty when the profiler starts and the workers catch up while it slows the steps
    "loader_catching_up": lambda d: loader(d, "loader_catching_up", 2, 1.0, batch=32, fix_workers=16),
    # a worker-fed loader that keeps up with room to spare: its waits are the hand-off of a ready batch
    "loader_ahead": lambda d: loader(d, "loader_ahead", 8, 0.05, batch=32, cause=LAUNCH_BOUND.name),
    # 151 MB of float32 images per step into a model that pools them at once: the copy is the step
    "pageable_copy": lambda d: Workload(
        "pageable_copy", "pooled-linear", TRANSFER_BOUND.name, d, pooled_linear(), image_batch(768, 128), ce_loss,
        host_input=True, pinned=False,
        fixed=lambda: Workload("pageable_copy_fixed", "pooled-linear", TRANSFER_BOUND.name, d, pooled_linear(),
                               image_batch(768, 128), ce_loss, host_input=True, pinned=True)),
    "host_python": lambda d: resnet18(d, "host_python", 128, HOST_BOUND.name, host_work=120_000,
                                      fixed=lambda: resnet18(d, "host_python_fixed", 128, HOST_BOUND.name)),
    "adamw_cpu_scalars": lambda d: resnet18(d, "adamw_cpu_scalars", 128, LAUNCH_BOUND.name, opt="adamw_loop",
                                            fixed=lambda: resnet18(d, "adamw_fused", 128, LAUNCH_BOUND.name,
                                                                   opt="adamw_fused")),
}

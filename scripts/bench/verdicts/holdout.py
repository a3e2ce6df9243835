"""Held-out scenarios for the verdict benchmark: model families and injected causes that the diagnosis and
its profiler-overhead model were never fitted on (timm's ViT and ConvNeXt, Hugging Face's BERT, a plain MLP).

    python scripts/verdict_bench.py --set holdout --out /tmp/vb-holdout      # on a CUDA machine

Each scenario's expected verdict comes from the same unprofiled truth as the main set (truth.py: the
step timed without the profiler, its device work replayed as a CUDA graph, the cause removed and re-timed);
the names below say only which cause was injected. Needs timm and transformers; nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
from stepscope.analysis.verdicts import DATA_BOUND, GPU_BOUND, HOST_BOUND, LAUNCH_BOUND, TRANSFER_BOUND

from bench.workloads import SlowSamples, Workload, ce_loss, cifar_batch, image_batch, lm_loss, token_batch


def _timm(name: str) -> nn.Module:
    import timm

    return timm.create_model(name, pretrained=False, num_classes=10)


def _bert(layers: int = 4, width: int = 256) -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    class LogitsOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = BertForMaskedLM(BertConfig(vocab_size=2048, hidden_size=width, num_hidden_layers=layers,
                                                num_attention_heads=4, intermediate_size=4 * width,
                                                max_position_embeddings=256))

        def forward(self, idx):
            return self.m(input_ids=idx).logits

    return LogitsOnly()


def _mlp(width: int = 1024, depth: int = 8) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(3 * 32 * 32, width)]
    for _ in range(depth):
        layers += [nn.GELU(), nn.Linear(width, width)]
    return nn.Sequential(*layers, nn.GELU(), nn.Linear(width, 10))


def _vit(d, name, batch, cause, **kw):
    return Workload(name, "timm-vit", cause, d, _timm("vit_tiny_patch16_224"), image_batch(batch, 224), ce_loss, **kw)


def _bert_wl(d, name, batch, cause, **kw):
    return Workload(name, "hf-bert", cause, d, _bert(), token_batch(batch, 128, 2048), lm_loss, **kw)


def _convnext_loader(d, name: str, workers: int, fix_workers: int | None = None):
    dl = torch.utils.data.DataLoader(SlowSamples(1_000_000, 2.5, shape=(3, 64, 64)), batch_size=64,
                                     num_workers=workers, pin_memory=d.type == "cuda",
                                     persistent_workers=workers > 0, prefetch_factor=2 if workers else None)
    fix = (lambda: _convnext_loader(d, name + "_fixed", fix_workers)) if fix_workers else None
    return Workload(name, "timm-convnext", DATA_BOUND.name, d, _timm("convnext_atto"), image_batch(64, 64), ce_loss,
                    loader=dl, fixed=fix)


HOLDOUT: dict[str, Callable[[torch.device], object]] = {
    "vit_tiny_bs8": lambda d: _vit(d, "vit_tiny_bs8", 8, LAUNCH_BOUND.name),
    "vit_tiny_bs256": lambda d: _vit(d, "vit_tiny_bs256", 256, GPU_BOUND.name),
    # 154 MB of pageable float32 images a step into the ViT
    "vit_pageable": lambda d: _vit(d, "vit_pageable", 256, TRANSFER_BOUND.name, host_input=True, pinned=False,
                                   fixed=lambda: _vit(d, "vit_pageable_fixed", 256, TRANSFER_BOUND.name,
                                                      host_input=True, pinned=True)),
    "bert_bs8": lambda d: _bert_wl(d, "bert_bs8", 8, LAUNCH_BOUND.name),
    "bert_host_sync": lambda d: _bert_wl(d, "bert_host_sync", 64, HOST_BOUND.name, host_work=150_000,
                                         fixed=lambda: _bert_wl(d, "bert_host_sync_fixed", 64, HOST_BOUND.name)),
    "convnext_loader": lambda d: _convnext_loader(d, "convnext_loader", 2, fix_workers=16),
    "mlp_adamw_loop": lambda d: Workload("mlp_adamw_loop", "mlp", LAUNCH_BOUND.name, d, _mlp(), cifar_batch(256),
                                         ce_loss, opt="adamw_loop",
                                         fixed=lambda: Workload("mlp_adamw_fused", "mlp", LAUNCH_BOUND.name, d,
                                                                _mlp(), cifar_batch(256), ce_loss,
                                                                opt="adamw_fused")),
}

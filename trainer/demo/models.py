"""CIFAR-style ResNets (3x3 stem, stride 1, no max-pool) with injected elementwise ops.

    resnet8               3 stages x 1 BasicBlock, widths 16/32/64: ~78k params, the CPU-friendly default
    resnet18              4 stages x 2 BasicBlocks, widths 64..512: ~11.2M params
    torchvision-resnet18  torchvision's model adapted to 32x32 (3x3 stem, no max-pool); its ReLU modules are
                          swapped for the injected activation, but its residual add is hard-coded, so the
                          fused add+activation is used only by our own resnets
    lenet                 the LeNet-style CNN of PyTorch's CIFAR-10 tutorial ("Training a Classifier"): two 5x5
                          convs with max-pool, three linear layers; ~62k params and ~0.7 MFLOP per image, so its
                          step is cheaper than a per-sample augmentation pipeline (a data-bound run on a CPU)
"""

from __future__ import annotations

import torch
from stepscope.demo.config import ModelConfig
from stepscope.demo.elementwise import Activation, AddActivation, Elementwise, make_elementwise
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, ops: Elementwise) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act1 = Activation(ops)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.add_act = AddActivation(ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.add_act(out, self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage: list[int], widths: list[int], num_classes: int, ops: Elementwise) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]),
                                  Activation(ops))
        layers, cin = [], widths[0]
        for i, (n, w) in enumerate(zip(blocks_per_stage, widths)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1, ops))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    checkpoint = False  # activation checkpointing (build_model): the blocks' activations recomputed in the backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        if self.checkpoint and self.training and torch.is_grad_enabled():
            # each block's input is kept and its inside recomputed in the backward (BatchNorm's running
            # statistics are then updated twice a step)
            h = checkpoint_sequential(self.layers, len(self.layers), h, use_reentrant=False)
        else:
            h = self.layers(h)
        return self.fc(torch.flatten(self.pool(h), 1))


class LeNet(nn.Module):
    def __init__(self, num_classes: int, ops: Elementwise) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 6, 5), Activation(ops), nn.MaxPool2d(2),
                                      nn.Conv2d(6, 16, 5), Activation(ops), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(16 * 5 * 5, 120), Activation(ops), nn.Linear(120, 84),
                                        Activation(ops), nn.Linear(84, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def torchvision_cifar_resnet18(num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool) and PyTorch's own ReLUs."""
    import torchvision  # here: only this architecture pays for its import (about 2 s of CPU)

    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def _torchvision_resnet18(num_classes: int, ops: Elementwise) -> nn.Module:
    m = torchvision_cifar_resnet18(num_classes)
    for parent in m.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.ReLU):
                setattr(parent, name, Activation(ops))
    return m


def build_model(cfg: ModelConfig) -> nn.Module:
    ops = make_elementwise(cfg.ops)
    if cfg.arch in ("resnet8", "resnet18"):
        m = (CifarResNet([1, 1, 1], [16, 32, 64], cfg.num_classes, ops) if cfg.arch == "resnet8"
             else CifarResNet([2, 2, 2, 2], [64, 128, 256, 512], cfg.num_classes, ops))
        m.checkpoint = cfg.checkpoint
        return m
    if cfg.arch == "torchvision-resnet18":
        return _torchvision_resnet18(cfg.num_classes, ops)
    if cfg.arch == "lenet":
        return LeNet(cfg.num_classes, ops)
    raise ValueError(f"unknown arch {cfg.arch!r}")

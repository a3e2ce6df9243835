"""--checkpoint-activations: the same gradients, far fewer bytes kept for the backward (measured with autograd's
saved-tensor hooks on a CPU), and refused for an arch it does not cover.

    python -m pytest -q -p no:xdist tests/test_checkpoint_activations.py
"""

from __future__ import annotations

import subprocess
import sys

import torch
from stepscope.demo.config import ModelConfig
from stepscope.demo.models import build_model


def _step(checkpoint: bool) -> tuple[list[torch.Tensor], int]:
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="resnet8", checkpoint=checkpoint))
    x = torch.randn(16, 3, 32, 32)
    saved = 0

    def pack(t):
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).square().mean()
    loss.backward()
    return [p.grad for p in model.parameters()], saved


def test_the_same_gradients_with_far_fewer_bytes_kept_for_the_backward():
    plain, kept_plain = _step(False)
    ckpt, kept_ckpt = _step(True)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(plain, ckpt))
    assert kept_ckpt < 0.5 * kept_plain  # only the blocks' inputs stay, not what each block makes inside


def test_an_arch_without_blocks_to_recompute_is_refused():
    r = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "train", "--arch", "lenet", "--device", "cpu",
                        "--steps", "2", "--checkpoint-activations"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--checkpoint-activations: resnet8, resnet18 only (not lenet)" in r.stderr

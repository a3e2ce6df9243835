"""The parts the verdict scenarios are made of (scripts/verdict_workloads.py, verdict_holdout.py, verdict_cpu.py):
a step clock that times nothing, a slow per-sample dataset, a nanoGPT-style decoder, and the makers of
random inputs and losses.

    clock = NO_CLOCK                    # what Workload.step() gets when nobody times its phases
    ds = SlowSamples(1_000_000, 2.0)    # 2 ms a sample, like a slow decode
    x, y = _cifar(128)(torch.Generator().manual_seed(0))

Nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def _cifar(batch: int, classes: int = 10):
    def make(g):
        return torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, classes, (batch,), generator=g)
    return make


def _images(batch: int, size: int):
    def make(g):
        return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g)
    return make


def _tokens(batch: int, seq: int, vocab: int):
    def make(g):
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    return make


def _ce(out, y):
    return F.cross_entropy(out.float(), y)


def _lm(out, y):
    return F.cross_entropy(out.float().flatten(0, 1), y.flatten())

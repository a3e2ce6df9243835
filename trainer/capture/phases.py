"""Named step phases: a `record_function` range, plus an NVTX range of the same name with --nvtx.

    phases = Phases(nvtx=True)
    with phases("forward"): ...

so `nsys profile python scripts/train.py --nvtx` shows data/forward/backward/optimizer on its timeline.
"""

from __future__ import annotations

import contextlib

import torch
from torch.profiler import record_function


class Phases:
    def __init__(self, nvtx: bool) -> None:
        self.nvtx = nvtx

    def __call__(self, name: str):
        if not self.nvtx:
            return record_function(name)
        stack = contextlib.ExitStack()
        stack.enter_context(record_function(name))
        stack.enter_context(torch.cuda.nvtx.range(name))
        return stack

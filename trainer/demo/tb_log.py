"""TensorBoard Scalars and Text for a run: a `SummaryWriter` on rank 0, a no-op everywhere else.

Tags written by training:
    train/loss, train/lr, perf/step_ms, perf/images_per_s, perf/peak_cuda_mem_mb, eval/accuracy
    text: config (the resolved configuration), diagnosis (with --profile)
and by the end-of-run analysis: diagnosis/* scalars.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter


class TBLog:
    def __init__(self, run_dir: Path) -> None:
        self.writer = SummaryWriter(log_dir=str(run_dir), flush_secs=10)

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, v in values.items():
            self.writer.add_scalar(tag, v, step)

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        self.writer.add_text(tag, markdown, step)

    def config(self, cfg: dict) -> None:
        # TensorBoard renders text as markdown; indent 4 spaces to show the JSON as a code block
        body = "\n".join("    " + line for line in json.dumps(cfg, indent=2, default=str).splitlines())
        self.text("config", body)

    def close(self) -> None:
        self.writer.close()


class NullLog:
    """Non-zero ranks under torchrun: rank 0 alone writes scalars and text."""

    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        pass

    def config(self, cfg: dict) -> None:
        pass

    def close(self) -> None:
        pass

"""TensorBoard Scalars and Text for a run, through the one event writer (tensorboard/tb_events.py `EventLog`) on
rank 0, a no-op everywhere else. The trace handler's cycle worker writes through the same writer.

Tags written by training:
    train/loss, train/lr, perf/step_ms, perf/images_per_s, perf/peak_cuda_mem_mb, eval/accuracy
    text: config (the resolved configuration)
and with --profile, by each cycle's diagnosis (cycle_worker.py, step = cycle number) and the end-of-run one
(step = the run's last step): Text diagnosis, Scalars diagnosis/*.
"""

from __future__ import annotations

import json
from pathlib import Path

from stepscope.tensorboard.tb_events import EventLog


def run_log(run_dir: Path, main: bool) -> EventLog | NullLog:
    """The run's event writer on the main rank; `NullLog` on the others."""
    return EventLog(run_dir) if main else NullLog()


def config_markdown(cfg: dict) -> str:
    """The resolved configuration as Markdown: the JSON, indented 4 spaces to show as a code block."""
    return "\n".join("    " + line for line in json.dumps(cfg, indent=2, default=str).splitlines())


class NullLog:
    """Non-zero ranks under torchrun: rank 0 alone writes scalars and text."""

    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

"""`run.json`'s schema, in one typed place: `RunRecord`, written atomically by `write()`.

    record = RunRecord(config=cfg.to_dict(), environment=..., ...)
    record.write(run_dir)                         # status "running" at the start
    replace(record, status="completed", final=..., traces=...).write(run_dir)

Fields, in the file's order: config (the resolved configuration), environment (torch/CUDA/GPU/host versions),
git_sha, world_size, global_batch_size, distributed (backend, every rank's worker, DDP options), step_kind,
run_dir, status ("running", "completed", "interrupted", or "failed" when the disk filled up), signal (the
signal's name when interrupted), final (steps, train_loss, eval_accuracy, images_per_s, mean/median_step_ms,
timed_steps, step_times_ms (each timed step's wall time), and the unprofiled step telemetry), traces, loss_history, and after a profiled run diagnosis
(verdict and each span's verdict and metrics).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from stepscope.trace.atomic import write_text_atomic


def finite_or_none(x):
    """JSON has no NaN: a missing number is null."""
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


@dataclass(frozen=True)
class RunRecord:
    config: dict
    environment: dict
    git_sha: str | None
    world_size: int
    global_batch_size: int
    distributed: dict
    step_kind: str
    run_dir: str
    status: str = "running"
    signal: str | None = None
    final: dict | None = None
    traces: list = field(default_factory=list)
    loss_history: list = field(default_factory=list)
    diagnosis: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("signal", "final", "diagnosis"):
            if d[key] is None:
                del d[key]
        return d

    def text(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str, allow_nan=False) + "\n"

    def smallest(self) -> RunRecord:
        """The same record without what can be left out when the disk has no room for more: the loss history,
        the list of traces and the diagnosis summary (diagnosis.md and the traces themselves stay on disk)."""
        return replace(self, loss_history=[], traces=[], diagnosis=None)

    def write(self, run_dir: Path) -> None:
        write_text_atomic(Path(run_dir) / "run.json", self.text())

"""Lightning: a callback that profiles ``Trainer.fit`` with stepscope's schedule and trace handler.

    import lightning as L
    from stepscope.integrations.lightning import StepscopeCallback
    trainer = L.Trainer(callbacks=[StepscopeCallback("logs/run")])       # wait=1, warmup=1, active=3
    trainer.fit(model, loader)
    # then: stepscope tensorboard --logdir logs      (or: stepscope analyze logs/run)

The profiler starts with training and steps after every training batch (``on_train_batch_end``, after the
optimizer step), so a cycle's steps are whole training steps, Lightning's hooks and logging included. Works
with ``lightning`` (``lightning.pytorch``) or, without it, ``pytorch_lightning``: pass ``StepscopeCallback``
from this module to a Trainer of the same package.
"""

from __future__ import annotations

import os

from stepscope.integrations.session import ProfilingSession, ScheduleArgs

try:
    from lightning.pytorch import Callback
except ImportError:  # the older standalone package
    from pytorch_lightning import Callback


class StepscopeCallback(Callback):
    """Profile training: ``wait``/``warmup``/``active``/``repeat``/``skip_first`` as torch.profiler.schedule;
    ``profile_options`` go to torch.profiler.profile (record_shapes=..., with_stack=...;
    profile_memory is on unless given)."""

    def __init__(self, dir_name: str | os.PathLike, *, wait: int = 1, warmup: int = 1, active: int = 3,
                 repeat: int = 1, skip_first: int = 0, worker_name: str | None = None, use_gzip: bool = True,
                 close_timeout: float = 60.0, **profile_options) -> None:
        super().__init__()
        self.session = ProfilingSession(dir_name, ScheduleArgs(wait, warmup, active, repeat, skip_first), worker_name,
                                        use_gzip, profile_options, close_timeout)

    def on_train_start(self, trainer, pl_module) -> None:
        self.session.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.session.step()

    def on_train_end(self, trainer, pl_module) -> None:
        self.session.stop()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.session.stop()

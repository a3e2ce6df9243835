"""Hugging Face ``Trainer``: a ``TrainerCallback`` that profiles training with stepscope's schedule and trace
handler.

    from transformers import Trainer
    from stepscope.integrations.hf import StepscopeCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[StepscopeCallback("logs/run")])
    trainer.train()
    # then: stepscope tensorboard --logdir logs      (or: stepscope analyze logs/run)

The profiler starts with training and steps at ``on_step_end``, which the Trainer calls after every optimizer
step (once per ``gradient_accumulation_steps`` batches), so a recorded step is a whole optimizer step.
"""

from __future__ import annotations

import os

from stepscope.integrations.session import ProfilingSession, ScheduleArgs
from transformers import TrainerCallback


class StepscopeCallback(TrainerCallback):
    """Profile training: ``wait``/``warmup``/``active``/``repeat``/``skip_first`` as torch.profiler.schedule;
    ``profile_options`` go to torch.profiler.profile (record_shapes=..., with_stack=...;
    profile_memory is on unless given)."""

    def __init__(self, dir_name: str | os.PathLike, *, wait: int = 1, warmup: int = 1, active: int = 3,
                 repeat: int = 1, skip_first: int = 0, worker_name: str | None = None, use_gzip: bool = True,
                 close_timeout: float = 60.0, **profile_options) -> None:
        self.session = ProfilingSession(dir_name, ScheduleArgs(wait, warmup, active, repeat, skip_first), worker_name,
                                        use_gzip, profile_options, close_timeout)

    def on_train_begin(self, args, state, control, **kwargs):
        self.session.start()  # every process: each writes its own worker's traces

    def on_step_end(self, args, state, control, **kwargs):
        self.session.step()

    def on_train_end(self, args, state, control, **kwargs):
        self.session.stop()

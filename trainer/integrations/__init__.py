"""One-line hooks that profile a framework's training loop with stepscope's schedule and trace handler.

    import lightning as L
    from stepscope.integrations.lightning import StepscopeCallback
    L.Trainer(callbacks=[StepscopeCallback("logs/run")])

    from transformers import Trainer
    from stepscope.integrations.hf import StepscopeCallback
    Trainer(..., callbacks=[StepscopeCallback("logs/run")])

    from accelerate import Accelerator
    from stepscope.integrations.accelerate import profile_kwargs
    accelerator = Accelerator(kwargs_handlers=[profile_kwargs("logs/run")])
    with accelerator.profile() as prof: ...; prof.step()

Each writes what `stepscope.trace_handler` writes (the adapted trace, the original under raw/, the diagnosis
in TensorBoard) into the folder given. From a clone, `pip install -e ".[integrations]"` installs the three
libraries; each module imports only its own, on first use: ``stepscope.integrations.lightning`` after
``import stepscope`` imports Lightning then, and this package alone imports none of them, nor torch.
"""

from __future__ import annotations

import importlib

_MODULES = ("lightning", "hf", "accelerate", "session")


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module 'stepscope.integrations' has no attribute {name!r}")
    return importlib.import_module(f"stepscope.integrations.{name}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])

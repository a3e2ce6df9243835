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
in TensorBoard) into the folder given. `pip install stepscope[integrations]` installs the three libraries; each
module imports only its own.
"""

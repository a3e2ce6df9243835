"""stepscope: says why a PyTorch training step is slow, with evidence, and shows it in TensorBoard.

    import stepscope
    report = stepscope.analyze("logs/myrun")          # any folder of traces, or one trace file
    print(report.verdict, report.to_dict())
    prof = torch.profiler.profile(..., on_trace_ready=stepscope.trace_handler("logs/myrun"))
    with stepscope.profile("logs/myrun") as prof:     # stepscope.schedule + trace_handler (docs/loops.md)
        for batch in stepscope.loader(train_loader):  # times the wait for each batch
            ...; prof.step()
    rows = stepscope.compare(["--device", "cpu", "--variants", "eager"])

    stepscope.integrations.lightning.StepscopeCallback("logs/run")   # and .hf, .accelerate (docs/integrations.md)

The names load on first use (``__version__`` too), so `import stepscope` stays quick and imports no torch.
This package is the repository's trainer/ folder; its `kernels` subpackage is the repository's kernels/ folder.
"""

from __future__ import annotations

import importlib

_PUBLIC = {  # name -> (module, attribute): each public call is one line into the engine
    "analyze": ("stepscope.report.front", "analyze"),
    "Report": ("stepscope.report.front", "Report"),
    "trace_handler": ("stepscope.capture.handler", "trace_handler"),
    "schedule": ("stepscope.capture.schedule", "schedule"),
    "loader": ("stepscope.capture.loader", "loader"),
    "input_copy": ("stepscope.capture.input_copy", "input_copy"),
    "profile": ("stepscope.capture.session", "profile"),
    "compare": ("stepscope.demo.comparison", "compare"),
}
_SUBPACKAGES = ("integrations",)  # reachable as attributes, imported on first use
__all__ = ["__version__", *_PUBLIC, *_SUBPACKAGES]


def __getattr__(name: str):
    if name == "__version__":  # read on first use: importing importlib.metadata costs every process 30 ms
        globals()[name] = _version()
        return globals()[name]
    if name in _SUBPACKAGES:
        return importlib.import_module(f"stepscope.{name}")  # the import sets it as an attribute here
    if name not in _PUBLIC:
        raise AttributeError(f"module 'stepscope' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), "__version__", *_PUBLIC, *_SUBPACKAGES})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stepscope")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"

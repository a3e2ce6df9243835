"""Import this checkout's code as `stepscope.trainer` and `stepscope.kernels`, whatever else is installed.

    import _checkout   # first thing in every script under scripts/ (and in test workers run as scripts)

The repository keeps `trainer/` and `kernels/` at its top level; installed, they live under the one
`stepscope` namespace. Binding the name `stepscope` to this checkout's root makes a clone's scripts run the
clone's code even when another stepscope (or another distribution's `trainer` or `kernels`) is installed.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def use_checkout(root: Path = ROOT) -> None:
    current = sys.modules.get("stepscope")
    if current is not None and list(getattr(current, "__path__", [])) == [str(root)]:
        return
    package = types.ModuleType("stepscope", "this checkout's trainer/ and kernels/")
    package.__path__ = [str(root)]
    sys.modules["stepscope"] = package


use_checkout()

"""Shared test set-up: this checkout's code as `stepscope.*`, the CUDA skip, and shared fixtures.

Tests marked `cuda` skip where torch sees no GPU (CI); everything else runs everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import _checkout  # noqa: E402,F401  binds `stepscope` to this checkout before any test imports it
import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items) -> None:
    if not any(item.get_closest_marker("cuda") for item in items):
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)

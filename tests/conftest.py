"""Shared test set-up: the CUDA skip and shared fixtures.

Tests marked `cuda` skip where torch sees no GPU (CI); everything else runs everywhere.
"""

from __future__ import annotations

import pytest


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

"""Shared test set-up: the CUDA skip and shared fixtures.

Tests marked `cuda` skip where torch sees no GPU (CI); everything else runs everywhere.
"""

from __future__ import annotations

import os

import pytest

# Under pytest-xdist the workers share the machine's cores, and each process a test starts (the trainer, a
# command) would run as many OpenMP threads as the machine has cores: threads that meet at every parallel region
# then spin there while another worker's process holds the core they wait for, several times the CPU time and
# wall time of one thread each. One thread per process, unless the caller chose; the `alone` tests run after
# the parallel set, without xdist, and keep every core.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


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

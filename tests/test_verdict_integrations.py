"""The integrations benchmark's expected verdict: from the unprofiled figures alone (verdicts/integrations.py)."""

from __future__ import annotations

import pytest
from bench.verdicts.integrations import expected_of
from stepscope.analysis.verdicts import GPU_BOUND, HOST_BOUND, LAUNCH_BOUND


@pytest.mark.parametrize("step, gpu, plain, expected", [
    (13.4, None, 5.0, None),                 # no GPU time: no expectation
    (10.0, 5.0, 9.0, GPU_BOUND.name),        # the GPU busy half the step
    (13.4, 1.5, 5.0, HOST_BOUND.name),       # the framework adds 8.4 ms; a graph would save 3.5
    (13.4, 1.5, 11.0, LAUNCH_BOUND.name),    # the framework adds 2.4 ms; a graph would save 9.5
    (13.4, 1.5, None, LAUNCH_BOUND.name),    # no plain loop: the GPU idles, so the launches
])
def test_the_expected_verdict_is_the_removal_that_saves_most(step, gpu, plain, expected):
    assert expected_of(step, gpu, plain) == expected

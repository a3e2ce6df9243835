"""The straggler test's leave-one-out medians against statistics.median of the others (the oracle)."""

from __future__ import annotations

import random
import statistics

import pytest
from stepscope.analysis.cross_rank import medians_without_each


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64, 257])
def test_each_is_the_median_of_the_others(n):
    rng = random.Random(n)
    for values in ([rng.uniform(1, 100) for _ in range(n)], [float(rng.randint(1, 4)) for _ in range(n)]):
        want = [statistics.median(values[:i] + values[i + 1:]) for i in range(n)]
        assert medians_without_each(values) == want  # exactly: the same elements, averaged the same way

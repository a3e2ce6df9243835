"""Parametrizations whose cases all exercise one path: a few representative cases run by default, the others
are marked `slow` (they still run with `python -m pytest -q -m slow`). See docs/testing.md, "Test suite cost"."""
from __future__ import annotations

import pytest


def few_by_default(values, keep, ids=None) -> list:
    """`values` as parameters, each one not in `keep` marked slow. Every kept value must be among `values`, so
    that a renamed case cannot silently move the whole parametrization out of the default run."""
    values = list(values)
    ids = list(ids) if ids is not None else [None] * len(values)
    keys = [i if i is not None else v for v, i in zip(values, ids)]
    missing = [k for k in keep if k not in keys]
    assert not missing, f"kept cases {missing} are not among the parameters {keys}"
    return [pytest.param(v, id=i) if k in keep else pytest.param(v, id=i, marks=pytest.mark.slow)
            for v, i, k in zip(values, ids, keys)]

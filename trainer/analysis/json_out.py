"""Strict JSON for reports: never NaN or Infinity, which JSON does not have and strict parsers reject.

    from stepscope.analysis.json_out import dumps, finite
    print(dumps(report.to_dict(), indent=1))      # what `scripts/analyze.py RUN_DIR --json` prints

``finite`` replaces every non-finite float (NaN, ±Infinity) in nested dicts, lists and tuples by None
(``null``); ``dumps`` is ``json.dumps`` of that with ``allow_nan=False``, so a value that slipped past
``finite`` raises instead of printing invalid JSON.
"""

from __future__ import annotations

import json
import math


def finite(obj):
    """A copy of ``obj`` with NaN and ±Infinity floats replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj, **kwargs) -> str:
    return json.dumps(finite(obj), allow_nan=False, **kwargs)

"""Strict JSON for reports: never NaN or Infinity, which JSON does not have and strict parsers reject.

    from stepscope.analysis.json_out import dumps, finite
    print(dumps(report.to_dict(), indent=1))      # what `scripts/analyze.py RUN_DIR --json` prints

``finite`` replaces every non-finite float (NaN, ±Infinity) in nested dicts, lists and tuples by None
(``null``); ``dumps`` is ``json.dumps`` of that with ``allow_nan=False``, so a value that slipped past
``finite`` raises instead of printing invalid JSON. Its text is json's, byte for byte: json's C encoder writes
it without indentation, and msgspec indents it (json indents in Python, about 4 times slower: a quarter of a
second for a large report). ``finite`` is only applied when json refuses a value.
"""

from __future__ import annotations

import json
import math

import msgspec


def finite(obj):
    """A copy of ``obj`` with NaN and ±Infinity floats replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj, indent=None, **kwargs) -> str:
    try:
        text = json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # a NaN or an Infinity somewhere: each becomes null
        text = json.dumps(finite(obj), allow_nan=False, **kwargs)
    if indent is None:
        return text
    if type(indent) is not int or indent < 1:  # json's other indents (0, a string): by json itself
        return json.dumps(json.loads(text), indent=indent, **kwargs)
    return msgspec.json.format(text.encode(), indent=indent).decode()

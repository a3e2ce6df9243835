"""Results built from one parsed trace, kept while the analysis asks for them again. Torch-free.

    @per_trace
    def host_sets(trace: ParsedTrace) -> HostSets: ...   # built on the first call for a trace, then reused

One analysis asks for the same sets, lookups and sorted columns of one trace from several places; each
is a pass over all its events (millions in a large trace). The result is kept for the trace last asked
about and let go with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from stepscope.analysis.events import ParsedTrace


def per_trace(build: Callable):
    """``build(trace)``, kept for the trace last asked about: one analysis asks for the same sets of one trace
    several times, and building them is a pass over all its events."""
    last: list = [None]  # (weak reference to the trace, its result), replaced as one object

    def forget(ref) -> None:  # the trace is gone: so is what was built from it
        held = last[0]
        if held is not None and held[0] is ref:
            last[0] = None

    def cached(trace: ParsedTrace):
        held = last[0]
        if held is not None and held[0]() is trace:
            return held[1]
        result = build(trace)
        last[0] = (weakref.ref(trace, forget), result)
        return result

    cached.__doc__ = build.__doc__
    return cached

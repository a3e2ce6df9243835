"""Python's cyclic garbage collector paused while a trace's events are read.

    with gc_paused():
        parsed = parse_trace_file(path, worker, span)

Reading a large trace creates millions of small objects that live on (events, columns) and form no
cycles; each of the collector's passes over the older generations walks all of them, which costs a
reading process 10-30% of its time and more the more it already holds. Paused, nothing is lost: reference
counting frees what is dropped, and the collector runs again afterwards. Nesting is allowed; the collector
is enabled again only by the outermost block, and only if it was enabled when that block began.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

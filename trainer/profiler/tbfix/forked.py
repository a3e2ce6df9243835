"""Work of the export done by a forked helper beside this process (stream_plan.py, stream_write.py).

    ranges = export_ranges(path, decode)        # [(0, b), (b, None)] or None: read/write in two halves
    with forked(fn, big_columns, more) as result:
        ...                                     # this process works meanwhile
        value = result.result()                 # fn(big_columns, more), computed by the helper

A large uncompressed trace is cut at an event boundary near its middle (trace/jsonstream.py's
``split_points``): this process handles the first range and a helper the second, in the planning pass and
again in the writing pass, so each takes about half the time on two cores. Anything smaller than
``SPLIT_FROM``, gzipped, or on a machine with one CPU is handled in one range, here.

``forked`` runs one call in a child forked at once: the child inherits the call's arguments with the rest
of this process's memory (columns of millions of entries are not pickled); only the result comes back.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from ..trace.jsonstream import split_points
from ..trace.workers import SPLIT_FROM

_INHERITED: list = []  # [function, arguments] of the call the child about to be forked runs


def export_ranges(path: Path, decode: Callable[[bytes], list]) -> list[tuple[int, int | None]] | None:
    path = Path(path)
    if (os.cpu_count() or 1) < 2 or path.name.endswith(".gz") or path.stat().st_size < SPLIT_FROM:
        return None
    return split_points(path, 2, decode)


def _run_inherited():
    fn, args = _INHERITED
    return fn(*args)


@contextmanager
def forked(fn: Callable, *args) -> Iterator[Future]:
    """``fn(*args)`` in a forked child; the block's exit waits for it. Raises what starting it raises
    (OSError, RuntimeError); ``result()`` raises what the call raised, or BrokenProcessPool."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        _INHERITED[:] = [fn, args]
        try:
            yield pool.submit(_run_inherited)  # a fork context starts its process within submit
        finally:
            _INHERITED.clear()

"""Gzipped traces read from the middle: an index of decompression points (rapidgzip), so that a large .gz
trace is parsed and exported in byte ranges at once like an uncompressed one. Torch-free.

    f = open_at(path)              # a binary file of the decompressed bytes; seek() is cheap where indexed
    f.seek(offset)                 # the first seek past the index decompresses up to offset (and indexes it)
    remember(path, f)              # keep f's index for every later open_at(path) in this process and its forks
    f.close()

A gzip stream can only be decompressed from its start, so the first look at the middle of a file (where
jsonstream.split_points cuts it) decompresses the bytes before it once, recording a checkpoint (the 32 KiB
window a restart needs) every few MiB. That index is kept here, in this process's memory, by (path, size,
mtime): helpers forked afterwards (trace/workers.py) inherit it and start at their range at once, and the
export's second pass over the same file finds it too. About 8 MB per GB of JSON. ``available()`` is False,
and .gz traces are read in one range by Python's gzip, without rapidgzip (it installs as a wheel; an import
that fails anyway) and under an address-space or data limit below ``ROOM`` (``ulimit -v``/``-d``):
rapidgzip reserves address space freely and crashes the process, rather than raising, when it is refused.
An open rapidgzip file runs threads of its own: close it before forking.
"""

from __future__ import annotations

import io
import os
import resource
import struct
from pathlib import Path

ROOM = 4 << 30  # address space rapidgzip may need to reserve (1 GiB was too little on a 64 MiB trace)
_INDEXES: dict[tuple[str, int, int], bytes] = {}


def available() -> bool:
    """Whether .gz files can be read from the middle here (module docstring)."""
    for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY and soft < ROOM:
            return False
    try:
        import rapidgzip  # noqa: F401
    except ImportError:
        return False
    return True


def _key(path: Path) -> tuple[str, int, int]:
    st = os.stat(path)
    return str(Path(path).resolve()), st.st_size, st.st_mtime_ns


def open_at(path: Path):
    """``path`` (gzip) opened for reading its decompressed bytes in one thread, with the index kept for it."""
    import rapidgzip

    f = rapidgzip.open(str(path), parallelization=1)
    index = _INDEXES.get(_key(path))
    if index is not None:
        try:
            f.import_index(io.BytesIO(index))
        except BaseException:
            f.close()
            raise
    return f


def remember(path: Path, f) -> None:
    """Keep the index ``f`` (from ``open_at(path)``) has built, for later opens of ``path``."""
    out = io.BytesIO()
    f.export_index(out)
    _INDEXES[_key(path)] = out.getvalue()


def uncompressed_size(path: Path) -> int | None:
    """The decompressed size the gzip trailer records (modulo 4 GiB; for a file of several gzip members, the
    last member's), or None when that is plainly not the size: smaller than the file."""
    size = os.path.getsize(path)
    if size < 18:
        return None
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", f.read(4))
    return isize if isize >= size else None

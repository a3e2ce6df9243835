"""Gzipped traces decompressed at memory speed: Intel's ISA-L (``isal``) where installed, else zlib-ng
(``zlib_ng``), else Python's gzip. Torch-free.

    with open_gz(path) as f:      # a binary file of the decompressed bytes, read front to back
        f.read(8 << 20)
    f = open_gz(path, at=offset)  # ... from a decompressed offset: the bytes before it decompressed, dropped
    f.seek(later)                 # forward the same way (backward: from the file's start again)

The same bytes, and the same exceptions as Python's gzip (a corrupt stream raises ``zlib.error``, a truncated
one ``EOFError``, a file that is no gzip ``gzip.BadGzipFile``), whichever library decompresses. ISA-L
decompresses a GB of Kineto JSON in about a third of the CPU time of zlib.

A gzip stream can only be decompressed from its start, so reading from the middle of a .gz trace (a byte
range that a helper process parses, jsonstream.split_near) decompresses the bytes before it once more, in the
helper, which finds where its range starts on the way.
With ISA-L that costs 0.55 s per GB here, less than keeping an index of restart points (rapidgzip's: 0.41 s
to index half a GB and 0.38 s to hand the index on, then 1.77 s per GB to decompress on one thread;
BENCHMARKS.md, "A gigabyte's parse without Python numbers per sample, `.json.gz` ranges without an index ...").
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from pathlib import Path

try:
    from isal import igzip as _fast
    from isal.isal_zlib import error as _FastError
    LIBRARY = "isal"
except ImportError:  # not installed, or no wheel for this platform
    try:
        from zlib_ng import gzip_ng as _fast
        from zlib_ng.zlib_ng import error as _FastError
        LIBRARY = "zlib-ng"
    except ImportError:
        _fast, _FastError, LIBRARY = None, zlib.error, "zlib"

SKIP_BLOCK = 4 << 20  # bytes decompressed and dropped at a time on the way to an offset


class _Gz(io.RawIOBase):
    """A .gz file's decompressed bytes, raising what Python's gzip would, with a forward ``seek``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._raw = self._open()
        self._pos = 0

    def _open(self):
        return gzip.open(self._path, "rb") if _fast is None else _fast.open(self._path, "rb")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        try:
            data = self._raw.read(n)
        except _FastError as e:
            raise zlib.error(str(e)) from None
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        """Decompressed straight into ``b`` (no bytes object made and copied)."""
        try:
            n = self._raw.readinto(b)
        except _FastError as e:
            raise zlib.error(str(e)) from None
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """To ``offset`` of the decompressed bytes (``os.SEEK_END``: to the end, whose offset is returned).
        Raises EOFError when the stream ends before ``offset``."""
        if whence == os.SEEK_END:
            while self.read(SKIP_BLOCK):
                pass
            return self._pos
        if whence != os.SEEK_SET:
            raise io.UnsupportedOperation("seek from the start or the end only")
        if offset < self._pos:  # a gzip stream goes one way: from its start again
            self._raw.close()
            self._raw, self._pos = self._open(), 0
        while self._pos < offset:
            if not self.read(min(SKIP_BLOCK, offset - self._pos)):
                raise EOFError(f"{self._path}: decompressed to {self._pos} bytes, not to offset {offset}")
        return self._pos

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_gz(path: Path, at: int = 0) -> io.RawIOBase:
    """``path`` (a gzip file) for reading its decompressed bytes from offset ``at`` on (module docstring)."""
    f = _Gz(Path(path))
    if at:
        try:
            f.seek(at)
        except BaseException:
            f.close()
            raise
    return f


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

"""Gzipped traces decompressed at memory speed: Intel's ISA-L (``isal``) where installed, else zlib-ng
(``zlib_ng``), else Python's gzip. Torch-free.

    with open_gz(path) as f:      # a binary file of the decompressed bytes, read front to back
        f.read(8 << 20)

The same bytes, and the same exceptions as Python's gzip (a corrupt stream raises ``zlib.error``, a truncated
one ``EOFError``, a file that is no gzip ``gzip.BadGzipFile``), whichever library decompresses. ISA-L
decompresses a GB of Kineto JSON in about a third of the CPU time of zlib. Reading from the middle of a .gz
file is gzindex.py's (rapidgzip).
"""

from __future__ import annotations

import gzip
import io
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


class _SameErrors(io.RawIOBase):
    """The fast library's file, raising what Python's gzip would."""

    def __init__(self, raw) -> None:
        self._raw = raw

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        try:
            return self._raw.read(n)
        except _FastError as e:
            raise zlib.error(str(e)) from None

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_gz(path: Path):
    """``path`` (a gzip file) for reading its decompressed bytes front to back (module docstring)."""
    if _fast is None:
        return gzip.open(path, "rb")
    raw = _fast.open(path, "rb")
    return _SameErrors(raw)

"""Open a trace file for reading with a ceiling on how many (decompressed) bytes it may yield. Torch-free.

    with open_trace(Path("w.1.pt.trace.json.gz")) as f:      # a binary file object
        trace = json.load(f)                                  # raises TraceTooLarge past the ceiling

A gzip file a few MB long can inflate to many GB (a "gzip bomb"); parsing JSON takes several times the text's
size again. ``read_limit()`` is a quarter of the memory this process may still use: the smaller of the
system's available memory (``MemAvailable`` in /proc/meminfo) and the address-space limit
(``ulimit -v``), whichever is known. Reading stops, and ``TraceTooLarge`` (a ValueError) is raised with one
line naming the file, as soon as more than that has come out, so a bomb costs at most the ceiling, never the
whole inflation. Streaming readers get the same check on every ``read(n)``.
"""

from __future__ import annotations

import io
import resource
from pathlib import Path

from stepscope.trace.gzopen import open_gz

CHUNK = 1 << 20
MEMORY_SHARE = 4  # the ceiling is 1/MEMORY_SHARE of the memory left
FALLBACK_LIMIT = 8 << 30  # when neither the available memory nor an address-space limit is known


class TraceTooLarge(ValueError):
    """The file yields more bytes than this process can afford to parse; the message is one line."""


def available_memory() -> int | None:
    """Bytes this process may still allocate, as far as the system says; None when unknown."""
    known = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    known.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit in (resource.RLIMIT_AS, resource.RLIMIT_DATA):  # address space; heap and private mappings
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            known.append(soft)
    return min(known) if known else None


def read_limit() -> int:
    """The most bytes a trace file may yield (decompressed) before reading stops."""
    avail = available_memory()
    return avail // MEMORY_SHARE if avail is not None else FALLBACK_LIMIT


class _Bounded(io.RawIOBase):
    def __init__(self, raw, path: Path, limit: int):
        self._raw, self._path, self._limit, self._count = raw, path, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return b"".join(iter(lambda: self.read(CHUNK), b""))
        data = self._raw.read(min(n, self._limit + 1 - self._count))
        self._count += len(data)
        self._check()
        return data

    def readinto(self, b) -> int:
        with memoryview(b) as view, view[:max(0, min(len(view), self._limit + 1 - self._count))] as room:
            got = self._raw.readinto(room) or 0
        self._count += got
        self._check()
        return got

    def _check(self) -> None:
        if self._count > self._limit:
            raise TraceTooLarge(f"{self._path}: refused: yields more than {self._limit / 2**20:.0f} MiB "
                                f"(1/{MEMORY_SHARE} of the memory available to this process); a gzip bomb "
                                "or a trace too large to analyse here")

    def close(self) -> None:
        self._raw.close()
        super().close()


def bounded(raw, path: Path, limit: int | None = None) -> io.RawIOBase:
    """``raw`` (a binary file of ``path``'s JSON, at any position) yielding at most ``limit`` more bytes
    (default ``read_limit()``)."""
    return _Bounded(raw, Path(path), read_limit() if limit is None else limit)


def open_trace(path: Path, limit: int | None = None) -> io.RawIOBase:
    """``path`` for binary reading (gunzipped when the name ends in .gz), yielding at most ``limit`` bytes
    (default ``read_limit()``)."""
    path = Path(path)
    raw = open_gz(path) if path.name.endswith(".gz") else open(path, "rb")
    return _Bounded(raw, path, read_limit() if limit is None else limit)

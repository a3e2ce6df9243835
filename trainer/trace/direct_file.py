"""A file written around the page cache (``O_DIRECT``), for copies of a gigabyte that nothing reads back soon.

    with writer_on(fd, direct=True) as out:   # a DirectFile where the file system takes O_DIRECT, else a
        out.write(data)                        # plain buffered file on the same descriptor

Written through the page cache, every byte of a gigabyte's copy is copied into the cache by the kernel, held
there dirty, written back and later reclaimed: most of the export's system time. ``O_DIRECT`` moves the bytes
from this process's memory to the device instead. Its rules (the memory, the length and the file offset of
each write aligned to the device's blocks) are kept by filling two page-aligned buffers of ``BUFFER`` bytes:
one is written by a thread (concurrent.futures) while the other fills, each at its offset (pwrite). The last
one is padded to ``BLOCK`` and the file then cut to its size.

Where the file system refuses ``O_DIRECT`` (tmpfs on older kernels, FUSE, a platform without it), the
descriptor is written as a plain buffered file; where one write is refused (a device with larger blocks),
``O_DIRECT`` is turned off for the rest and that write done again. A failed write is raised by the next
``write``, ``flush``, ``seek`` or ``close`` that waits for it, naming the file. Not safe for use from two
threads at once (the copy's writer uses it from one at a time).
"""

from __future__ import annotations

import errno
import fcntl
import io
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor

BUFFER = 16 << 20
BLOCK = 4096  # the largest logical block of common devices; the last write is padded to it


def writer_on(fd: int, name: str, direct: bool):
    """A binary file that writes to the descriptor ``fd`` (an empty file named ``name``) and closes it: a
    ``DirectFile`` when ``direct`` and the file system takes ``O_DIRECT``, else ``os.fdopen(fd, "wb")``."""
    if direct and _set_direct(fd, True):
        return DirectFile(fd, name)
    return os.fdopen(fd, "wb")


def _set_direct(fd: int, on: bool) -> bool:
    """Turn ``O_DIRECT`` on or off for ``fd``; whether it is now as asked."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return not on
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | flag if on else flags & ~flag)
    except OSError:  # EINVAL: this file system does not take it
        return False
    return True


class DirectFile(io.RawIOBase):
    """Write-only, sequential: ``write``, ``flush`` (waits for nothing: the bytes go when a buffer is full),
    ``seek(0)`` with ``truncate()`` (start again, the written bytes dropped), ``tell`` and ``close``.
    ``fileno()`` is for a caller that writes to the descriptor itself (copy_file_range, which copies a file
    inside the kernel, faster than any write from here): the bytes held are written first, and from then on
    the file is a plain one, written through the page cache at the descriptor's position."""

    def __init__(self, fd: int, name: str) -> None:
        super().__init__()
        self._fd, self._name = fd, name
        self._buffers = [mmap.mmap(-1, BUFFER), mmap.mmap(-1, BUFFER)]
        self._pending: list[Future | None] = [None, None]
        self._cur = 0  # the buffer being filled
        self._filled = 0  # bytes in it
        self._offset = 0  # the file offset of its first byte
        self._pool: ThreadPoolExecutor | None = None  # its thread starts at the first full buffer
        self._plain = False  # fileno() was asked for: written as a plain file from then on

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if not self._plain:
            self._wait()
            _set_direct(self._fd, False)
            with memoryview(self._buffers[self._cur])[:self._filled] as held:
                self._write_all(held, self._offset)
            os.lseek(self._fd, self._offset + self._filled, os.SEEK_SET)
            self._offset, self._filled, self._plain = 0, 0, True
        return self._fd

    def write(self, data) -> int:
        if self._plain:
            with memoryview(data).cast("B") as view:
                self._write_all(view, None)
                return len(view)
        self._check()
        view = memoryview(data).cast("B")
        n, at = len(view), 0
        while at < n:
            k = min(BUFFER - self._filled, n - at)
            self._buffers[self._cur][self._filled:self._filled + k] = view[at:at + k]
            self._filled += k
            at += k
            if self._filled == BUFFER:
                self._send(BUFFER)
        return n

    def tell(self) -> int:
        if self._plain:
            return os.lseek(self._fd, 0, os.SEEK_CUR)
        return self._offset + self._filled

    def flush(self) -> None:
        self._check()

    def seek(self, pos: int, whence: int = 0) -> int:
        if (pos, whence) != (0, 0):
            raise io.UnsupportedOperation("a DirectFile only starts again from 0")
        self._wait()
        self._filled = self._offset = 0
        if self._plain:
            os.lseek(self._fd, 0, os.SEEK_SET)
        return 0

    def truncate(self, size: int | None = None) -> int:
        size = self.tell() if size is None else size
        if size != self.tell():
            raise io.UnsupportedOperation("a DirectFile is only cut where it is")
        self._wait()
        os.ftruncate(self._fd, size)
        return size

    def close(self) -> None:
        if self.closed:
            return
        try:
            size = self.tell()
            if self._filled and not self._plain:
                self._send(-(-self._filled // BLOCK) * BLOCK)  # padded; cut below
            self._wait()
            os.ftruncate(self._fd, size)
        finally:
            self._stop()
            super().close()

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()
        else:  # the caller's error stands: the file is being abandoned
            self._stop()
            super().close()

    def _send(self, length: int) -> None:
        """The current buffer's first ``length`` bytes written at its offset by the thread; then the other
        buffer, once its own write is done, becomes the current one."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="stepscope-direct")
        self._pending[self._cur] = self._pool.submit(self._pwrite, self._cur, length, self._offset)
        self._offset += length
        self._filled = 0
        self._cur ^= 1
        self._result(self._cur)

    def _pwrite(self, b: int, length: int, offset: int) -> None:
        with memoryview(self._buffers[b])[:length] as data:
            self._write_all(data, offset)

    def _write_all(self, data: memoryview, offset: int | None) -> None:
        """``data`` written at ``offset`` (None: at the descriptor's position); an error raised naming the
        file."""
        failed = None
        done, length = 0, len(data)
        while done < length and failed is None:
            with data[done:] as rest:
                try:
                    done += os.write(self._fd, rest) if offset is None else self._pwrite_once(rest, offset + done)
                except OSError as e:
                    failed = (e.errno, e.strerror)
        if failed is not None:  # raised here, outside the handler: no traceback holds the buffer's views
            raise OSError(*failed, self._name)

    def _pwrite_once(self, data: memoryview, offset: int) -> int:
        try:
            return os.pwrite(self._fd, data, offset)
        except OSError as e:
            # a length or an offset this device does not take directly: written buffered, and the rest too
            if e.errno != errno.EINVAL or not _set_direct(self._fd, False):
                raise
        return os.pwrite(self._fd, data, offset)

    def _result(self, b: int) -> None:
        future, self._pending[b] = self._pending[b], None
        if future is not None:
            future.result()

    def _wait(self) -> None:
        """Every write sent is done; the first failure raised."""
        for b in (self._cur ^ 1, self._cur):
            self._result(b)

    def _check(self) -> None:
        """A write that has already failed, raised now."""
        for b in (0, 1):
            future = self._pending[b]
            if future is not None and future.done() and future.exception() is not None:
                self._result(b)

    def _stop(self) -> None:
        """The thread ended (its write under way done), the buffers and the descriptor closed."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending = [None, None]  # a failure of theirs is not raised over the caller's own error
        for buffer in self._buffers:
            try:
                buffer.close()
            except BufferError:  # a view still held (an error's traceback): freed with it
                pass
        os.close(self._fd)

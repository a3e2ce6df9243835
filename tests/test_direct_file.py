"""The copy's file written around the page cache (trace/direct_file.py): the same bytes as a plain file in
every case, a plain file where O_DIRECT is refused, and a failed write raised, naming the file, with nothing
left behind.

    python -m pytest -q tests/test_direct_file.py
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stepscope.plugin_copy import stream_write
from stepscope.trace import direct_file
from stepscope.trace.direct_file import DirectFile, writer_on

O_DIRECT = getattr(os, "O_DIRECT", 0)
SMALL = 2 * direct_file.BLOCK  # buffers this small: most writes cross one


def _open(path: Path, direct: bool = True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    return writer_on(fd, str(path), direct)


def _direct_on(f) -> bool:
    return bool(fcntl.fcntl(f._fd, fcntl.F_GETFL) & O_DIRECT)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(direct_file, "BUFFER", SMALL)


def _takes_direct(folder: Path) -> bool:
    with _open(folder / "probe") as f:
        return isinstance(f, DirectFile)


@pytest.mark.skipif(not O_DIRECT, reason="this platform has no O_DIRECT")
def test_the_file_system_of_the_tests_takes_o_direct(tmp_path):
    """Where it does not, every test below of DirectFile itself would test the plain file instead."""
    with _open(tmp_path / "x") as f:
        assert isinstance(f, DirectFile) and _direct_on(f)
        f.write(b"abc")
    assert (tmp_path / "x").read_bytes() == b"abc"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 3 * SMALL + 5), max_size=12), st.booleans(), st.none() | st.integers(0, 12))
def test_any_writes_give_the_bytes_written(small, tmp_path, sizes, restart, kernel_copy):
    """Pieces of any length, across the buffers' ends and the last block's. ``restart``: the first half
    written, dropped (seek(0), truncate()) and the whole written again, as the export does when its helper
    dies. ``kernel_copy``: that piece copied to the descriptor by copy_file_range (as the export appends its
    helper's part), the pieces after it written as before."""
    path = tmp_path / "out"
    pieces = [bytes([65 + k % 26]) * n for k, n in enumerate(sizes)]
    with _open(path) as f:
        if restart:
            for piece in pieces[:len(pieces) // 2]:
                f.write(piece)
            assert f.seek(0) == 0
            assert f.truncate() == 0
        for k, piece in enumerate(pieces):
            if k == kernel_copy:
                (tmp_path / "piece").write_bytes(piece)
                with open(tmp_path / "piece", "rb") as p:
                    while os.copy_file_range(p.fileno(), f.fileno(), 1 << 20):
                        pass
            else:
                assert f.write(piece) == len(piece)
            assert f.tell() == sum(sizes[:k + 1])
    assert path.read_bytes() == b"".join(pieces)


def test_a_gzip_member_and_a_memoryview_are_written_as_bytes(small, tmp_path):
    data = os.urandom(5 * SMALL + 17)
    with _open(tmp_path / "x.gz") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1) as z:
            z.write(memoryview(data)[3:])
    assert gzip.decompress((tmp_path / "x.gz").read_bytes()) == data[3:]


def test_a_file_system_that_refuses_o_direct_gets_a_plain_file(tmp_path, monkeypatch):
    real = fcntl.fcntl

    def refuse(fd, cmd, *arg):
        if cmd == fcntl.F_SETFL and arg and arg[0] & O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, cmd, *arg)

    monkeypatch.setattr(direct_file.fcntl, "fcntl", refuse)
    with _open(tmp_path / "x") as f:
        assert not isinstance(f, DirectFile)
        f.write(b"abc")
    assert (tmp_path / "x").read_bytes() == b"abc"


def test_a_platform_without_o_direct_gets_a_plain_file(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "O_DIRECT", raising=False)
    with _open(tmp_path / "x") as f:
        assert not isinstance(f, DirectFile)
        f.write(b"abc")
    assert (tmp_path / "x").read_bytes() == b"abc"


@pytest.mark.skipif(not O_DIRECT, reason="this platform has no O_DIRECT")
def test_a_write_the_device_refuses_is_made_without_o_direct(small, tmp_path, monkeypatch):
    """A device whose blocks are larger than BLOCK refuses the padded last write (EINVAL): O_DIRECT is turned
    off and that write made again."""
    if not _takes_direct(tmp_path):
        pytest.skip("this file system does not take O_DIRECT")
    real = os.pwrite
    refused = []

    def larger_blocks(fd, data, offset):
        block = 2 * direct_file.BLOCK
        if fcntl.fcntl(fd, fcntl.F_GETFL) & O_DIRECT and (len(data) % block or offset % block):
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(direct_file.os, "pwrite", larger_blocks)
    data = os.urandom(3 * SMALL + 100)
    with _open(tmp_path / "x") as f:
        f.write(data)
        assert _direct_on(f)
    assert refused and (tmp_path / "x").read_bytes() == data


def test_a_failed_write_is_raised_naming_the_file_and_leaves_nothing(small, tmp_path, monkeypatch):
    """ENOSPC from the writing thread: raised by a later write or by the close, as an OSError that names the
    copy (not its temporary name), and the export's temporary file is removed."""
    if not _takes_direct(tmp_path):
        pytest.skip("this file system does not take O_DIRECT")
    real = os.pwrite
    written = []

    def full(fd, data, offset):
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(len(data))
        return real(fd, data, offset)

    monkeypatch.setattr(direct_file.os, "pwrite", full)
    dst = tmp_path / "out" / "copy.json"

    def fill(out):
        for _ in range(8):
            out.write(b"x" * SMALL)

    with pytest.raises(OSError) as e:
        stream_write._atomic(dst, fill, direct=True)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(dst)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("stuck", [None, "slow", "fails"], ids=["written", "under way", "under way, failing"])
def test_the_callers_error_stands_and_the_thread_ends(small, tmp_path, monkeypatch, stuck):
    """The caller's error (here an interrupt) is what the block raises, whatever the thread was doing (a
    write under way is waited for, and its own failure not raised over the caller's); no thread and no file
    is left."""
    dst = tmp_path / "copy.json"
    if stuck:  # each write slow: one is under way when the caller fails
        real = os.pwrite
        calls = []

        def slow(fd, data, offset):
            import time

            calls.append(offset)
            time.sleep(0.05)
            if stuck == "fails" and len(calls) == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, data, offset)

        monkeypatch.setattr(direct_file.os, "pwrite", slow)

    def fill(out):
        out.write(b"x" * (3 * SMALL))
        if stuck:
            assert sum(f is not None and not f.done() for f in out._pending) == 1
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stream_write._atomic(dst, fill, direct=True)
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("stepscope-direct")]


def test_a_full_disk_is_one_oserror_naming_the_copy(tmp_path):
    """A real full disk (a 1 MiB tmpfs; needs root): ENOSPC, the copy named, no temporary file left."""
    from tmpfs import mounted_tmpfs

    with mounted_tmpfs(tmp_path / "mnt", "size=1m") as disk:
        dst = disk / "copy.json"
        with pytest.raises(OSError) as e:
            stream_write._atomic(dst, lambda out: [out.write(b"y" * (1 << 20)) for _ in range(4)], direct=True)
        assert e.value.errno == errno.ENOSPC
        assert e.value.filename in (str(dst), None)
        assert list(disk.iterdir()) == []


def test_only_a_large_source_is_copied_around_the_page_cache(tmp_path, monkeypatch):
    """The adapted copy of a source of DIRECT_FROM bytes or more is written by a DirectFile; a smaller one,
    and the raw copy beside it, through the page cache."""
    used = []
    real = stream_write.writer_on

    def spy(fd, name, direct):
        f = real(fd, name, direct)
        used.append((Path(name).name, direct))
        return f

    monkeypatch.setattr(stream_write, "writer_on", spy)
    src = tmp_path / "t.json"
    src.write_text('{"traceEvents": []}')
    from stepscope.plugin_copy.stream_plan import plan_edits

    plan, header = plan_edits(src)
    stream_write.write_adapted_stream(src, tmp_path / "small.json", plan, header)
    monkeypatch.setattr(stream_write, "DIRECT_FROM", 0)
    stream_write.write_adapted_stream(src, tmp_path / "large.json", plan, header)
    stream_write.copy_file_atomic(src, tmp_path / "raw.json")
    assert used == [("small.json", False), ("large.json", True), ("raw.json", False)]
    assert (tmp_path / "large.json").read_bytes() == (tmp_path / "small.json").read_bytes()

"""trace/workers.py's ``sending``: forked helpers that send values back as they make them (the ranged parse's
pieces), and the memory section made in a helper beside the rest of a large trace's analysis."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from stepscope.analysis import span
from stepscope.analysis.report import analyze_parsed_file, parse_path
from stepscope.trace import workers
from stepscope.trace.workers import sending

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _bounded():
    """A hang here is the defect under test: fail the test instead of the suite."""
    def stuck(*_):
        raise TimeoutError("sending() hung")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _wait_for(take, timeout_s: float = 20.0) -> list:
    """The values ``take()`` gives, polled until there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = list(take())
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError("nothing arrived")


def _first_then_after_flag(flag: str):
    yield "first"
    deadline = time.monotonic() + 20
    while not os.path.exists(flag):  # the parent creates it only once it has "first"
        if time.monotonic() > deadline:
            raise TimeoutError("the parent never got the first value")
        time.sleep(0.01)
    yield "second"


def test_a_value_arrives_while_its_helper_still_works(tmp_path):
    """The helper's first value reaches this process before the helper goes on: it waits for a file that this
    process writes only once it holds that value. Sending only at the helper's end would time out."""
    flag = str(tmp_path / "got-first")
    with sending(_first_then_after_flag, [(flag,)]) as (inbox,):
        assert _wait_for(inbox.take) == ["first"]
        Path(flag).touch()
        assert list(inbox.rest()) == ["second"]


def _many_large(n: int, size: int, done: str):
    for i in range(n):
        yield i, bytes([i % 256]) * size
    Path(done).touch()


def test_a_helper_never_waits_for_this_process_to_read(tmp_path):
    """30 values of 1 MB (far more than a pipe holds) are all made before this process reads one, and then
    arrive whole and in order."""
    done = tmp_path / "done"
    with sending(_many_large, [(30, 1 << 20, str(done)), (3, 10, str(tmp_path / "done2"))]) as inboxes:
        deadline = time.monotonic() + 30
        while not done.exists():
            assert time.monotonic() < deadline, "the helper was held up by this process not reading"
            time.sleep(0.02)
        got = list(inboxes[0].rest())
        small = list(inboxes[1].take()) + list(inboxes[1].rest())
    assert [i for i, _ in got] == list(range(30))
    assert all(len(v) == 1 << 20 and v[:1] == bytes([i % 256]) for i, v in got)
    assert [i for i, _ in small] == [0, 1, 2]


def _pipe_max() -> int:
    try:
        return int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except OSError:
        return 0


@pytest.mark.skipif(_pipe_max() < workers.PIPE_BYTES, reason="Linux pipes that may hold PIPE_BYTES")
def test_a_helpers_pipe_holds_a_whole_piece():
    """sending's pipes hold PIPE_BYTES, more than a gigabyte's piece message (about 0.8 MB), so that a helper
    writes a piece in one go rather than 64 KiB each time this process has read the last 64."""
    import fcntl

    q = workers._widened(multiprocessing.get_context("fork").Queue())
    try:
        assert fcntl.fcntl(q._reader.fileno(), fcntl.F_GETPIPE_SZ) == workers.PIPE_BYTES
    finally:
        q.close()


def _fails_after(values: list, error: BaseException | None, exit_code: int | None):
    yield from values
    if exit_code is not None:
        os._exit(exit_code)  # killed, as by the kernel's OOM killer: no exception, no last value
    raise error


@pytest.mark.parametrize("error,exit_code", [(ValueError("a bad event"), None), (None, 3)],
                         ids=["raises", "dies"])
def test_what_a_helper_sent_comes_before_its_failure(error, exit_code):
    """A helper that raises: its values, then its exception. One that dies: BrokenProcessPool (a RuntimeError,
    one of the ranged parse's fall-back cases), after what it had sent before it died, never a hang."""
    with sending(_fails_after, [([1, 2], error, exit_code)]) as (inbox,):
        got = []
        with pytest.raises(ValueError if error is not None else BrokenProcessPool):
            for v in inbox.rest():
                got.append(v)
    assert got == [1, 2] if exit_code is None else got in ([], [1], [1, 2])


def test_leaving_before_reading_everything_does_not_hang(tmp_path):
    """This process stops (its own range failed) while a helper has sent far more than a pipe holds."""
    done = tmp_path / "done"
    with pytest.raises(KeyError), sending(_many_large, [(20, 1 << 20, str(done))]):
        deadline = time.monotonic() + 30
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        raise KeyError("this process' own work failed")


def test_the_memory_section_is_made_beside_the_rest_of_the_analysis(monkeypatch, tmp_path):
    """Where the worker policy gives the analysis a helper (a large trace on the command line), the memory
    section is made in a forked helper meanwhile; the report is the same as made in one process, and with no
    helper (a training process) it is made in this process."""
    (path,) = (DATA / "holdout" / "vit_tiny_bs256").glob("*.pt.trace.json*")
    parsed = parse_path(path, "w", "s")
    assert len(parsed.memory) > 0
    real = span.memory_devices
    where = tmp_path / "pids"

    def spy(*args):
        with open(where, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args)

    monkeypatch.setattr(span, "memory_devices", spy)
    alone = analyze_parsed_file(parsed, path)
    beside = analyze_parsed_file(parsed, path, processes=2)
    pids = [int(x) for x in where.read_text().split()]
    assert pids[0] == os.getpid() and pids[1] != os.getpid()
    assert beside.memory is not None and beside.to_dict() == alone.to_dict()


def _unpicklable():
    yield 1
    yield lambda: None  # a value that cannot be sent


def test_a_value_that_cannot_be_sent_is_the_helpers_error():
    """Sending pickles in the helper itself: a value that cannot be pickled fails the helper (this process
    raises), never a value silently missing from what arrives."""
    with sending(_unpicklable, [()]) as (inbox,):
        got = []
        with pytest.raises((AttributeError, TypeError, pickle.PicklingError)):
            for v in inbox.rest():
                got.append(v)
    assert got == [1]


def test_a_memory_helper_that_dies_leaves_the_section_to_this_process(monkeypatch):
    """The memory section's helper killed (as by the kernel's OOM killer): the section is made here, and the
    report is the one made in one process."""
    (path,) = (DATA / "holdout" / "vit_tiny_bs256").glob("*.pt.trace.json*")
    parsed = parse_path(path, "w", "s")
    alone = analyze_parsed_file(parsed, path)
    real, parent = span.memory_devices, os.getpid()

    def dies_in_a_helper(*args):
        if os.getpid() != parent:
            os._exit(9)
        return real(*args)

    monkeypatch.setattr(span, "memory_devices", dies_in_a_helper)
    again = analyze_parsed_file(parsed, path, processes=2)
    assert again.memory is not None and again.to_dict() == alone.to_dict()


def test_the_helper_makes_the_memory_section_as_this_process_would_while_this_one_finds_the_syncs():
    """With a helper (the command line on a large trace), the memory section is made there while this process
    makes the rest, the host syncs among it: the report is the one made in one process, syncs included."""
    (path,) = (DATA / "item_per_layer").glob("*.pt.trace.json*")
    parsed = parse_path(path, "w", "s")
    alone = analyze_parsed_file(parsed, path).to_dict()
    helped = analyze_parsed_file(parse_path(path, "w", "s"), path, processes=2).to_dict()
    assert alone["metrics"]["syncs_per_step"] > 0 and alone["memory"] is not None
    assert helped == alone

"""Where trace work may run: the one worker policy, decided once at the entry point and passed down. Torch-free.

    workers = Workers.inline()                     # this process only: what a training process must use
    workers = Workers.local(max_memory=2 << 30)    # the command line: local processes where it pays
    workers = Workers.dask("tcp://host:8786")      # per-trace work as tasks of a Dask cluster (cluster.py)
    spans = workers.map(analyze_trace, jobs)       # analyze_trace(*job) for each job (a trace path first), in order
    with workers.beside(fn, big_columns) as later: # fn(big_columns) in a helper process, if the policy allows
        ...                                        # this process works meanwhile
        value = later.result()                     # inline: fn runs here, now
    job = Apart(fn, args)                          # fn(*args) in a forked child that may be killed (command line)
    job.ready(); job.result(); job.stop()          # poll without waiting; its value or exception; kill it
    with sending(gen, jobs) as inboxes:            # gen(*job), a generator, in a forked helper per job:
        inboxes[0].take(); inboxes[0].rest()       # its values as they come, without waiting; then the rest

A training process (the trainer's end-of-run diagnosis, the users' trace handler) never forks: the child
would copy its threads, CUDA context and process group. The command line may. A Dask cluster runs each
trace's work on whichever worker takes it; the small result comes back.

Locally, how many processes may parse traces at once within a memory budget: a trace's streamed parse
(stream_parse.py) holds its event objects (about ``EVENT_BYTES_PER_FILE_BYTE`` per byte of uncompressed
JSON, measured on the ResNet-18 replicas of BENCHMARKS.md) plus the piece being decoded and the
interpreter, so its peak is ``BASE_BYTES + EVENT_BYTES_PER_FILE_BYTE * size`` at most. Several traces
(ranks) are parsed in ``per_file`` forked processes at once, capped by the CPU count and by what fits the
budget; 1 means "in this process". Runs with less JSON than ``SPLIT_FROM`` in all stay in this process:
starting processes would cost more than it saves. Traces parsed in this process that are at least
``SPLIT_FROM`` long are cut into ``parts_for(path, plan)`` byte ranges, parsed at once by this process and
forked helpers (stream_ranges.py); the helpers hold only columns, so the budget is the same.
Gzipped traces are cut too: a helper decompresses the bytes before its range and drops them (gzopen.py).

This module is the only one that makes process pools (and the stoppable children of ``Apart``); each forks this process (its memory is inherited,
never pickled: columns of millions of entries go to a helper for free).
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import pickle
import queue
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stepscope.trace.gzopen import uncompressed_size

BASE_BYTES = 80 << 20  # interpreter, msgspec, decode buffers and one decoded piece
EVENT_BYTES_PER_FILE_BYTE = 1.0
GZ_RATIO_GUESS = 10  # when the gzip trailer cannot say (files over 4 GiB uncompressed)
SPLIT_FROM = 64 << 20


MAX_PARTS = 4  # byte ranges of one trace: more leaves this process rebuilding the others' events alone


@dataclass(frozen=True)
class Plan:
    per_file: int  # processes parsing whole traces at once
    parts: int = 1  # byte ranges a large trace parsed in this process is cut into


@dataclass(frozen=True)
class Workers:
    """The worker policy (module docstring). Make one with ``inline``, ``local`` or ``dask``."""
    cpus: int = 1  # processes of this machine that may work at once; 1: this process only
    max_memory: int | None = None  # bytes for local processes at once (None: a quarter of RAM)
    cluster: str | None = None  # a Dask scheduler's address: per-trace work runs there

    @classmethod
    def inline(cls) -> Workers:
        """This process only, never a child: the policy of a training process."""
        return cls()

    @classmethod
    def local(cls, cpus: int | None = None, max_memory: int | None = None) -> Workers:
        """Processes of this machine where it pays: up to ``cpus`` (default: all) within ``max_memory``."""
        return cls(max(1, cpus or os.cpu_count() or 1), max_memory)

    @classmethod
    def dask(cls, address: str) -> Workers:
        """Each trace's work as a task of the Dask cluster whose scheduler is at ``address``; what follows
        (cross-rank analysis, rendering) in this process."""
        return cls(cluster=address)

    @property
    def forks(self) -> bool:
        """Whether this process may start children."""
        return self.cpus > 1

    def budget(self) -> int:
        """The bytes local processes may hold at once: ``max_memory``, else a quarter of RAM."""
        return self.max_memory if self.max_memory is not None else default_budget()

    def plan(self, paths: list[Path]) -> Plan:
        """How many of ``paths`` to parse at once here, and in how many ranges (module docstring)."""
        return plan_processes(paths, self.budget(), self.cpus)

    def map(self, fn: Callable, jobs: list[tuple]) -> list:
        """``fn(*job)`` for each job (a trace path first), in order: on the cluster, in forked processes when
        the traces are large and the memory allows, else here (``fn(*job, parts=...)``: a large trace in
        byte ranges when this process may fork helpers)."""
        if not jobs:
            return []
        if self.cluster is not None:
            from stepscope.trace.cluster import dask_map

            return dask_map(self.cluster, fn, jobs)
        sizes = [json_size(job[0]) for job in jobs]
        plan = plan_sizes(sizes, self.budget(), self.cpus)
        if plan.per_file > 1:
            return in_pool(plan.per_file, fn, jobs, sizes)
        return [fn(*job, parts=parts_for(job[0], plan)) for job in jobs]

    def two_parses_fit(self, path: Path) -> bool:
        """Whether the memory allows two parses of ``path`` at once: a child's, beside this process's work on
        the same read (the export's analysis beside the copy's plan, one_pass.read_in_halves)."""
        return 2 * peak_bytes(json_size(Path(path))) <= self.budget()

    def halves(self, path: Path) -> bool:
        """Whether the export should read and write ``path`` in two byte ranges, the second by a helper."""
        path = Path(path)
        return self.forks and json_size(path) >= SPLIT_FROM

    @contextmanager
    def beside(self, fn: Callable, *args) -> Iterator[Future]:
        """``fn(*args)`` beside this process: in a forked child that inherits the arguments (not pickled)
        when the policy allows and a child can start, else here when the result (or ``done()``) is asked for. The block's
        exit waits for the child. ``result()`` raises what the call raised, or BrokenProcessPool (a
        RuntimeError) when the child died."""
        pool = None
        if self.forks:
            _INHERITED[:] = [fn, args]
            try:
                pool = fork_pool(1)
                later = pool.submit(_run_inherited)  # a fork context starts its process within submit
            except (OSError, RuntimeError):  # no child could start (no memory, no threads): here, then
                if pool is not None:
                    pool.shutdown()
                pool = None
            finally:
                _INHERITED.clear()
        if pool is None:
            yield _Later(fn, args)
            return
        with pool:
            yield later


def in_pool(processes: int, fn: Callable, jobs: list[tuple], sizes: list[int]) -> list:
    """``fn(*job)`` for each job in a pool of ``processes`` forked children, the largest traces (``sizes``)
    first so that no large one is left to run alone at the end; the results, and the first exception, in the
    jobs' order. What is still queued when a job fails is not run."""
    with fork_pool(processes) as pool:
        futures = [None] * len(jobs)
        for i in sorted(range(len(jobs)), key=lambda i: -sizes[i]):
            futures[i] = pool.submit(fn, *jobs[i])
        try:
            return [f.result() for f in futures]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


class _Later(Future):
    """A call made in this process when its result, or whether it is done, is first asked for."""

    def __init__(self, fn: Callable, args: tuple) -> None:
        super().__init__()
        self._call = (fn, args)

    def _run(self) -> None:
        if self._call is not None:
            fn, args = self._call
            self._call = None
            try:
                self.set_result(fn(*args))
            except BaseException as e:
                self.set_exception(e)

    def done(self) -> bool:
        self._run()
        return True

    def result(self, timeout=None):
        self._run()
        return super().result(timeout)


_INHERITED: list = []  # [function, arguments] of the call the children about to be forked run


def _run_inherited(*more):
    """The inherited call, with ``more`` (small, pickled: e.g. which of several jobs) after its arguments."""
    fn, args = _INHERITED
    return fn(*args, *more)


class Inbox:
    """What one helper of ``sending`` has sent so far, in order."""

    def __init__(self, queue, future: Future) -> None:
        self._queue, self._future, self._ended = queue, future, False

    def take(self) -> Iterator:
        """The values that have arrived, never waiting for more."""
        while not self._ended:
            try:
                sent = self._queue.get_nowait()
            except queue.Empty:
                return
            if sent is None:
                self._ended = True
                return
            yield pickle.loads(sent)

    def rest(self, poll_s: float = 0.05) -> Iterator:
        """The values still to come, as they arrive, up to the helper's last; then raises what the helper
        raised, or BrokenProcessPool (a RuntimeError) when it died."""
        quiet_since = None  # when the helper was first seen finished with nothing more arriving
        while not self._ended:
            try:
                sent = self._queue.get(timeout=poll_s)
            except queue.Empty:
                if self._future.done():
                    if self._future.exception() is not None:
                        self._future.result()
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > _LAST_VALUE_S:  # its sender thread died with it
                        raise RuntimeError("a helper finished, but its last values never arrived") from None
                continue
            if sent is None:
                self._ended = True
            else:
                yield pickle.loads(sent)
        self._future.result()


_LAST_VALUE_S = 30.0  # how long values may take to arrive after their helper finished


def _send_each(fn: Callable, jobs: list[tuple], queues: list, i: int) -> None:
    """Job ``i`` of ``sending``, in its helper: each value ``fn`` yields put on queue ``i``, then the end."""
    out = queues[i]
    out.cancel_join_thread()  # a helper never waits at its exit for a reader that has stopped reading
    try:
        for value in fn(*jobs[i]):
            # pickled here, so that a value that cannot be is the helper's error, not one its sender thread
            # would print and drop
            out.put(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        out.put(None)  # the end: after the last value, also when fn raised (the future says what)


# what a helper's pipe holds (Linux: F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size, 1 MiB by default): a
# piece's message (about 0.8 MB for a gigabyte's pieces) is written whole, instead of 64 KiB at a time, each
# write waiting for this process to read the one before
PIPE_BYTES = 1 << 20


def _widened(q):
    """``q`` (a multiprocessing Queue) with its pipe widened to PIPE_BYTES where the system allows; as it was
    elsewhere."""
    try:
        import fcntl

        fcntl.fcntl(q._writer.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or a lower limit: the default pipe
        pass
    return q


@contextmanager
def sending(fn: Callable, jobs: list[tuple]) -> Iterator[list[Inbox]]:
    """``fn(*job)``, a generator, for each job in a forked helper of its own, which inherits the job (not
    pickled); each value it yields comes back as soon as it is made (pickled, through a pipe that a thread of
    the helper writes, so that the helper goes on while this process is busy). Yields one Inbox per job:
    this process takes what has arrived whenever it likes (``take``) and then waits for the rest (``rest``).
    Callers hold a policy that allows forking, as for ``fork_pool``."""
    ctx = multiprocessing.get_context("fork")
    queues = [_widened(ctx.Queue()) for _ in jobs]
    with fork_pool(len(jobs)) as pool:
        _INHERITED[:] = [_send_each, (fn, jobs, queues)]
        try:  # a fork context starts every process within the first submit
            futures = [pool.submit(_run_inherited, i) for i in range(len(jobs))]
        finally:
            _INHERITED.clear()
        try:
            yield [Inbox(q, f) for q, f in zip(queues, futures)]
        finally:
            for q in queues:  # what a helper sent that nobody read is dropped
                q.cancel_join_thread()
                q.close()


class Apart:
    """``fn(*args)`` in a child forked from this process, which inherits the arguments (not pickled) and
    sends back its result (pickled: keep it small), for work that must be stoppable: ``stop()`` kills the
    child whatever it is doing. Only where the policy may fork (the command line, never a training process).
    ``setup()``, when given, runs first in the child (e.g. to die with this process)."""

    def __init__(self, fn: Callable, args: tuple = (), setup: Callable[[], None] | None = None) -> None:
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_apart, args=(send, setup, fn, args), name="stepscope-apart")
        _trim_heap()  # as fork_pool
        self.process.start()
        send.close()
        self._outcome: tuple[bool, object] | None = None

    @classmethod
    def started(cls, fn: Callable, args: tuple = ()) -> Apart | None:
        """``Apart(fn, args)``, or None where no child could start (no memory, no threads): the caller then
        does the work its own way."""
        try:
            return cls(fn, args)
        except (OSError, RuntimeError):
            return None

    def ready(self, timeout: float | None = 0) -> bool:
        """Whether the child has answered (or died), waiting up to ``timeout`` seconds for it (None: until it
        does; by default not at all)."""
        if self._outcome is None:
            try:
                if not self._recv.poll(timeout):
                    return False
                self._outcome = self._recv.recv()
            except (EOFError, OSError):  # it ended without an answer: killed, or out of memory
                self.process.join()
                self._outcome = (False, RuntimeError(f"the process ended with code {self.process.exitcode} "
                                                     "before it answered"))
            self.stop()
        return True

    def result(self):
        """The call's value, or the exception it raised; only once ``ready()``."""
        assert self._outcome is not None, "result() before ready()"
        ok, value = self._outcome
        if ok:
            return value
        raise value

    def stop(self) -> None:
        """Kill the child (if it still runs) and reap it."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self._recv.close()


def _apart(send, setup: Callable | None, fn: Callable, args: tuple) -> None:
    if setup is not None:
        setup()
    try:
        outcome = (True, fn(*args))
    except BaseException as e:  # noqa: BLE001 (handed to the parent, which raises it)
        outcome = (False, e)
    try:
        send.send(outcome)
    except Exception as e:  # noqa: BLE001 (a value or exception that cannot be pickled)
        send.send((False, RuntimeError(f"{type(e).__name__}: {e}")))
    send.close()


def fork_pool(processes: int) -> Executor:
    """A pool of ``processes`` children forked from this process: the only place one is made. Callers hold
    a policy that allows it (``Workers.forks``, or ``parts`` > 1 from ``Workers.map``)."""
    _trim_heap()
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"))


def _trim_heap() -> None:
    """Hand the heap's free pages back to the system before a fork (glibc's ``malloc_trim``; elsewhere
    nothing): a child shares its parent's resident pages, free ones included, and a large trace's pieces
    leave tens of MB of them behind."""
    malloc_trim = _libc("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


@functools.cache
def _libc(name: str):
    """The function ``name`` of the C library this process runs on, or None where it has none (not glibc)."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, TypeError):
        return None

# glibc's mallopt parameters (malloc.h) and the values keep_heap sets
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEPT_BLOCK = 32 << 20  # blocks up to this size come from the heap, not from a mapping of their own
KEPT_TOP = 128 << 20  # free bytes at the heap's top that are kept rather than handed back


def keep_heap() -> bool:
    """For a process that only reads traces (the command line, the tab's analysis; never a training process,
    whose allocator stays as its user set it): glibc keeps the blocks that each piece of a trace allocates
    and frees (several MB each) in its heap, instead of handing them back to the system and faulting fresh
    zeroed pages in for the next piece. Before a fork the heap is still trimmed (``_trim_heap``). Whether the
    allocator took it: False where it is not glibc's."""
    mallopt = _libc("mallopt")
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, KEPT_BLOCK)) and bool(
        mallopt(_M_TRIM_THRESHOLD, KEPT_TOP))


BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def one_blas_thread(env=os.environ):
    """``env`` with numpy's OpenBLAS held to one thread where it does not name a number, for a process that
    only reads traces (the command line, the tab's analysis child). The analysis makes no BLAS call, but
    OpenBLAS starts a thread per core when numpy is imported and spins it for a while: about 0.1 CPU-s per
    process on two cores, taken from the parse's helpers. Call it before numpy is imported (this process's
    own environment), or on a child's environment."""
    env.setdefault(BLAS_THREADS, "1")
    return env


def default_budget() -> int:
    """A quarter of the machine's RAM."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError):
        return 4 << 30


def json_size(path: Path) -> int:
    """Bytes of JSON in ``path``: its size, or for .gz the size the gzip trailer records (mod 4 GiB)."""
    path = Path(path)
    size = path.stat().st_size
    if not path.name.endswith(".gz") or size < 18:
        return size
    isize = uncompressed_size(path)
    return isize if isize is not None else size * GZ_RATIO_GUESS


def peak_bytes(json_bytes: int) -> int:
    return BASE_BYTES + int(EVENT_BYTES_PER_FILE_BYTE * json_bytes)


def plan_processes(paths: list[Path], budget_bytes: int, cpus: int | None = None) -> Plan:
    """How many of ``paths`` to parse at once (module docstring)."""
    return plan_sizes([json_size(p) for p in paths], budget_bytes, cpus)


def plan_sizes(sizes: list[int], budget_bytes: int, cpus: int | None = None) -> Plan:
    """``plan_processes`` for traces of ``sizes`` bytes of JSON."""
    cpus = cpus or os.cpu_count() or 1
    parts = max(1, min(cpus, MAX_PARTS))
    if len(sizes) < 2 or sum(sizes) < SPLIT_FROM:
        return Plan(1, parts)
    fits = budget_bytes // max(peak_bytes(s) for s in sizes)
    per_file = max(1, min(cpus, len(sizes), fits))
    return Plan(per_file, parts if per_file == 1 else 1)


def parts_for(path: Path, plan: Plan) -> int:
    """Byte ranges to parse ``path`` in, in this process (module docstring)."""
    path = Path(path)
    if plan.parts < 2 or json_size(path) < SPLIT_FROM:
        return 1
    return plan.parts

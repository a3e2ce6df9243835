"""Ctrl-C and SIGTERM: stop the run cleanly, never in the middle of writing a trace.

    stop = StopSignal(abort=None)      # under torchrun with NCCL: abort=group.abort
    stop.install()
    with stop.deferred():              # a finished cycle's trace is being written
        prof.step()
    stop.hold(); ...; stop.release()   # the same, across code that is not one block
    stop.exit_code()                   # 130 after SIGINT, 143 after SIGTERM

SIGINT (Ctrl-C) and SIGTERM (`kill`, Slurm or Kubernetes preemption, `docker stop`) are handled alike: the
first one raises `KeyboardInterrupt` in the main thread, so the loop stops, the profiler writes the cycle it
was recording, the scalars are flushed and run.json says `"status": "interrupted"` with the signal's name.
Inside `deferred()` the signal takes effect when the block ends, so a trace being written is finished first.
Repeats are ignored while the run flushes (torchrun forwards one Ctrl-C to every rank, and a user may press
it twice); SIGKILL still ends the process at once.

With `abort` (NCCL under torchrun) a helper thread, woken through `signal.set_wakeup_fd` even while the main
thread waits on the GPU, aborts the communicator at once, so no CUDA sync waits for a collective that a
stopped peer never joins. A collective error after the stop request counts as part of the stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopSignal:
    def __init__(self, abort: Callable[[], None] | None = None) -> None:
        self.signum: int | None = None
        self._deferring = False
        self._pending = False
        self._abort = abort

    def install(self) -> None:
        for s in HANDLED:
            signal.signal(s, self._on_signal)
        if self._abort is not None:
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            # Python runs signal handlers only in the main thread between bytecodes; the C-level handler
            # writes the signal number to this fd at once, even while the main thread waits on the GPU.
            signal.set_wakeup_fd(write_fd)
            threading.Thread(target=self._watch, args=(read_fd,), name="stepscope-stop", daemon=True).start()

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            return  # a repeat: let the flush finish
        self.signum = signum
        if self._deferring:
            self._pending = True
            return
        raise KeyboardInterrupt

    def hold(self) -> None:
        """From now on a signal is only recorded; it takes effect at `release()`."""
        self._deferring = True

    def release(self) -> None:
        """End a `hold()`: a signal that arrived meanwhile raises KeyboardInterrupt here."""
        self._deferring = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self):
        """A signal inside this block takes effect when the block ends."""
        self.hold()
        try:
            yield
        finally:
            self._deferring = False
        self.release()

    def _watch(self, read_fd: int) -> None:
        # other handled signals (e.g. SIGCHLD) also land here
        while not any(s in os.read(read_fd, 64) for s in HANDLED):
            pass
        self._abort()

    def requested(self) -> bool:
        return self.signum is not None

    def explains(self, exc: BaseException) -> bool:
        """True if `exc` ends the run as an interruption rather than as a failure."""
        if isinstance(exc, KeyboardInterrupt):
            return True
        try:
            # a collective that failed because a stopped peer left; calling a Python function lets CPython
            # run a signal handler that is still pending, which raises KeyboardInterrupt right here
            return self.requested()
        except KeyboardInterrupt:
            return True

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "SIGINT"

    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)

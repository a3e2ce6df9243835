"""A child process that dies with its parent, however the parent dies (SIGKILL too), and takes every process
it started with it.

    proc = subprocess.Popen(cmd, preexec_fn=die_with_parent(os.getpid()))
    proc = subprocess.Popen(group_command(["-m", "tensorboard.main", ...]),
                            preexec_fn=die_with_parent(os.getpid(), group=True))

On Linux the child asks the kernel (prctl PR_SET_PDEATHSIG) for a signal when its parent exits; if the parent
is already gone by then, the child exits at once. The request is not inherited: a child's own children
(TensorBoard's: torch-tb-profiler's multiprocessing loader and its resource tracker) would outlive it under
PID 1. So with ``group=True`` the child leads a process group of its own, which its descendants stay in, and
its death signal is SIGTERM; ``group_command`` runs the Python program in it behind ``python -m
stepscope.tensorboard.child``, whose SIGTERM handler sends SIGKILL to the whole group. Stopping such a
child with ``terminate()`` ends its group the same way. Off Linux both are no-ops: the parent's own cleanup
(a SIGTERM on the way out) is then all there is.
Torch-free.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int, group: bool = False) -> Callable[[], None] | None:
    """A preexec_fn for subprocess.Popen that ties the child's life to ``parent_pid``; None off Linux.
    ``group``: the child leads a new process group and gets SIGTERM, not SIGKILL (module docstring)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    sig = signal.SIGTERM if group else signal.SIGKILL

    def preexec() -> None:  # in the child, between fork and exec: no locks, no allocation-heavy work
        if group:
            os.setpgid(0, 0)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            os._exit(1)

    return preexec


def group_command(args: list[str]) -> list[str]:
    """The command line that runs ``python *args`` (``-m module ...`` or ``script ...``) as the leader of a
    group that SIGTERM ends whole."""
    return [sys.executable, "-m", "stepscope.tensorboard.child", *args]


def _end_group(signum, _frame) -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)  # this process too, and everything it started


def main(args: list[str]) -> None:
    """Run ``python *args`` in this process, with SIGTERM ending the whole process group."""
    if sys.platform.startswith("linux") and os.getpgid(0) == os.getpid():  # never the caller's own group
        signal.signal(signal.SIGTERM, _end_group)
    if args[:1] == ["-m"]:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

"""A child process that dies with its parent, however the parent dies (SIGKILL too).

    proc = subprocess.Popen(cmd, preexec_fn=die_with_parent(os.getpid()))

On Linux the child asks the kernel (prctl PR_SET_PDEATHSIG) for SIGKILL when its parent exits; if the parent
is already gone by then, the child exits at once. Elsewhere it is a no-op: the parent's own cleanup (a
SIGTERM on the way out) is then all there is.
Torch-free.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A preexec_fn for subprocess.Popen that ties the child's life to ``parent_pid``; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:  # in the child, between fork and exec: no locks, no allocation-heavy work
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            os._exit(1)

    return preexec

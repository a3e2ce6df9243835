"""The end of a command that only reads traces: its process ends without the interpreter's teardown.

    sys.exit(quick_exit(main()))   # scripts/analyze.py, `stepscope analyze` and `stepscope diff`

A process that has read a large trace holds millions of Python objects; at a normal exit the interpreter
frees each of them and tears every module down. After a 1 GB trace's analysis (2.5-3 s on two cores) the
exit took 0.05-0.09 s that way, and 0.02 s without it (BENCHMARKS.md). Once the command's output is written
that work serves nothing: ``quick_exit`` flushes stdout and stderr, runs the ``atexit`` handlers (a Dask
cluster's, multiprocessing's, temporary folders'), and ends the process with its exit code (``os._exit``),
as C's quick_exit does. Where a thread that the normal exit waits for still runs (one that is not a daemon),
or stdout cannot be flushed (a closed pipe: ``... | head``), it returns the code for the normal exit
instead. Files a command writes are closed before it returns (``with``), as every stepscope command does; an
object's ``__del__`` does not run.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def quick_exit(code: int | None) -> int | None:
    """End the process now with ``code`` (module docstring), or return it for the normal exit: where a thread
    that the normal exit would wait for still runs, or stdout cannot be flushed (a closed pipe, which the
    normal exit reports)."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return code
    atexit._run_exitfuncs()  # what the normal exit runs first, in the same order (last registered first)
    for stream in (sys.stdout, sys.stderr):  # what the handlers printed
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)

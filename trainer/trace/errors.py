"""The one exception the analysis raises on bad input, and the one way any stepscope command prints its error
line. Torch-free.

    from stepscope.analysis import TraceError
    try: stepscope.analyze(run_dir)
    except TraceError as e: print_error(f"error: {e}")   # one line naming the file or event and the problem

``print_error`` hands the line and its newline to stderr in one write. ``print(line, file=sys.stderr)``
makes two (the text, then ``end``), and where stderr is unbuffered (``python -u``, PYTHONUNBUFFERED=1, as
under torchrun) each is a system call of its own: two ranks failing at once then interleave, and one
rank's newline can land after the other's line. One write of a line up to PIPE_BUF (4 KiB) bytes is atomic
on a pipe.
"""

import sys


class TraceError(ValueError):
    """The input is not a torch.profiler trace of training steps; the message says what is wrong."""


def print_error(line: str) -> None:
    """``line`` and its newline to stderr in one write (module docstring)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()

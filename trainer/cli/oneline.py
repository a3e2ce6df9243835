"""One-line errors for every stepscope command: an argparse parser whose errors are one line on stderr and
exit code 2, and ``print_error``, which every command's error line goes through.

    print_error(f"{prog}: error: {e}")

``print_error`` hands the line and its newline to stderr in one write. ``print(line, file=sys.stderr)``
makes two (the text, then ``end``), and where stderr is unbuffered (``python -u``, PYTHONUNBUFFERED=1, as
under torchrun) each is a system call of its own: two ranks failing at once then interleave, and one
rank's newline can land after the other's line. One write of a line up to PIPE_BUF (4 KiB) bytes is atomic
on a pipe.
"""

from __future__ import annotations

import argparse
import sys


def print_error(line: str) -> None:
    """``line`` and its newline to stderr in one write (module docstring)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints the whole usage first
        print_error(f"{self.prog}: error: {message}")
        sys.exit(2)

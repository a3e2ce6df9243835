"""The argparse parser of every stepscope command: its errors are one line on stderr (``print_error``,
trace/errors.py) and exit code 2, not argparse's usage block.

    p = OneLineParser(prog="stepscope analyze")
"""

from __future__ import annotations

import argparse
import sys

from stepscope.trace.errors import print_error


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints the whole usage first
        print_error(f"{self.prog}: error: {message}")
        sys.exit(2)

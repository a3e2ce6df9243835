"""An argparse parser whose errors are one line on stderr and exit code 2, for every stepscope command."""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default prints the whole usage first
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)

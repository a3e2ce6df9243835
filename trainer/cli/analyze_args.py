"""Argument types of the analyze command (cli/analyze.py) for a window of steps and a memory budget.

    p.add_argument("--steps", type=window(int))           # "3:8" -> (3, 8); "3:" -> (3, None)
    p.add_argument("--time-range", type=window(float))    # "100:400" -> (100.0, 400.0) ms
    p.add_argument("--max-memory", type=memory_size)      # "2G" -> 2147483648

Each raises argparse.ArgumentTypeError with a one-line message on bad text. Torch-free.
"""

from __future__ import annotations

import argparse


def window(kind):
    """An argparse type for "A:B" with either side empty; ``kind`` converts a side (int or float)."""

    def parse(text: str):
        lo, sep, hi = text.partition(":")
        try:
            if not sep:
                raise ValueError
            a = kind(lo) if lo.strip() else None
            b = kind(hi) if hi.strip() else None
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not START:END (e.g. 3:8, 3:, :8)") from None
        if a is not None and b is not None and b <= a:
            raise argparse.ArgumentTypeError(f"{text!r} is an empty window: END must be after START")
        if (a is not None and a < 0) or (b is not None and b < 0):
            raise argparse.ArgumentTypeError(f"{text!r}: START and END cannot be negative")
        return a, b

    parse.__name__ = "window"
    return parse


def memory_size(text: str) -> int:
    """Bytes of "2G", "512M", "1.5GiB", "300000000"."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        value = -1
    if not value > 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 2G, 512M)")
    return int(value)

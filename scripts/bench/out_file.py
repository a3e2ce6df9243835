"""The benchmarks' check of an --out file, before anything is built or timed; imports no torch, so that a command
refusing its --out does so at once."""

from __future__ import annotations

import os
from pathlib import Path


def writable_file_error(path: Path, flag: str) -> str | None:
    """Why `path` cannot be written as a file, or None; creates missing parent folders, writes nothing."""
    if path.is_dir():
        return f"{flag} {path} is a folder; give a file name"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{flag} {path}: cannot create its folder ({e.strerror})"
    existed = path.exists()
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        return f"{flag} {path} is not writable ({e.strerror})"
    if not existed:
        os.remove(path)
    return None

"""A tmpfs mounted for one test: a tiny disk that fills up, or a folder even root cannot write to.

    with mounted_tmpfs(tmp_path / "mnt", "size=1m,ro") as mnt: ...

Needs root with CAP_SYS_ADMIN; elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(path: Path, options: str) -> Iterator[Path]:
    """Create ``path``, mount a tmpfs there with mount's ``-o options``, and unmount it when the block ends."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here (needs root with CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)

"""Keep copies of a source tree's TensorBoard event files in the shadow logdir, as they grow.

    mirror = EventsMirror(source=Path("logs"), logdir=shadow_logdir)
    mirror.poll(lambda run: run or "logs")     # source folder (relative, "" = root) -> shadow run name

Event files are append-only records, and TensorBoard reads them as they grow, so each poll copies only the
bytes appended since the last one (a file that shrank is copied again from the start). Loss, learning rate
and the trainer's own Text thus show up beside the profiler traces of the same run. The source is only read.
Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

EVENTS_PREFIX = "events.out.tfevents."


class EventsMirror:
    def __init__(self, source: Path, logdir: Path) -> None:
        self.source, self.logdir = Path(source), Path(logdir)
        self.copied: dict[Path, int] = {}  # source file -> bytes copied so far

    def poll(self, run_name: Callable[[str], str]) -> int:
        """Copy what was appended to every event file under the source; return the number of bytes copied."""
        total = 0
        for folder, dirs, files in os.walk(self.source):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            events = sorted(f for f in files if f.startswith(EVENTS_PREFIX))
            if not events:
                continue
            rel = Path(folder).relative_to(self.source)
            target_dir = self.logdir / run_name("" if str(rel) == "." else str(rel))
            for name in events:
                total += self._copy(Path(folder) / name, target_dir / name)
        return total

    def _copy(self, src: Path, dst: Path) -> int:
        try:
            size = src.stat().st_size
        except OSError:
            return 0
        done = self.copied.get(src, 0)
        if size < done:  # rewritten from scratch: start over
            done = 0
            dst.unlink(missing_ok=True)
        if size == done:
            return 0
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as f_in, open(dst, "ab") as f_out:
            f_in.seek(done)
            chunk = f_in.read(size - done)
            f_out.write(chunk)
        self.copied[src] = done + len(chunk)
        return len(chunk)

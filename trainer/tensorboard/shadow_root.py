"""The temporary folder of one `stepscope tensorboard` (its shadow logdir), and the removal of folders that
servers killed before their cleanup left behind.

    root = make_root()          # /tmp/stepscope-tb-XXXX, holding an owner record (this process)
    removed = remove_stale()    # such folders whose owner process is gone, removed; their paths
    note_source(root / "logdir", Path("logs"))   # the tab then names logs, not the shadow (source_of)

The owner record is the process id and its start time (from /proc), so a reused process id does not keep a
dead server's folder alive. Folders without a readable record are left alone (they may be half-made by a
server starting right now).
Torch-free.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "stepscope-tb-"
OWNER = "owner.json"
# in the environment of the TensorBoard that `stepscope tensorboard` starts: its shadow logdir, which the
# stepscope tab's window tool may write into (never a logdir of the user's: tab/plugin.py)
WINDOWS_HERE = "STEPSCOPE_WINDOWS_IN_LOGDIR"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    now = start_time(pid)
    return started is None or now is None or now == started


def make_root(tmp: Path | None = None) -> Path:
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp))
    pid = os.getpid()
    (root / OWNER).write_text(json.dumps({"pid": pid, "start_time": start_time(pid)}))
    return root


def remove_stale(tmp: Path | None = None) -> list[Path]:
    removed = []
    for folder in sorted(Path(tmp or tempfile.gettempdir()).glob(PREFIX + "*")):
        try:
            owner = json.loads((folder / OWNER).read_text())
            pid, started = int(owner["pid"]), owner.get("start_time")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid != os.getpid() and not alive(pid, started):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


SOURCE_NOTE = ".stepscope-source"  # in a shadow logdir: the user's logdir it mirrors, for the tab to name


def note_source(logdir: Path, source: Path) -> None:
    """Record in the shadow ``logdir`` which of the user's folders it mirrors (the tab names that one)."""
    (logdir / SOURCE_NOTE).write_text(json.dumps({"source": str(Path(source).resolve())}))


def source_of(logdir: Path) -> Path | None:
    """The user's logdir that ``logdir`` is the shadow of (note_source); None for any other logdir."""
    try:
        return Path(json.loads((logdir / SOURCE_NOTE).read_text())["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None

"""The runs under a logdir, as stepscope's discovery sees them, and what identifies their traces' contents.

    runs = find_runs(Path("logs"))      # {"exp1": Run(name="exp1", folder=..., traces=(Found, ...)), ...}
    run.fingerprint()                   # the traces' paths, sizes and mtimes, plus run.json's and cycles.jsonl's

A run is a folder holding traces (discover.py's ``Found.run``); the logdir's own traces are the run ".".
The fingerprint changes whenever a trace, the trainer's run record or a trace handler's cycles.jsonl (the
unprofiled steps' telemetry of each cycle, telemetry.py) is written again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepscope.trace.discover import Found, discover
from stepscope.trace.files import CYCLES

ROOT_RUN = "."
RUN_RECORD = "run.json"


@dataclass(frozen=True)
class Run:
    name: str
    folder: Path
    traces: tuple[Found, ...]

    def fingerprint(self) -> list:
        parts = []
        for path in [*(t.path for t in self.traces), self.folder / RUN_RECORD, self.folder / CYCLES]:
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append([str(path.relative_to(self.folder)), st.st_size, st.st_mtime_ns])
        return parts


def find_runs(logdir: Path) -> dict[str, Run]:
    """Every run under ``logdir`` with at least one trace, by name."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        return {}
    by_run: dict[str, list[Found]] = {}
    for t in discover(logdir).traces:
        by_run.setdefault(t.run or ROOT_RUN, []).append(t)
    return {name: Run(name, logdir if name == ROOT_RUN else logdir / name, tuple(traces))
            for name, traces in sorted(by_run.items())}

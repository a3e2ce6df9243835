"""The runs under a logdir, as stepscope's discovery sees them, and what identifies their traces' contents.

    runs = find_runs(Path("logs"))      # {"exp1": Run(name="exp1", folder=..., traces=(Found, ...)), ...}
    run.fingerprint()                   # the traces' paths, sizes and mtimes, plus run.json's and cycles.jsonl's
    may_join(run)                       # whether its traces' headers let it be one job with other folders
    joined(logdir, [run_a, run_b])      # Run "a+b": several run folders as one run (a job of ranks)

A run is a folder holding traces (discover.py's ``Found.run``); the logdir's own traces are the run ".".
The fingerprint changes whenever a trace, the trainer's run record or a trace handler's cycles.jsonl (the
unprofiled steps' telemetry of each cycle, telemetry.py) is written again, in any of the run's folders.

Several run folders are one run when `stepscope analyze` makes them one job (report/jobs.py: the ranks of
a job written into sibling folders). Which folders that is, the rule decides from the parsed traces, so the
tab analyses the folders that ``may_join`` others together through the door and shows the jobs the
analysis made of them (plugin.py). ``may_join`` reads only each trace's header (jobs.py's
``files_may_join``), once per trace file version.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stepscope.report import jobs
from stepscope.trace.discover import Found, discover
from stepscope.trace.files import CYCLES

ROOT_RUN = "."
RUN_RECORD = "run.json"
JOIN = "+"  # a joined run's name: its folders' names joined with this, as `stepscope analyze` names the job


@dataclass(frozen=True)
class Run:
    name: str
    folder: Path  # the run's folder; for a run joined from several folders, the logdir they lie under
    traces: tuple[Found, ...]
    folders: tuple[Path, ...] = ()  # a joined run's folders, in the order of their names (empty otherwise)

    @property
    def run_folders(self) -> tuple[Path, ...]:
        return self.folders or (self.folder,)

    def fingerprint(self) -> list:
        parts = []
        for path in [*(t.path for t in self.traces),
                     *(p for f in self.run_folders for p in (f / RUN_RECORD, f / CYCLES))]:
            try:
                st = path.stat()
            except OSError:
                continue
            parts.append([str(path.relative_to(self.folder)), st.st_size, st.st_mtime_ns])
        return parts


def find_runs(logdir: Path) -> dict[str, Run]:
    """Every run folder under ``logdir`` with at least one trace, by name."""
    logdir = Path(logdir)
    if not logdir.is_dir():
        return {}
    by_run: dict[str, list[Found]] = {}
    for t in discover(logdir).traces:
        by_run.setdefault(t.run or ROOT_RUN, []).append(t)
    return {name: Run(name, logdir if name == ROOT_RUN else logdir / name, tuple(traces))
            for name, traces in sorted(by_run.items())}


def joined(logdir: Path, runs: list[Run]) -> Run:
    """The run folders ``runs`` as one run, named by their names joined with "+"."""
    runs = sorted(runs, key=lambda r: r.name)
    return Run(JOIN.join(r.name for r in runs), Path(logdir), tuple(t for r in runs for t in r.traces),
               tuple(r.folder for r in runs))


def may_join(run: Run) -> bool:
    """Whether the run folder may be one job with other folders (module docstring)."""
    return jobs.files_may_join([t.path for t in run.traces])

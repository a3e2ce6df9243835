"""The one front door: every way into a set of traces (the CLI, the trainer's end-of-run diagnosis, the
handler, the TensorBoard watcher) is a call of ``analyze``.

    report = analyze("logs/myrun")                               # RunReport; report.to_dict() is the --json
    report = analyze("trace.json", selection=StepSelection(steps=(3, 8)))
    report = analyze("logs/myrun", telemetry={"step_ms": 12.3})  # the run's own unprofiled figures
    runs = analyze("logs")          # a folder of several runs: RunsReport, one RunReport per run (runs.py)

Discovery (trace/discover.py) finds the traces, loaded.py parses them, jobs.py groups them into jobs (one run
folder is one job, unless the traces' distributedInfo joins folders), the analysis reports on each. When
``telemetry`` is not given and a run is a stepscope run with a run.json, the run's own telemetry is used.
Raises TraceError (a ValueError, one line) on bad input. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .analysis.report import RunReport
from .analysis.select import StepSelection
from .loaded import Loaded, load_found
from .runs import RunsReport, report_runs
from .trace.discover import discover, summary_line
from .trace.errors import TraceError


@dataclass(frozen=True)
class Found:
    """The parsed traces under a path, with the one-line summary of what was found and skipped."""
    loaded: list[Loaded]
    summary: str


def find(path: str | os.PathLike, max_memory: int | None = None) -> Found:
    """Every trace under ``path``, parsed; TraceError when there is none or one cannot be read."""
    path = Path(path)
    if not path.exists() or not (path.is_dir() or path.is_file()):
        raise TraceError(f"{path}: not a directory or a trace file (expected a run directory such as "
                         "logs/<run>, or a trace file)")
    found = discover(path)
    loaded, skipped = load_found(found.traces, max_memory)
    line = summary_line([item.found for item in loaded], [*found.skipped, *skipped], path)
    if not loaded:
        raise TraceError(f"{path}: no traces (expected <worker>.<span>.pt.trace.json[.gz], "
                         "raw/<span>/<worker>.trace.json[.gz], or a Chrome trace with ProfilerStep# events)"
                         + (f"; {line}" if found.skipped or skipped else ""))
    return Found(loaded, line)


def analyze(path: str | os.PathLike, *, telemetry: dict | None = None, selection: StepSelection | None = None,
            max_memory: int | None = None) -> RunReport | RunsReport:
    """The report on every trace under ``path`` (a run folder, any folder of traces, or one trace file): a
    RunReport when they form one job, a RunsReport (one RunReport per run) when ``path`` holds several."""
    path = Path(path)
    found = find(path, max_memory)
    return report_runs(found.loaded, path, selection, telemetry)

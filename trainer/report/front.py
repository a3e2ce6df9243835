"""The one front door: every way into a set of traces (the CLI, the trainer's end-of-run diagnosis, the
handler, the TensorBoard watcher) is a call of ``analyze``.

    report = analyze("logs/myrun")                               # RunReport; report.to_dict() is the --json
    report = analyze("trace.json", selection=StepSelection(steps=(3, 8)))
    report = analyze("logs/myrun", telemetry={"step_ms": 12.3})  # the run's own unprofiled figures
    runs = analyze("logs")          # a folder of several runs: RunsReport, one RunReport per run (runs.py)
    report = analyze("logs/job", workers=Workers.dask("tcp://host:8786"))   # each rank's work on a cluster
    done = find_and_analyze("logs/myrun")   # done.report, done.loaded, done.summary ("found 2 traces ...")

Discovery (trace/discover.py) finds the traces, loaded.py parses and reports on each where the worker policy
says (keeping only the report), jobs.py groups them into jobs (one run folder is one job, unless the traces'
distributedInfo joins folders), and the cross-rank analysis joins each job's reports. When
``telemetry`` is not given, each trace gets its run's own (telemetry.py): a trainer run's run.json, or the
row of its cycle in a trace handler's cycles.jsonl.
Raises TraceError (a ValueError, one line) on bad input. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stepscope.analysis.report import RunReport
from stepscope.analysis.select import StepSelection
from stepscope.report.loaded import Loaded, load_found
from stepscope.report.runs import RunsReport, report_runs, report_runs_found
from stepscope.trace.discover import discover, summary_line
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers


@dataclass(frozen=True)
class Found:
    """The parsed traces under a path, with the one-line summary of what was found and skipped."""
    loaded: list[Loaded]
    summary: str


def find(path: str | os.PathLike, workers: Workers | None = None) -> Found:
    """Every trace under ``path``, parsed where ``workers`` says (default: in this process); TraceError when
    there is none or one cannot be read."""
    path = Path(path)
    found = _discover(path)
    loaded, skipped = load_found(found.traces, workers)
    return Found(loaded, _summary(path, found, loaded, skipped))


def _discover(path: Path):
    if not path.exists() or not (path.is_dir() or path.is_file()):
        raise TraceError(f"{path}: not a directory or a trace file (expected a run directory such as "
                         "logs/<run>, or a trace file)")
    return discover(path)


def _summary(path: Path, found, loaded: list[Loaded], skipped: list) -> str:
    """The line that says what was found and skipped; TraceError when nothing was loaded."""
    line = summary_line([item.found for item in loaded], [*found.skipped, *skipped], path)
    if not loaded:
        raise TraceError(f"{path}: no traces (expected <worker>.<span>.pt.trace.json[.gz], "
                         "raw/<span>/<worker>.trace.json[.gz], or a Chrome trace with ProfilerStep# events)"
                         + (f"; {line}" if found.skipped or skipped else ""))
    return line


def analyze(path: str | os.PathLike, *, telemetry: Mapping | None = None, selection: StepSelection | None = None,
            max_memory: int | None = None, workers: Workers | None = None) -> RunReport | RunsReport:
    """The report on every trace under ``path`` (a run folder, any folder of traces, or one trace file): a
    RunReport when they form one job, a RunsReport (one RunReport per run) when ``path`` holds several.
    ``workers`` says where the traces are parsed (trace/workers.py); by default in this process alone,
    which a training process needs, or in local processes within ``max_memory`` bytes when it is given. Each
    trace's report is made where the trace is read (here, a local process, a Dask task), and only the report
    is kept: the cross-rank analysis works on small reports, and no more than one trace's events are held
    at once by a process working alone."""
    if workers is None:
        workers = Workers.inline() if max_memory is None else Workers.local(max_memory=max_memory)
    if telemetry is not None and not isinstance(telemetry, dict):  # a stepscope.capture.telemetry.Telemetry
        telemetry = telemetry.to_dict()
    return find_and_analyze(path, selection=selection, telemetry=telemetry, workers=workers).report


@dataclass(frozen=True)
class Analyzed:
    """The report on the traces under a path, the traces analysed (without their events: each keeps its
    found file, worker and span, e.g. to export them) and the one-line summary of what was found and
    skipped."""
    report: RunReport | RunsReport
    loaded: list[Loaded]
    summary: str


def find_and_analyze(path: str | os.PathLike, *, selection: StepSelection | None = None,
                     telemetry: dict | None = None, workers: Workers | None = None) -> Analyzed:
    """``analyze`` with what a caller that says what it found needs besides the report (the command line):
    every trace under ``path`` parsed and reported where ``workers`` says (default: in this process), only
    its report kept. TraceError when ``path`` is not a trace file or folder, when it holds no trace, or when
    one cannot be read."""
    path = Path(path)
    found = _discover(path)
    report, loaded, skipped = report_runs_found(found.traces, path, selection, telemetry, workers)
    return Analyzed(report, loaded, _summary(path, found, loaded, skipped))


def report(loaded: list[Loaded], root: Path, selection: StepSelection | None = None,
           telemetry: dict | None = None) -> RunReport | RunsReport:
    """The report on traces found under ``root`` (runs.report_runs): one job's RunReport, or a RunsReport."""
    return report_runs(loaded, Path(root), selection, telemetry)

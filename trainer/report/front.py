"""The one front door: every way into a set of traces (the CLI, the trainer's end-of-run diagnosis, the
handler's cycle worker, the `stepscope tensorboard` watcher and the tab) is a call of ``analyze``.

    report = analyze("logs/myrun")                               # Report; report.to_dict() is the --json
    report = analyze("trace.json", selection=StepSelection(steps=(3, 8)))
    report = analyze("logs/myrun", telemetry={"step_ms": 12.3})  # the run's own unprofiled figures
    runs = analyze("logs")          # a folder of several runs: RunsReport, one Report per run (runs.py)
    report = analyze("logs/job", workers=Workers.dask("tcp://host:8786"))   # each rank's work on a cluster
    report = analyze(folder, traces=found)   # traces a caller already discovered, as the run in ``folder``
    report = analyze(run, telemetry=t, memo=memo)   # traces analysed before through ``memo``: not read again
    report.summary, report.traces            # "found 2 traces ...", the traces analysed (without events)
    write_report(folder, report)             # report.json beside diagnosis.md, read back by ``read_report``

Discovery (trace/discover.py) finds the traces; the engine (engine.py) gives each its telemetry once, by
telemetry.py's policy, parses and analyses each once where the worker policy says (keeping only the report),
groups them into jobs (one run folder is one job, unless the traces' distributedInfo joins folders), and
joins each job's reports with the cross-rank analysis. When ``telemetry`` is not given, each trace gets its
run's own (telemetry.py): a trainer run's run.json, or the row of its cycle in a trace handler's cycles.jsonl.
Raises TraceError (a ValueError, one line) on bad input. Torch-free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from stepscope.analysis import json_out
from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.report import Report  # one job's report; a folder of several runs gives a RunsReport
from stepscope.analysis.select import StepSelection
from stepscope.report.engine import Memo, Rejected, analyze_traces
from stepscope.report.runs import RunsReport
from stepscope.report.telemetry import as_dict
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.discover import Discovery, Found, discover, summary_line
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers

__all__ = ["REPORT_FILE", "Memo", "NothingAnalysed", "Rejected", "Report", "RunsReport", "analyze", "read_report",
           "write_report"]
REPORT_FILE = "report.json"  # a run's Report as JSON, beside its diagnosis.md (write_report)


class NothingAnalysed(TraceError):
    """No trace under the path could be analysed; ``skipped`` says why, trace by trace."""

    def __init__(self, message: str, skipped: tuple = ()) -> None:
        super().__init__(message)
        self.skipped = skipped


def _discover(path: Path) -> Discovery:
    if not path.exists() or not (path.is_dir() or path.is_file()):
        raise TraceError(f"{path}: not a directory or a trace file (expected a run directory such as "
                         "logs/<run>, or a trace file)")
    return discover(path)


def _summary(path: Path, skipped_found: list, loaded: list, skipped: list) -> str:
    """The line that says what was found and skipped; NothingAnalysed when nothing was loaded."""
    line = summary_line([item.found for item in loaded], [*skipped_found, *skipped], path)
    if not loaded:
        raise NothingAnalysed(f"{path}: no traces (expected <worker>.<span>.pt.trace.json[.gz], "
                              "raw/<span>/<worker>.trace.json[.gz], or a Chrome trace with ProfilerStep# events)"
                              + (f"; {line}" if skipped_found or skipped else ""), tuple(skipped))
    return line


def analyze(path: str | os.PathLike | Sequence[str | os.PathLike], *, telemetry: Mapping | None = None,
            selection: StepSelection | None = None, max_memory: int | None = None,
            workers: Workers | None = None, traces: Sequence[Found] | None = None, tables: bool = False,
            keep_going: bool = False, parsed: Mapping[Path, ParsedTrace] | None = None,
            memo: Memo | None = None, copies: dict | None = None) -> Report | RunsReport:
    """The report on every trace under ``path`` (a run folder, any folder of traces, or one trace file; or
    a list of them): a Report when they form one job, a RunsReport (one Report per run) when they form
    several. ``traces``: the traces a caller already discovered (discover.py), as the run in folder ``path``
    (its run.json and cycles.jsonl give their telemetry); discovery is then skipped. ``workers`` says where
    the traces are parsed (trace/workers.py); by default in this process alone, which a training process
    needs, or in local processes within ``max_memory`` bytes when it is given. Each trace is analysed once,
    where it is read, and only its report is kept: the cross-rank analysis works on small reports.
    ``tables``: the Report also carries each trace's profiled step windows and the full operator table
    (``traced_ms``, ``ops_ms``: what `diff` compares). ``keep_going``: a trace that cannot be read is
    skipped with its one-line error as the reason (``report.skipped``) instead of failing the whole; when
    none is left, NothingAnalysed carries the reasons. ``parsed``: traces (by path) the caller has already
    parsed, as the trace handler's cycle has from the one read that also wrote the plugin copy
    (plugin_copy/one_pass.py); they are analysed without being read again. ``memo`` (engine.Memo): the
    evidence of traces analysed before through the same memo is reported again with this call's telemetry
    instead of reading the trace again, and the traces read now are added to it. ``copies``: a dict the
    door fills, for a caller that writes the traces' plugin copies next (``--export-tensorboard``): each trace
    read in one range is planned for its copy in the same pass (plugin_copy/one_pass.py), and its (plan,
    header keys) stored under its path; one read in halves at once, or whose one pass failed, is missing:
    the copy then plans it itself (engine._read_both says why)."""
    if workers is None:
        workers = Workers.inline() if max_memory is None else Workers.local(max_memory=max_memory)
    telemetry = as_dict(telemetry)
    if isinstance(path, (str, os.PathLike)):
        root = Path(path)
        if traces is None:
            found = _discover(root)
            traces, skipped_found = found.traces, list(found.skipped)
        else:
            skipped_found = []
    else:
        paths = [Path(p) for p in path]
        if not paths:
            raise TraceError("no path given: give a run folder, a folder of traces or a trace file")
        found = [_discover(p) for p in paths]
        folders = [p.absolute() if p.is_dir() else p.absolute().parent for p in paths]
        root = Path(os.path.commonpath(folders))
        # each trace's run folder relative to the common root, so that each path stays its own run
        traces = [replace(t, run=_run_under(folder.relative_to(root) / t.run))
                  for folder, f in zip(folders, found, strict=True) for t in f.traces]
        skipped_found = [s for f in found for s in f.skipped]
    report, loaded, skipped = analyze_traces(list(traces), root, selection, telemetry, workers, tables,
                                             keep_going, parsed, memo, copies)
    line = _summary(root, skipped_found, loaded, skipped)
    return replace(report, summary=line, traces=tuple(loaded), skipped=tuple([*skipped_found, *skipped]))


def _run_under(folder: Path) -> str:
    """A run folder relative to the analysed root, as discovery names it ("" for the root itself)."""
    name = folder.as_posix()
    return "" if name == "." else name


def write_report(folder: str | os.PathLike, report: Report | RunsReport) -> Path:
    """``report`` as ``folder/report.json``, written atomically (whole or not at all): the --json document
    (``report.to_dict()``), plus ``traced_ms`` and ``ops_ms`` when the report carries them (``tables``).
    The trainer's end of run and the trace handler's cycle worker write it beside diagnosis.md; the tab
    reads it back (``read_report``) instead of analysing the run again."""
    doc = report.to_dict()
    if isinstance(report, Report) and report.ops_ms is not None:
        doc = {**doc, "traced_ms": list(report.traced_ms), "ops_ms": report.ops_ms}
    path = Path(folder) / REPORT_FILE
    write_text_atomic(path, json_out.dumps(doc, indent=1) + "\n")
    return path


def read_report(folder: str | os.PathLike, traces: Sequence[Found]) -> dict | None:
    """The JSON of ``folder/report.json`` when it is the report on exactly ``traces`` (the run's traces, as
    discovered) and fresh: its spans are theirs, (worker, span) for (worker, span), and no trace is newer
    than it. None when there is none, it is older, it covers other traces (e.g. one rank's report in a folder
    of several ranks) or it cannot be read: the run is then analysed."""
    path = Path(folder) / REPORT_FILE
    try:
        written = path.stat().st_mtime_ns
        if not traces or any(Path(t.path).stat().st_mtime_ns > written for t in traces):
            return None
        doc = json.loads(path.read_text())
        spans = sorted((s["worker"], s["span"]) for s in doc["spans"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return doc if spans == sorted((t.worker, t.span) for t in traces) and "verdict" in doc else None

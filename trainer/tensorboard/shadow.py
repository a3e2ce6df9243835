"""Publish traces as one TensorBoard run of a shadow logdir: adapted copies, originals, report, diagnosis.

    path, verdict = publish_run([(found, span), ...], report, logdir, staging, "myrun", source)
                                                             # -> logdir/myrun (or logdir/myrun@2, ...)

The run is built complete in a folder under `staging` (same filesystem as `logdir`, outside it, so neither
TensorBoard nor the plugin ever sees it half-built) and then renamed into `logdir`:

    <name>/<worker>.<span>.pt.trace.json[.gz]     adapted copy (trainer layout, see files.py)
    <name>/raw/<span>/<worker>.trace.json[.gz]    untouched original
    <name>/report.json                            the run's Report (front.write_report), which the tab reads
    <name>/diagnosis.md, events.out.tfevents.*    Text "diagnosis" and "diagnosis/*" Scalars, unless the
                                                  source run writes its own (see below)
    <name>/run.json                               the source run's record, when it has one (stepscope's
                                                  trainer): the stepscope tab reads the run's unprofiled steps
                                                  and its verification from it, as `stepscope analyze` does
    <name>/cycles.jsonl                           the source's, when it has one (stepscope.trace_handler):
                                                  each cycle's unprofiled steps, read the same way

One diagnosis per run, from one place. A run that writes its own diagnosis into its own event files (a
stepscope trainer run that has one or is still running, a stepscope.trace_handler folder) shows that one: the
mirror (mirror.py) copies it, and the server adds none. Any other run gets exactly one, the server's, with
the run's own unprofiled figures when its run.json or cycles.jsonl has them (telemetry.py; a trainer run
that ended without a diagnosis), so that analyze, run.json, Text and Scalars show the same numbers.

torch-tb-profiler parses a run folder once, when it first has a trace, so a run's traces are never added to:
traces that arrive later for the same source run are published as a new run, `<name>@2`, `<name>@3`, ...
`<name>` may already hold the source run's mirrored event files (mirror.py); the built run joins them.
Torch-free.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from stepscope.analysis import json_out
from stepscope.analysis.render import md_text
from stepscope.analysis.report import Report
from stepscope.plugin_copy import export_file
from stepscope.report.front import REPORT_FILE, write_report
from stepscope.report.telemetry import RUN_RECORD
from stepscope.tensorboard.diagnose import write_diagnosis
from stepscope.tensorboard.tb_events import EventLog
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.discover import EXPORT_MARKER, STEPSCOPE, Found
from stepscope.trace.files import CYCLES, WORKER_PATTERN


def has_traces(folder: Path) -> bool:
    """Whether the plugin would list `folder` as a run (it may already have parsed it)."""
    return folder.is_dir() and any(WORKER_PATTERN.match(p.name) for p in folder.iterdir())


def free_name(logdir: Path, base: str) -> str:
    """`base` unless the plugin may have read it already, else the first free `base@N` (N >= 2). A `base`
    holding only mirrored event files (mirror.py) is free: the plugin has not looked at it."""
    if not has_traces(logdir / base):
        return base
    n = 2
    while (logdir / f"{base}@{n}").exists():
        n += 1
    return f"{base}@{n}"


def _move_in(work: Path, target: Path) -> None:
    """Move a built run into `target`: in one rename when `target` does not exist, else entry by entry with
    the plugin-listed traces last, so the plugin never sees a trace before the rest of its run."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(work, target)  # atomic; fails rather than merging if the name was taken meanwhile
        return
    entries = sorted(work.iterdir(), key=lambda p: (WORKER_PATTERN.match(p.name) is not None, p.name))
    for entry in entries:
        os.rename(entry, target / entry.name)


def own_diagnosis(source: Path | None, traces: list[Found]) -> bool:
    """Whether the source run folder writes its own diagnosis into its own event files (module docstring)."""
    if source is None:
        return False
    record = source / "run.json"
    if record.is_file():  # stepscope's trainer: a diagnosis after a profiled run, unless it ended otherwise
        try:
            run = json.loads(record.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(run, dict) and (bool(run.get("diagnosis")) or run.get("status") == "running")
    # stepscope.trace_handler diagnoses every cycle; an export (analyze --export-tensorboard) has no events
    return any(f.kind == STEPSCOPE for f in traces) and not (source / EXPORT_MARKER).exists()


def publish_run(traces: list[tuple[Found, str]], report: Report | dict | None, logdir: Path, staging: Path,
                base: str, source: Path | None = None, error: str = "",
                planned: dict | None = None) -> tuple[Path, str]:
    """Write ``traces`` ((found trace, its span) each) as a new run named after ``base`` (see free_name),
    with ``report``: the Report on them (``stepscope.analyze``), the JSON of the source's own fresh
    report.json (front.read_report; the source then diagnoses itself), or None (``error`` says why there
    is none). Return (its folder, the verdict or the reason there is none). `source`: the folder the
    traces come from (its run.json and its own diagnosis, see own_diagnosis). ``planned``: trace path -> its
    copy's plan, made by the read that analysed it (``stepscope.analyze(..., copies=planned)``); a trace
    missing there is planned as it is copied. Nothing appears in `logdir`
    unless the whole run was written; the run's report.json is written last, so that it is fresh."""
    logdir, staging = Path(logdir), Path(staging)
    staging.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=staging))
    try:
        for found, span in traces:
            export_file(work, found.worker, span, found.path, planned=(planned or {}).pop(found.path, None))
        for name in (RUN_RECORD, CYCLES):  # the unprofiled steps' telemetry (telemetry.py), read here and by the tab
            record = source / name if source is not None else None
            if record is not None and record.is_file():
                shutil.copyfile(record, work / name)
        if isinstance(report, Report):
            report = replace(report, run_dir=base)  # diagnosis.md names the run as the tab lists it
        verdict = f"no diagnosis: {error}" if report is None else (
            report.verdict if isinstance(report, Report) else report.get("verdict"))
        if not own_diagnosis(source, [f for f, _ in traces]):
            with EventLog(work) as log:
                if not isinstance(report, Report):
                    write_text_atomic(work / "diagnosis.md", md_text(verdict) + "\n")  # names files: escaped
                    log.text("diagnosis", md_text(verdict), 0)
                else:
                    write_diagnosis(work, report, log, 0)
        if isinstance(report, Report):
            write_report(work, report)
        elif report is not None:
            write_text_atomic(work / REPORT_FILE, json_out.dumps(report, indent=1) + "\n")
        target = logdir / free_name(logdir, base)
        _move_in(work, target)
        return target, verdict
    finally:
        shutil.rmtree(work, ignore_errors=True)

"""The reports on a folder of runs: one RunReport per job (jobs.py), each trace with its own run's telemetry.

    runs = report_runs(loaded, Path("logs"))          # RunsReport: runs = (("exp1", RunReport), ...)
    runs.to_dict()        # {"runs": [{"run": "exp1", "verdict": ..., "spans": [...], ...}, ...]}
    render_runs(runs)     # one console section per run
    runs, loaded, skipped = report_runs_found(found, Path("logs"), workers=Workers.dask(address))   # on a cluster

A folder holding one job is reported as that job's RunReport alone (the single-run JSON shape); only a
folder of several jobs gets a RunsReport. The JSON shapes are documented in docs/json.md.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stepscope.analysis import RunReport, SpanReport, render_console
from stepscope.analysis.report import run_report
from stepscope.analysis.select import StepSelection
from stepscope.report.jobs import Job, group_jobs
from stepscope.report.loaded import Loaded, analyze_found, assign_spans, report_of
from stepscope.report.telemetry import RUN_RECORD, run_telemetry, trace_telemetry
from stepscope.trace.discover import Found, Skipped
from stepscope.trace.errors import TraceError
from stepscope.trace.files import CYCLES
from stepscope.trace.workers import Workers


@dataclass(frozen=True)
class RunsReport:
    root: str
    runs: tuple[tuple[str, RunReport], ...]  # (run folder relative to root, its report), sorted by folder

    def to_dict(self) -> dict:
        return {"runs": [{"run": name, **report.to_dict()} for name, report in self.runs]}


def run_dir(root: Path, job: Job) -> Path | None:
    """The folder of a job's run, where its run.json would be; None for a job joined from several folders."""
    if len(job.folders) != 1:
        return None
    return root / job.folders[0] if job.folders[0] else root


def report_runs(loaded: list[Loaded], root: Path, selection: StepSelection | None = None,
                telemetry: dict | None = None,
                report: Callable[[list[Loaded], str, list[dict | None]], RunReport] | None = None
                ) -> RunReport | RunsReport:
    """One job: its RunReport. Several: a RunsReport; ``telemetry`` cannot be given then (it is one run's).
    Each trace is analysed with the telemetry that telemetry.py's policy gives it (``trace_telemetry``: the
    caller's, else the job's run.json, else its cycle's row in cycles.jsonl). ``report(items, label,
    telemetries)`` makes a job's RunReport from its traces and each one's telemetry (default: ``report_of``
    with ``selection``)."""
    if report is None:
        def report(items: list[Loaded], label: str, each: list[dict | None]) -> RunReport:
            return report_of(items, label, selection, telemetries=each)
    jobs = group_jobs(loaded)
    if len(jobs) == 1:
        return report(loaded, str(root), trace_telemetry([item.found for item in loaded], root, telemetry))
    if telemetry is not None:
        raise TraceError(f"{root}: holds {len(jobs)} runs ({', '.join(j.run or '.' for j in jobs)}); "
                         "telemetry belongs to one run: give that run's folder")
    out = []
    for job in jobs:
        folder = run_dir(root, job)
        items = list(job.loaded)
        out.append((job.run or root.name, report(items, str(folder or root / job.run),
                                                 trace_telemetry([item.found for item in items], folder))))
    return RunsReport(str(root), tuple(out))


def report_runs_found(found: list[Found] | tuple[Found, ...], root: Path, selection: StepSelection | None = None,
                      telemetry: dict | None = None, workers: Workers | None = None
                      ) -> tuple[RunReport | RunsReport | None, list[Loaded], list[Skipped]]:
    """``report_runs`` of the found traces, each parsed and reported where ``workers`` says (a Dask cluster:
    only its report comes back, loaded.analyze_found): the report (None when nothing was loaded), the traces
    analysed (without their events) and those skipped. Each trace is reported once, with the telemetry its
    job will most likely give it (``expected_telemetry``); only the traces of a job that gives them another
    (run folders joined into one job by their distributedInfo) are reported again with it."""
    spans = assign_spans(list(found))
    guesses = expected_telemetry(found, root, telemetry)
    done, skipped = analyze_found([(f, spans[f.path]) for f in found], selection, None, workers,
                                  telemetries=[guesses[f.path] for f in found])
    if not done:
        return None, [], skipped
    reports: dict[Path, SpanReport] = {item.found.path: span for item, span in done}

    def report(items: list[Loaded], label: str, each: list[dict | None]) -> RunReport:
        redo = [(item, t) for item, t in zip(items, each, strict=True) if guesses[item.found.path] != t]
        if redo:
            again, _ = analyze_found([(item.found, item.span) for item, _ in redo], selection, None, workers,
                                     telemetries=[t for _, t in redo])
            reports.update((item.found.path, span) for item, span in again)
        return run_report(label, [reports[item.found.path] for item in items])

    loaded = [item for item, _ in done]
    out = report_runs(loaded, root, selection, telemetry, report)
    return out, [Loaded(item.found, item.span, None) for item in loaded], skipped


def expected_telemetry(found: list[Found] | tuple[Found, ...], root: Path,
                       telemetry: dict | None = None) -> dict[Path, dict | None]:
    """Each found trace's telemetry as ``report_runs`` will give it, guessed before the traces are read: as
    for one job in root when the traces lie in one run folder; else as for one job per run folder."""
    found = list(found)
    folders = {f.run for f in found}
    if telemetry is not None or len(folders) < 2:
        return dict(zip((f.path for f in found), trace_telemetry(found, root, telemetry), strict=True))
    out: dict[Path, dict | None] = {}
    for run in folders:
        group = [f for f in found if f.run == run]
        out.update(zip((f.path for f in group), trace_telemetry(group, root / run if run else root),
                       strict=True))
    return out


def telemetry_sources(root: Path, report: RunReport | RunsReport) -> list[tuple[Path, str]]:
    """Where each run's unprofiled figures come from, and what they are: (its run.json, the mean step) for a
    trainer run; (its cycles.jsonl, how many of its traces matched a cycle) for a trace handler's folder."""
    runs = [(root, report)] if isinstance(report, RunReport) else [(root / name, r) for name, r in report.runs]
    out = []
    for folder, r in runs:
        if (t := run_telemetry(folder)) is not None:
            out.append((folder / RUN_RECORD, f"mean of {t.get('steps', 0):.0f} timed steps, {t['step_ms']:.2f} ms"))
        elif (timed := sum(s.basis == "telemetry" for s in r.spans)) and (folder / CYCLES).is_file():
            out.append((folder / CYCLES, f"each profiling cycle's own timed steps, for {timed} of "
                                         f"{len(r.spans)} trace(s)"))
    return out


def render_runs(report: RunReport | RunsReport) -> str:
    """The console text: a RunReport's, or one section per run headed by its folder."""
    if isinstance(report, RunReport):
        return render_console(report)
    n = len(report.runs)
    parts = [f"{report.root}: {n} separate runs, each reported on its own"]
    for name, r in report.runs:
        parts.append(f"\n== run {name} ==\n{render_console(r)}")
    return "\n".join(parts)

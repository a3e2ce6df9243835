"""The reports on a folder of runs: one RunReport per job (jobs.py), each with its own run's telemetry.

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

from .analysis import RunReport, SpanReport, render_console
from .analysis.report import run_report
from .analysis.select import StepSelection
from .jobs import Job, group_jobs
from .loaded import Loaded, analyze_found, assign_spans, report_of, run_telemetry
from .trace.discover import Found, Skipped
from .trace.errors import TraceError
from .trace.workers import Workers


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
                report: Callable[[list[Loaded], str, dict | None], RunReport] | None = None) -> RunReport | RunsReport:
    """One job: its RunReport (``telemetry``, else its run.json's). Several: a RunsReport, each run with its
    own run.json's telemetry; ``telemetry`` cannot be given then (it is one run's). ``report(items, label,
    telemetry)`` makes a job's RunReport (default: ``report_of`` with ``selection``)."""
    if report is None:
        def report(items: list[Loaded], label: str, t: dict | None) -> RunReport:
            return report_of(items, label, selection, t)
    jobs = group_jobs(loaded)
    if len(jobs) == 1:
        return report(loaded, str(root), telemetry if telemetry is not None else run_telemetry(root))
    if telemetry is not None:
        raise TraceError(f"{root}: holds {len(jobs)} runs ({', '.join(j.run or '.' for j in jobs)}); "
                         "telemetry belongs to one run: give that run's folder")
    out = []
    for job in jobs:
        folder = run_dir(root, job)
        out.append((job.run or root.name, report(list(job.loaded), str(folder or root / job.run),
                                                 run_telemetry(folder) if folder is not None else None)))
    return RunsReport(str(root), tuple(out))


def report_runs_found(found: list[Found] | tuple[Found, ...], root: Path, selection: StepSelection | None = None,
                      telemetry: dict | None = None, workers: Workers | None = None
                      ) -> tuple[RunReport | RunsReport | None, list[Loaded], list[Skipped]]:
    """``report_runs`` of the found traces, each parsed and reported where ``workers`` says (a Dask cluster:
    only its report comes back, loaded.analyze_found): the report (None when nothing was loaded), the traces
    analysed (without their events) and those skipped. Each trace is reported with the telemetry of a job of
    them all (``telemetry``, else root's run.json); the traces of a job whose telemetry is another (a folder
    of several stepscope runs) are reported again with it."""
    spans = assign_spans(list(found))
    guess = telemetry if telemetry is not None else run_telemetry(root)
    done, skipped = analyze_found([(f, spans[f.path]) for f in found], selection, guess, workers)
    if not done:
        return None, [], skipped
    reports: dict[Path, SpanReport] = {item.found.path: span for item, span in done}

    def report(items: list[Loaded], label: str, t: dict | None) -> RunReport:
        if t == guess:
            return run_report(label, [reports[item.found.path] for item in items])
        again, _ = analyze_found([(item.found, item.span) for item in items], selection, t, workers)
        return run_report(label, [span for _, span in again])

    loaded = [item for item, _ in done]
    out = report_runs(loaded, root, selection, telemetry, report)
    return out, [Loaded(item.found, item.span, None) for item in loaded], skipped


def telemetry_sources(root: Path, report: RunReport | RunsReport) -> list[tuple[Path, dict]]:
    """(run.json, telemetry) of every run whose figures come from its own run.json."""
    folders = [root] if isinstance(report, RunReport) else [root / name for name, _ in report.runs]
    return [(f / "run.json", t) for f in folders if (t := run_telemetry(f)) is not None]


def render_runs(report: RunReport | RunsReport) -> str:
    """The console text: a RunReport's, or one section per run headed by its folder."""
    if isinstance(report, RunReport):
        return render_console(report)
    n = len(report.runs)
    parts = [f"{report.root}: {n} separate runs, each reported on its own"]
    for name, r in report.runs:
        parts.append(f"\n== run {name} ==\n{render_console(r)}")
    return "\n".join(parts)

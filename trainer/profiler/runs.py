"""The reports on a folder of runs: one RunReport per job (jobs.py), each with its own run's telemetry.

    runs = report_runs(loaded, Path("logs"))          # RunsReport: runs = (("exp1", RunReport), ...)
    runs.to_dict()        # {"runs": [{"run": "exp1", "verdict": ..., "spans": [...], ...}, ...]}
    render_runs(runs)     # one console section per run

A folder holding one job is reported as that job's RunReport alone (the single-run JSON shape); only a
folder of several jobs gets a RunsReport. The JSON shapes are documented in docs/json.md.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .analysis import RunReport, render_console
from .analysis.select import StepSelection
from .jobs import Job, group_jobs
from .loaded import Loaded, report_of, run_telemetry
from .trace.errors import TraceError


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
                telemetry: dict | None = None) -> RunReport | RunsReport:
    """One job: its RunReport (``telemetry``, else its run.json's). Several: a RunsReport, each run with its
    own run.json's telemetry; ``telemetry`` cannot be given then (it is one run's)."""
    jobs = group_jobs(loaded)
    if len(jobs) == 1:
        return report_of(loaded, str(root), selection, telemetry if telemetry is not None else run_telemetry(root))
    if telemetry is not None:
        raise TraceError(f"{root}: holds {len(jobs)} runs ({', '.join(j.run or '.' for j in jobs)}); "
                         "telemetry belongs to one run: give that run's folder")
    out = []
    for job in jobs:
        folder = run_dir(root, job)
        out.append((job.run or root.name, report_of(list(job.loaded), str(folder or root / job.run), selection,
                                                    run_telemetry(folder) if folder is not None else None)))
    return RunsReport(str(root), tuple(out))


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

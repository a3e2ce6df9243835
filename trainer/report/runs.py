"""The report on a folder of runs: one Report per job (jobs.py), each trace with its own run's telemetry.

    runs = stepscope.analyze("logs")     # RunsReport: runs = (("exp1", Report), ...)
    runs.to_dict()        # {"runs": [{"run": "exp1", "verdict": ..., "spans": [...], ...}, ...]}
    render_runs(runs)     # one console section per run

A folder holding one job is reported as that job's Report alone (the single-run JSON shape); only a
folder of several jobs gets a RunsReport. The JSON shapes are documented in docs/json.md.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stepscope.analysis import Report, render_console
from stepscope.report.jobs import Job
from stepscope.report.telemetry import RUN_RECORD, run_telemetry
from stepscope.trace.files import CYCLES


@dataclass(frozen=True)
class RunsReport:
    root: str
    runs: tuple[tuple[str, Report], ...]  # (run folder relative to root, its report), sorted by folder
    summary: str = field(default="", compare=False)  # as Report's: what was found and skipped
    traces: tuple = field(default=(), compare=False)  # the traces analysed, without their events
    skipped: tuple = field(default=(), compare=False)  # traces not analysed, with why (discover.Skipped)

    def to_dict(self) -> dict:
        return {"runs": [{"run": name, **report.to_dict()} for name, report in self.runs]}


def run_dir(root: Path, job: Job) -> Path | None:
    """The folder of a job's run, where its run.json would be; None for a job joined from several folders."""
    if len(job.folders) != 1:
        return None
    return root / job.folders[0] if job.folders[0] else root


def telemetry_sources(root: Path, report: Report | RunsReport) -> list[tuple[Path, str]]:
    """Where each run's unprofiled figures come from, and what they are: (its run.json, the mean step) for a
    trainer run; (its cycles.jsonl, how many of its traces matched a cycle) for a trace handler's folder."""
    runs = [(root, report)] if isinstance(report, Report) else [(root / name, r) for name, r in report.runs]
    out = []
    for folder, r in runs:
        if (t := run_telemetry(folder)) is not None:
            out.append((folder / RUN_RECORD, f"mean of {t.get('steps', 0):.0f} timed steps, {t['step_ms']:.2f} ms"))
        elif (timed := sum(s.basis == "telemetry" for s in r.spans)) and (folder / CYCLES).is_file():
            out.append((folder / CYCLES, f"each profiling cycle's own timed steps, for {timed} of "
                                         f"{len(r.spans)} trace(s)"))
    return out


def render_runs(report: Report | RunsReport) -> str:
    """The console text: a Report's, or one section per run headed by its folder."""
    if isinstance(report, Report):
        return render_console(report)
    n = len(report.runs)
    parts = [f"{report.root}: {n} separate runs, each reported on its own"]
    for name, r in report.runs:
        parts.append(f"\n== run {name} ==\n{render_console(r)}")
    return "\n".join(parts)

"""The end-of-run diagnosis of a run directory: console, `report.json`, `diagnosis.md`, TensorBoard Text and
Scalars.

    report = diagnose_run(run_dir, log, step)     # log: anything with .text(tag, md, step) and .scalars(d, step)
    write_diagnosis(run_dir, report, log, step)   # the same outputs, silently, for a Report in hand

Torch-free: it reads the traces on disk and writes text; `log` is the trainer's TensorBoard log or any
object with the same two methods.
"""

from __future__ import annotations

from pathlib import Path

from stepscope.analysis import (
    Report,
    render_console,
    render_markdown,
    render_top,
    summary_scalars,
)
from stepscope.report.front import Memo, analyze, write_report
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.workers import Workers


def diagnose_run(run_dir: Path, log, step: int, telemetry: dict | None = None,
                 workers: Workers | None = None, memo: Memo | None = None) -> dict:
    """Analyse the run's traces (``stepscope.analyze``); print the verdict and evidence; write report.json
    (front.write_report: what the tab then reads instead of analysing the run again), diagnosis.md, Text and
    Scalars.
    `telemetry` is the run's own unprofiled step timing (trainer/demo/timing.py), which makes the figures those of
    the run without the profiler. `workers`: where the traces are parsed (trace/workers.py); by default in
    this process alone, as a training process must (a fork would copy a live CUDA context and process
    group). `memo`: the trace handler's (engine.Memo): the traces its cycles analysed are reported again with
    `telemetry`, not read again. Returns the report's JSON form."""
    report = analyze(run_dir, telemetry=telemetry or {}, workers=workers or Workers.inline(), tables=True,
                     memo=memo)
    print(render_top(report))
    print(render_console(report))
    write_diagnosis(run_dir, report, log, step)
    write_report(run_dir, report)  # last: a signal during the diagnosis leaves no report that says it is whole
    return report.to_dict()


def write_diagnosis(run_dir: Path, report: Report, log, step: int) -> None:
    """Write `report` as run_dir/diagnosis.md, Text `diagnosis` and `diagnosis/*` Scalars; print nothing."""
    md = render_markdown(report)
    write_text_atomic(Path(run_dir) / "diagnosis.md", md)
    log.text("diagnosis", md, step)
    log.scalars(summary_scalars(report), step)

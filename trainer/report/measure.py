"""A run's report and its per-step times, from one parse of its traces.

    m = measure_path(Path("logs/myrun"))       # m.report, m.step_ms, m.source ("run.json" or "trace")
    m = measured(stepscope.analyze(folder, traces=found, tables=True), folder)   # from a Report in hand
    m = measured_from_json(json.loads((folder / "report.json").read_text()), folder)   # from report.json

``report`` is ``Report.to_dict()``, exactly what ``stepscope analyze --json`` prints for the same traces.
``step_ms`` is what a comparison of two runs draws its noise from: the unprofiled timed steps that the
trainer keeps in run.json (``final.step_times_ms``, ``recorded_ms``) when the run has them, else each traced
step's window (``traced_ms``; analysis/steps.py: the time between two step completions, profiled) of every
trace. ``source`` says which. A run of the trainer made without ``--profile`` has no trace: its report is then
empty (no verdict, no spans) and its step times are run.json's alone. ``ops_ms`` is the full table of
operators (a CPU trace, by self time) or kernels (a GPU trace), ms per step, each trace's over its steps,
averaged over the traces that list it; ``setup`` is run.json's resolved config, flattened (``data.batch_size``:
64), with the world size and the torch version, so that a comparison can name what differs; ``others_pct``
and ``waited_pct`` are run.json's record of what the run shared its CPUs with (None: not measured).
Raises TraceError (one line) on bad input. Torch-free.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.analysis.report import Report
from stepscope.report.front import analyze
from stepscope.report.runs import RunsReport
from stepscope.report.telemetry import RUN_RECORD
from stepscope.trace.discover import discover
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers

UNPROFILED = "run.json"  # source: the trainer's own timed steps, without the profiler
TRACED = "trace"  # source: the profiled steps of the traces


@dataclass(frozen=True)
class Measured:
    report: dict
    recorded_ms: list[float]  # run.json's unprofiled timed steps; [] when the run has none
    traced_ms: list[float]  # every trace's profiled step windows
    ops_ms: dict = field(default_factory=dict)  # every operator or kernel: name -> ms per step
    setup: dict = field(default_factory=dict)  # run.json's config, flattened; {} without run.json
    others_pct: float | None = None  # run.json's share of all CPUs other processes used meanwhile; None: unknown
    waited_pct: float | None = None  # ... and of its threads' runnable time they waited for a CPU

    @property
    def source(self) -> str:
        return UNPROFILED if self.recorded_ms else TRACED

    @property
    def step_ms(self) -> list[float]:
        return self.recorded_ms or self.traced_ms

    def to_dict(self) -> dict:
        return {"report": self.report, "recorded_ms": self.recorded_ms, "traced_ms": self.traced_ms,
                "ops_ms": self.ops_ms, "setup": self.setup, "others_pct": self.others_pct,
                "waited_pct": self.waited_pct}

    @classmethod
    def from_dict(cls, d: dict) -> Measured:
        return cls(d["report"], list(d["recorded_ms"]), list(d["traced_ms"]), dict(d.get("ops_ms") or {}),
                   dict(d.get("setup") or {}), d.get("others_pct"),
                   d.get("waited_pct"))


def measure_path(path: str | os.PathLike, workers: Workers | None = None) -> Measured:
    """Every trace under ``path`` (a run folder, any folder of traces, or one trace file), as one run,
    analysed through the door (front.py) where ``workers`` says (trace/workers.py; default: in this
    process)."""
    path = Path(path)
    record = recorded(path)
    if record[0] and not discover(path).traces:  # the trainer without --profile: its timed steps alone
        return Measured({"verdict": None, "spans": []}, record[0], [], {}, *record[1:])
    return measured(analyze(path, workers=workers, tables=True), path, record)


def measured(report: Report | RunsReport, path: Path | None, record: tuple | None = None) -> Measured:
    """A run's Measured from its Report (made with ``tables``) and the run.json in ``path`` (None: a job
    joined from several run folders, which has no run.json of its own; ``record``: that run.json already read,
    ``recorded(path)``)."""
    if isinstance(report, RunsReport):
        raise TraceError(f"{path}: holds {len(report.runs)} runs ({', '.join(n for n, _ in report.runs)}); "
                         "give one run's folder")
    steps, setup, others, waited = record or recorded(path)
    return Measured(report.to_dict(), steps, list(report.traced_ms), dict(report.ops_ms or {}), setup, others,
                    waited)


def measured_from_json(doc: dict, path: Path) -> Measured:
    """A run's Measured from its report.json (front.write_report) and the run.json in ``path``."""
    report = {k: v for k, v in doc.items() if k not in ("traced_ms", "ops_ms")}
    steps, setup, others, waited = recorded(path)
    return Measured(report, steps, [float(x) for x in doc.get("traced_ms") or []], dict(doc.get("ops_ms") or {}),
                    setup, others, waited)


def recorded(path: Path | None) -> tuple[list[float], dict, float | None, float | None]:
    """What a run folder's run.json says, read once: its unprofiled step times (``recorded_step_ms``), its
    setup (``run_setup``) and what it shared its CPUs with (``recorded_sharing``); nothing for None or a folder
    without one."""
    doc = _record(path) if path is not None else {}
    return (recorded_step_ms(doc), run_setup(doc), *recorded_sharing(doc))


def _record(path: Path) -> dict:
    """run.json of a run folder as a dict; {} when there is none or it cannot be read."""
    record = path / RUN_RECORD if path.is_dir() else None
    if record is None or not record.is_file():
        return {}
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


SETUP_SKIP = {"run.logdir", "run.run_name"}  # where a run was written, not how it ran


def run_setup(doc: dict) -> dict:
    """run.json's config (``doc``) flattened to dotted keys (``data.batch_size``), plus ``world_size`` and
    ``torch``."""
    out: dict = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif prefix not in SETUP_SKIP and (value is None or isinstance(value, (str, int, float, bool))):
            out[prefix] = value

    if isinstance(doc.get("config"), dict):
        walk("", doc["config"])
        for key, value in (("world_size", doc.get("world_size")),
                           ("torch", (doc.get("environment") or {}).get("torch"))):
            if value is not None:
                out[key] = value
    return out


def recorded_step_ms(doc: dict) -> list[float]:
    """run.json's (``doc``) ``final.step_times_ms`` (the trainer's unprofiled timed steps); [] when there is
    none."""
    try:
        times = (doc.get("final") or {}).get("step_times_ms")
    except AttributeError:
        return []
    if not isinstance(times, list):
        return []
    return [float(t) for t in times if isinstance(t, (int, float)) and 0 < t < float("inf")]


def recorded_sharing(doc: dict) -> tuple[float | None, float | None]:
    """run.json's (``doc``) ``final.others_cpu_pct`` and ``final.waited_cpu_pct`` (capture/machine_load.py);
    None each where the run did not measure it."""
    final = doc.get("final")
    final = final if isinstance(final, dict) else {}
    return tuple(float(v) if isinstance(v := final.get(k), (int, float)) and 0 <= v <= 100 else None
                 for k in ("others_cpu_pct", "waited_cpu_pct"))

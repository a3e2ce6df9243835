"""A run's report and its per-step times, from one parse of its traces.

    m = measure_path(Path("logs/myrun"))       # m.report, m.step_ms, m.source ("run.json" or "trace")
    m = measure_found(found_traces, Path("logs/myrun"))   # some of a discovery's traces, as one run

``report`` is ``RunReport.to_dict()``, exactly what ``stepscope analyze --json`` prints for the same traces.
``step_ms`` is what a comparison of two runs draws its noise from: the unprofiled timed steps that the
trainer keeps in run.json (``final.step_times_ms``, ``recorded_ms``) when the run has them, else each traced
step's window (``traced_ms``; analysis/steps.py: the time between two step completions, profiled) of every
trace. ``source`` says which. A run of the trainer made without ``--profile`` has no trace: its report is then
empty (no verdict, no spans) and its step times are run.json's alone. ``ops_ms`` is the full table of
operators (a CPU trace, by self time) or kernels (a GPU trace), ms per step, each trace's over its steps,
averaged over the traces that list it; ``setup`` is run.json's resolved config, flattened (``data.batch_size``:
64), with the world size and the torch version, so that a comparison can name what differs.
Raises TraceError (one line) on bad input. Torch-free.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.analysis.metrics import op_table
from stepscope.analysis.steps import step_windows
from stepscope.report.front import find
from stepscope.report.loaded import Loaded, load_found, report_of
from stepscope.report.telemetry import RUN_RECORD, trace_telemetry
from stepscope.trace.discover import Found, discover
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

    @property
    def source(self) -> str:
        return UNPROFILED if self.recorded_ms else TRACED

    @property
    def step_ms(self) -> list[float]:
        return self.recorded_ms or self.traced_ms

    def to_dict(self) -> dict:
        return {"report": self.report, "recorded_ms": self.recorded_ms, "traced_ms": self.traced_ms,
                "ops_ms": self.ops_ms, "setup": self.setup}

    @classmethod
    def from_dict(cls, d: dict) -> Measured:
        return cls(d["report"], list(d["recorded_ms"]), list(d["traced_ms"]), dict(d.get("ops_ms") or {}),
                   dict(d.get("setup") or {}))


def measure_path(path: str | os.PathLike, workers: Workers | None = None) -> Measured:
    """Every trace under ``path`` (a run folder, any folder of traces, or one trace file), as one run, parsed
    where ``workers`` says (trace/workers.py; default: in this process)."""
    path = Path(path)
    recorded = recorded_step_ms(path)
    if recorded and not discover(path).traces:  # the trainer without --profile: its timed steps alone
        return Measured({"verdict": None, "spans": []}, recorded, [], {}, run_setup(path))
    return measured(find(path, workers).loaded, path)


def measure_found(found: list[Found], path: Path, workers: Workers | None = None) -> Measured:
    """These discovered traces, as the run in folder ``path`` (``workers``: as ``measure_path``)."""
    loaded, _ = load_found(found, workers)
    if not loaded:
        raise TraceError(f"{path}: no traces with ProfilerStep# events")
    return measured(loaded, path)


def measured(loaded: list[Loaded], path: Path) -> Measured:
    each = trace_telemetry([item.found for item in loaded], path)
    report = report_of(loaded, str(path), None, telemetries=each).to_dict()
    tables: dict[str, list[float]] = defaultdict(list)
    for item in loaded:
        for name, ms in op_table(item.parsed, step_windows(item.parsed)).items():
            tables[name].append(ms)
    ops = {name: statistics.fmean(ms) for name, ms in tables.items()}
    return Measured(report, recorded_step_ms(path), [ms for item in loaded for ms in traced_step_ms(item)],
                    ops, run_setup(path))


def traced_step_ms(item: Loaded) -> list[float]:
    """Each ProfilerStep's window in one trace, in ms (trace times are in us)."""
    return [(w.end - w.start) / 1e3 for w in step_windows(item.parsed)]


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


def run_setup(path: Path) -> dict:
    """run.json's config flattened to dotted keys (``data.batch_size``), plus ``world_size`` and ``torch``."""
    doc = _record(path)
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


def recorded_step_ms(path: Path) -> list[float]:
    """run.json's ``final.step_times_ms`` (the trainer's unprofiled timed steps); [] when there is none."""
    try:
        times = (_record(path).get("final") or {}).get("step_times_ms")
    except AttributeError:
        return []
    if not isinstance(times, list):
        return []
    return [float(t) for t in times if isinstance(t, (int, float)) and 0 < t < float("inf")]

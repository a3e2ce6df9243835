"""Parse what `discover.py` found: each trace into a ParsedTrace, or a reason to skip it.

    loaded, skipped = load_found(discovery.traces)      # raises TraceError on a broken trace named as one
    loaded, skipped = load_found(discovery.traces, cpus=1)   # in this process only: never forks
    report = report_of(loaded)                          # RunReport, as for a run directory
    report = report_of(loaded, telemetry=run_telemetry(run_dir))   # a stepscope run: its unprofiled figures

Each trace is parsed streaming into a ParsedTrace (analysis/stream_parse.py), never held as JSON. A trace
that does not parse is an error (TraceError, one line). A Lightning trace without ProfilerStep# or
Optimizer.step# events, or a file that was only sniffed as a Chrome trace and holds no torch operators
either, is skipped (see skip_reason). A trace whose name carries no span gets one: the file's mtime in ns,
shared by every spanless trace of the same run folder so that the ranks of an accelerate run pair up.
Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .analysis.events import ParsedTrace
from .analysis.report import RunReport, analyze_parsed_file, parse_path, parse_paths, run_report
from .analysis.select import StepSelection
from .analysis.stream_parse import NoSteps, Unreadable, has_step_names
from .trace.discover import HANDLER, LIGHTNING, STEPSCOPE, Found, Skipped
from .trace.errors import TraceError
from .trace.vocabulary import STEPS_FROM_WINDOW

STEPS_REQUIRED = (STEPSCOPE, HANDLER)
# what a trace without steps needs: prof.step() marks each step only under a schedule
NO_STEPS = ("no ProfilerStep#, Optimizer.step# or torch operator events; profile with "
            "schedule=torch.profiler.schedule(...) and call prof.step() once per training step")


@dataclass(frozen=True)
class Loaded:
    found: Found
    span: str  # found.span, or the one given to a spanless trace
    parsed: ParsedTrace

    @property
    def worker(self) -> str:
        return self.found.worker


def skip_reason(found: Found, error: TraceError) -> str | None:
    """Why a found file that did not parse is not a trace to analyse after all; None when ``error`` stands.
    Traces of stepscope and tensorboard_trace_handler are always analysed (a trace without steps is then an
    error that says how to fix the loop); Lightning's also profiles actions without steps (e.g.
    validation_step), which are skipped, as are sniffed files with nothing to take steps from."""
    if found.kind in STEPS_REQUIRED or isinstance(error, Unreadable):
        return None
    if isinstance(error, NoSteps):
        return None if error.step_names else _skip(found, None)
    if found.kind == LIGHTNING and not has_step_names(found.path):
        return _skip(found, None)
    return None


def _skip(found: Found, source: str | None) -> str | None:
    """Why a trace whose steps come from ``source`` (None: from nothing) is skipped; None when it is not."""
    if found.kind in STEPS_REQUIRED or (source is not None and (source != STEPS_FROM_WINDOW
                                                                 or found.kind != LIGHTNING)):
        return None
    if found.kind == LIGHTNING:
        return "no ProfilerStep# or Optimizer.step# events"
    return NO_STEPS


def assign_spans(found: list[Found]) -> dict[Path, str]:
    """Each trace's span: its own, or the smallest mtime in ns among the spanless traces of its folder."""
    shared: dict[Path, int] = {}
    for f in found:
        if not f.span:
            mtime = f.path.stat().st_mtime_ns
            shared[f.path.parent] = min(mtime, shared.get(f.path.parent, mtime))
    return {f.path: f.span or str(shared[f.path.parent]) for f in found}


def outcome(found: Found, span: str, parsed: ParsedTrace | TraceError) -> Loaded | Skipped:
    """What a parse (report.parse_path) of a found trace makes of it; raises its TraceError if it stands."""
    if isinstance(parsed, ParsedTrace):
        # a Lightning action without steps of its own, a sniffed file without torch operators
        reason = _skip(found, parsed.steps_from if parsed.steps_from != STEPS_FROM_WINDOW or parsed.ops else None)
        return Skipped(found.path, reason) if reason else Loaded(found, span, parsed)
    reason = skip_reason(found, parsed)
    if reason is None:
        raise parsed
    return Skipped(found.path, reason)


def load_one(found: Found, span: str) -> Loaded | Skipped:
    """``outcome`` of one found trace, parsed in this process."""
    return outcome(found, span, parse_path(found.path, found.worker, span))


def load_found(found: list[Found] | tuple[Found, ...], max_memory: int | None = None,
               cpus: int | None = None) -> tuple[list[Loaded], list[Skipped]]:
    """Parse every found trace (large ones in parallel processes within ``max_memory`` bytes and ``cpus``,
    see trace/workers.py; ``cpus=1``: in this process); skip sniffed ones without ProfilerStep# events."""
    spans = assign_spans(list(found))
    loaded, skipped = [], []
    parsed = parse_paths([(f.path, f.worker, spans[f.path]) for f in found], max_memory, cpus)
    for f, result in zip(found, parsed, strict=True):
        item = outcome(f, spans[f.path], result)
        (loaded if isinstance(item, Loaded) else skipped).append(item)
    return loaded, skipped


def report_of(loaded: list[Loaded], label: str = "", selection: StepSelection | None = None,
              telemetry: dict | None = None) -> RunReport:
    """The analysis of these traces as one run: each (worker, span), plus cross-rank when spans are shared;
    ``selection`` keeps some steps of each (analysis/select.py); ``telemetry`` is the run's own unprofiled
    step timing, when stepscope's trainer made the run (`run_telemetry`). Raises TraceError (one line, naming
    worker.span) when a trace cannot be analysed (none of its steps in the selection, ...)."""
    return run_report(label, [analyze_parsed_file(item.parsed, item.found.path, telemetry, selection)
                              for item in loaded])


def run_telemetry(path: Path) -> dict | None:
    """The unprofiled steps' telemetry of a stepscope trainer run (``run.json``'s ``final.telemetry``: the
    mean step and its phases in ms) when ``path`` is such a run's directory; None otherwise, or when the
    record is unreadable or holds no timed step (the traces are then read as anyone's)."""
    record = path / "run.json" if path.is_dir() else None
    if record is None or not record.is_file():
        return None
    try:
        final = json.loads(record.read_text()).get("final") or {}
    except (OSError, ValueError, AttributeError):
        return None
    telemetry = final.get("telemetry") if isinstance(final, dict) else None
    if not isinstance(telemetry, dict):
        return None
    step_ms = telemetry.get("step_ms")
    if not isinstance(step_ms, (int, float)) or not 0 < step_ms < float("inf"):
        return None
    return {k: float(v) for k, v in telemetry.items() if isinstance(v, (int, float)) and v >= 0}

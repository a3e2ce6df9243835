"""Load what `discover.py` found, and analyse any set of loaded traces as one run.

    loaded, skipped = load_found(discovery.traces)      # raises TraceError on a broken trace named as one
    report = report_of(loaded)                          # RunReport, as for a run directory
    report = report_of(loaded, telemetry=run_telemetry(run_dir))   # a stepscope run: its unprofiled figures
    done, skipped = analyze_found(pairs, workers=Workers.dask(address))   # [(light Loaded, SpanReport)]

Each trace is parsed streaming into a ParsedTrace (analysis/stream_parse.py), never held as JSON; one that
the streaming parser leaves to the ordinary reader is loaded whole (``Loaded.trace``), which gives the same
report or error. A trace that does not parse is an error (TraceError, one line). A Lightning trace without
ProfilerStep# or Optimizer.step# events, or a file that was only sniffed as a Chrome trace and holds no torch
operators either, is skipped (see skip_reason). A trace whose name carries no span gets one: the file's mtime in ns, shared by every spanless
trace of the same run folder so that the ranks of an accelerate run pair up.
``analyze_found`` does both for a cluster (trace/workers.py): each trace is parsed and analysed where it is
read (a Dask task), and only its report comes back, with the little that runs.py groups jobs by.
Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from .analysis.events import ParsedTrace
from .analysis.report import (
    RunReport,
    analyze_file,
    analyze_parsed_file,
    parse_path,
    parse_paths,
    read_trace,
    run_report,
)
from .analysis.select import StepSelection
from .analysis.span import SpanReport
from .trace.discover import HANDLER, LIGHTNING, STEPSCOPE, Found, Skipped, step_source
from .trace.vocabulary import STEPS_FROM_WINDOW
from .trace.workers import Workers

STEPS_REQUIRED = (STEPSCOPE, HANDLER)
# what a trace without steps needs: prof.step() marks each step only under a schedule
NO_STEPS = ("no ProfilerStep#, Optimizer.step# or torch operator events; profile with "
            "schedule=torch.profiler.schedule(...) and call prof.step() once per training step")


@dataclass(frozen=True)
class Loaded:
    found: Found
    span: str  # found.span, or the one given to a spanless trace
    trace: dict | None  # the whole JSON, only when the streamed parse left it to the ordinary reader
    parsed: ParsedTrace | None = None  # the streamed parse, otherwise

    @property
    def worker(self) -> str:
        return self.found.worker


def read(found: Found) -> dict:
    """Parse one found trace completely; TraceError (one line) when it is not readable JSON."""
    return read_trace(found.path)


def skip_reason(found: Found, trace: dict) -> str | None:
    """Why a found file is not a trace to analyse after all; None when it is one. Traces of stepscope and
    tensorboard_trace_handler are always analysed (a trace without steps is then an error that says how to
    fix the loop); Lightning's also profiles actions without steps (e.g. validation_step), which are skipped
    unless they hold optimizer steps; a sniffed file is skipped when it holds no torch operators."""
    return _skip(found, step_source(trace))


def _skip(found: Found, source: str | None) -> str | None:
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


def load_found(found: list[Found] | tuple[Found, ...],
               workers: Workers | None = None) -> tuple[list[Loaded], list[Skipped]]:
    """Parse every found trace where ``workers`` says (default: in this process; trace/workers.py); skip
    sniffed ones without ProfilerStep# events."""
    spans = assign_spans(list(found))
    loaded, skipped = [], []
    streamed = parse_paths([(f.path, f.worker, spans[f.path]) for f in found], workers or Workers.inline())
    for f, parsed in zip(found, streamed, strict=True):
        item = load_one(f, spans[f.path], parsed)
        (skipped if isinstance(item, Skipped) else loaded).append(item)
    return loaded, skipped


def load_one(f: Found, span: str, parsed: ParsedTrace | None) -> Loaded | Skipped:
    """A found trace as ``load_found`` loads it, given its streamed parse (None: it is read whole)."""
    if parsed is not None:
        reason = _skip(f, parsed.steps_from if parsed.steps_from != STEPS_FROM_WINDOW or parsed.ops else None)
        return Skipped(f.path, reason) if reason else Loaded(f, span, None, parsed)
    trace = read(f)
    reason = skip_reason(f, trace)
    return Skipped(f.path, reason) if reason else Loaded(f, span, trace)


def report_of(loaded: list[Loaded], label: str = "", selection: StepSelection | None = None,
              telemetry: dict | None = None) -> RunReport:
    """The analysis of these traces as one run: each (worker, span), plus cross-rank when spans are shared;
    ``selection`` keeps some steps of each (analysis/select.py); ``telemetry`` is the run's own unprofiled
    step timing, when stepscope's trainer made the run (`run_telemetry`). Raises TraceError (one line, naming
    worker.span) when a trace cannot be analysed (no ProfilerStep#, or none in the selection)."""
    spans = [span_report(item, telemetry, selection) for item in loaded]
    return run_report(label, spans)


def analyze_found(found: list[tuple[Found, str]], selection: StepSelection | None = None,
                  telemetry: dict | None = None, workers: Workers | None = None
                  ) -> tuple[list[tuple[Loaded, SpanReport]], list[Skipped]]:
    """Each (found trace, its span) parsed and reported where ``workers`` says (default: in this process),
    only the report and the trace without its events (``light``) brought back; and the traces skipped."""
    jobs = [(f.path, f, span, telemetry, selection) for f, span in found]
    done, skipped = [], []
    for result in (workers or Workers.inline()).map(report_found, jobs):
        (skipped if isinstance(result, Skipped) else done).append(result)
    return done, skipped


def report_found(path: Path, found: Found, span: str, telemetry: dict | None = None,
                 selection: StepSelection | None = None, parts: int = 1) -> tuple[Loaded, SpanReport] | Skipped:
    """One found trace, loaded as ``load_found`` does (in ``parts`` byte ranges), and its report; or why it
    is skipped."""
    item = load_one(found, span, parse_path(path, found.worker, span, parts))
    if isinstance(item, Skipped):
        return item
    return light(item), span_report(item, telemetry, selection)


def light(item: Loaded) -> Loaded:
    """``item`` with only what jobs.py reads of its events: its rank, world size, first and last steps."""
    if item.parsed is not None:
        p = item.parsed
        return replace(item, parsed=replace(p, steps=p.steps[:1] + p.steps[1:][-1:], ops=(), annotations=(),
                                            runtime=(), device=(), data_spans=(), memory=(), python_calls=(),
                                            python_builtins=()))
    trace = item.trace or {}
    return replace(item, trace={"distributedInfo": trace.get("distributedInfo"), "traceEvents": [
        e for e in trace.get("traceEvents") or () if isinstance(e, dict)
        and str(e.get("name", "")).startswith("ProfilerStep#")]})


def span_report(item: Loaded, telemetry: dict | None = None, selection: StepSelection | None = None) -> SpanReport:
    """The report of one loaded trace (``report_of``)."""
    if item.parsed is not None:
        return analyze_parsed_file(item.parsed, item.found.path, telemetry, selection)
    return analyze_file(item.trace, item.found.path, item.worker, item.span, telemetry, selection)


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

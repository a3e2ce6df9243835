"""Parse what `discover.py` found: each trace into a ParsedTrace, or a reason to skip it.

    loaded, skipped = load_found(discovery.traces)      # raises TraceError on a broken trace named as one
    loaded, skipped = load_found(discovery.traces, Workers.local())   # large traces in local processes
    report = report_of(loaded)                          # RunReport, as for a run directory
    report = report_of(loaded, telemetries=trace_telemetry([i.found for i in loaded], run_dir))
                                                        # each trace with its unprofiled figures (telemetry.py)
    done, skipped = analyze_found(pairs, workers=Workers.dask(address))   # [(light Loaded, SpanReport)]

Each trace is parsed streaming into a ParsedTrace (analysis/stream_parse.py), never held as JSON. A trace
that does not parse is an error (TraceError, one line). A Lightning trace without ProfilerStep# or
Optimizer.step# events, or a file that was only sniffed as a Chrome trace and holds no torch operators
either, is skipped (see skip_reason). A trace whose name carries no span gets one: the file's mtime in ns,
shared by every spanless trace of the same run folder so that the ranks of an accelerate run pair up.
``analyze_found`` does both, as the front door does (trace/workers.py): each trace is parsed and analysed
where it is read (this process, a local process, a Dask task), and only its report is kept, with the little
that runs.py groups jobs by.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.report import RunReport, analyze_parsed_file, parse_path, parse_paths, run_report
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanReport
from stepscope.analysis.stream_parse import NoSteps, Unreadable, has_step_names
from stepscope.trace.discover import Found, Skipped
from stepscope.trace.errors import TraceError
from stepscope.trace.sources import STEPS_ANY, STEPS_OWN, STEPS_REQUIRED, by_kind
from stepscope.trace.vocabulary import STEPS_FROM_WINDOW
from stepscope.trace.workers import Workers

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
    validation_step), which are skipped, as are sniffed files with nothing to take steps from: each source's
    ``steps`` policy (trace/sources.py)."""
    steps = by_kind(found.kind).steps
    if steps == STEPS_REQUIRED or isinstance(error, Unreadable):
        return None
    if isinstance(error, NoSteps):
        return None if error.step_names else _skip(found, None)
    if steps == STEPS_OWN and not has_step_names(found.path):
        return _skip(found, None)
    return None


def _skip(found: Found, source: str | None) -> str | None:
    """Why a trace whose steps come from ``source`` (None: from nothing) is skipped; None when it is not."""
    steps = by_kind(found.kind).steps
    if steps == STEPS_REQUIRED or (source is not None and (source != STEPS_FROM_WINDOW or steps == STEPS_ANY)):
        return None
    if steps == STEPS_OWN:
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


def load_one(found: Found, span: str, parsed: ParsedTrace | TraceError) -> Loaded | Skipped:
    """A found trace as ``load_found`` loads it, given its parse (report.parse_path): loaded, or skipped;
    raises the parse's TraceError if it stands."""
    if isinstance(parsed, ParsedTrace):
        # a Lightning action without steps of its own, a sniffed file without torch operators
        reason = _skip(found, parsed.steps_from if parsed.steps_from != STEPS_FROM_WINDOW or parsed.ops else None)
        return Skipped(found.path, reason) if reason else Loaded(found, span, parsed)
    reason = skip_reason(found, parsed)
    if reason is None:
        raise parsed
    return Skipped(found.path, reason)


def load_found(found: list[Found] | tuple[Found, ...],
               workers: Workers | None = None) -> tuple[list[Loaded], list[Skipped]]:
    """Parse every found trace where ``workers`` says (default: in this process; trace/workers.py); skip
    Lightning actions and sniffed files with nothing to take steps from (``load_one``)."""
    spans = assign_spans(list(found))
    loaded, skipped = [], []
    streamed = parse_paths([(f.path, f.worker, spans[f.path]) for f in found], workers or Workers.inline())
    for f, parsed in zip(found, streamed, strict=True):
        item = load_one(f, spans[f.path], parsed)
        (skipped if isinstance(item, Skipped) else loaded).append(item)
    return loaded, skipped


def report_of(loaded: list[Loaded], label: str = "", selection: StepSelection | None = None,
              telemetry: dict | None = None, telemetries: list[dict | None] | None = None) -> RunReport:
    """The analysis of these traces as one run: each (worker, span), plus cross-rank when spans are shared;
    ``selection`` keeps some steps of each (analysis/select.py); ``telemetry`` is the run's own unprofiled
    step timing, ``telemetries`` each trace's own instead (telemetry.py says which a run's traces get).
    Raises TraceError (one line, naming worker.span) when a trace cannot be analysed (none of its steps in
    the selection, ...)."""
    each = telemetries if telemetries is not None else [telemetry] * len(loaded)
    return run_report(label, [span_report(item, t, selection) for item, t in zip(loaded, each, strict=True)])


def analyze_found(found: list[tuple[Found, str]], selection: StepSelection | None = None,
                  telemetry: dict | None = None, workers: Workers | None = None,
                  telemetries: list[dict | None] | None = None
                  ) -> tuple[list[tuple[Loaded, SpanReport]], list[Skipped]]:
    """Each (found trace, its span) parsed and reported where ``workers`` says (default: in this process),
    only the report and the trace without its events (``light``) brought back; and the traces skipped.
    ``telemetries``, when given, is each trace's own telemetry (instead of ``telemetry`` for all)."""
    each = telemetries if telemetries is not None else [telemetry] * len(found)
    jobs = [(f.path, f, span, t, selection) for (f, span), t in zip(found, each, strict=True)]
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
    p = item.parsed
    return replace(item, parsed=replace(p, steps=p.steps[:1] + p.steps[1:][-1:], ops=(), annotations=(),
                                        runtime=(), device=(), data_spans=(), memory=(), python_calls=(),
                                        python_builtins=(), long_frames=(), model_spans=()))


def span_report(item: Loaded, telemetry: dict | None = None, selection: StepSelection | None = None) -> SpanReport:
    """The report of one loaded trace (``report_of``)."""
    return analyze_parsed_file(item.parsed, item.found.path, telemetry, selection)

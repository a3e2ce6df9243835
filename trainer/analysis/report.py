"""The analysis of a run (Report): every trace (span.py), plus cross-rank (cross_rank.py).

    parsed = parse_path(path, worker, span)        # ParsedTrace, or the TraceError that says why not
    report = run_report("logs/myrun", [analyze_parsed_file(parsed, path), ...])
    json.dumps(report.to_dict())

``stepscope.analyze`` (report/front.py) is the way in: it finds the traces (trace/discover.py), and its
engine (report/engine.py) calls these for each trace where the worker policy says (trace/workers.py).
Each trace file is parsed streaming (stream_parse.py).

JSON shape (documented in docs/json.md):
    {"verdict": str,
     "spans": [{"worker", "span", "rank", "device", "verdict", "evidence": [str],
                "metrics": {"step_ms", "gpu_busy_pct", "kernels_per_step", "syncs_per_step",
                            "sync_ms_per_step", ...},
                "breakdown_ms_per_step": {bucket: ms}, "top": [{"name", "ms_per_step", ...}],
                "findings": [{"id", "text", "cost_ms_per_step", "remedies"}], "remedies": [str]}],
     "distributed": [...]}     # only when several workers share a profiling cycle; see cross_rank.py
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.analysis.cross_rank import CrossRankReport, cross_rank
from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanEvidence, SpanReport, evidence_selected, report_guarded
from stepscope.analysis.stream_parse import NoSteps, Unreadable, parse_trace_file
from stepscope.trace.bounded_read import TraceTooLarge
from stepscope.trace.errors import TraceError
from stepscope.trace.files import gzipped_since


@dataclass(frozen=True)
class Report:
    run_dir: str
    verdict: str
    spans: tuple[SpanReport, ...]
    distributed: tuple[CrossRankReport, ...]  # empty for a single-process run
    # beside the JSON (to_dict), what the door (report/front.py) knows of how the report was made: each
    # trace's profiled step windows in ms and the mean full operator table (ms per step), when asked for
    # (``analyze(..., tables=True)``: what `diff` and the tab compare runs by); the line that says what was
    # found and skipped; the traces analysed, without their events
    traced_ms: tuple[float, ...] = ()
    ops_ms: dict | None = None
    summary: str = field(default="", compare=False)
    traces: tuple = field(default=(), compare=False)
    skipped: tuple = field(default=(), compare=False)  # traces not analysed, with why (discover.Skipped)

    def to_dict(self) -> dict:
        out = {"verdict": self.verdict, "spans": [s.to_dict() for s in self.spans]}
        if self.distributed:
            out["distributed"] = [d.to_dict() for d in self.distributed]
        return out


def run_report(label: str, spans: list[SpanReport]) -> Report:
    """The spans as one run: their cross-rank sections and the run's verdict."""
    dist = tuple(cross_rank(spans))
    return Report(label, run_verdict(spans, dist), tuple(spans), dist)


def parse_path(path: Path, worker: str, span: str, parts: int = 1) -> ParsedTrace | TraceError:
    """The parse of a trace file (stream_parse.py; in ``parts`` byte ranges at once), or the one-line
    TraceError naming the file that says why there is none: returned, not raised, so that the caller meets
    the errors of several files in its own order (a NoSteps keeps its class, see stream_parse.py)."""
    try:
        return parse_trace_file(path, worker, span, parts=parts)
    except Unreadable as e:
        gzipped = gzipped_since(path)
        return e if gzipped is None else parse_path(gzipped, worker, span, parts)
    except NoSteps as e:
        return NoSteps(f"{path}: {e}", e.step_names)
    except TraceError as e:
        return TraceError(f"{path}: {e}")
    except TraceTooLarge as e:
        return Unreadable(str(e))
    except MemoryError:
        return Unreadable(f"{path}: too large to load into the memory available here")
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        return TraceError(f"{path}: {worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})")


def analyze_parsed_file(parsed: ParsedTrace, path: Path, telemetry: dict | None = None,
                        selection: StepSelection | None = None, processes: int = 1) -> SpanReport:
    """The report of a trace parsed from ``path`` (in ``processes`` at most: span.analyze_parsed); its one-line
    TraceError, and running out of memory, name the file."""
    return report_of_file(evidence_of_file(parsed, path, selection, processes), path, telemetry)


def evidence_of_file(parsed: ParsedTrace, path: Path, selection: StepSelection | None = None,
                     processes: int = 1) -> SpanEvidence:
    """analyze_parsed_file's first half: what the report takes from the trace's events (span.SpanEvidence)."""
    return _naming(path, lambda: evidence_selected(parsed, selection, processes))


def report_of_file(evidence: SpanEvidence, path: Path, telemetry: dict | None = None) -> SpanReport:
    """analyze_parsed_file's second half: the report from the trace's evidence and the run's telemetry."""
    return _naming(path, lambda: report_guarded(evidence, telemetry))


def _naming(path: Path, make):
    try:
        return make()
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None
    except MemoryError:
        raise TraceError(f"{path}: too large to analyse in the memory available here") from None


def run_verdict(spans: list[SpanReport], dist: tuple[CrossRankReport, ...]) -> str:
    """A multi-rank run: the job's verdict (cross_rank.py), the most common over its profiling cycles. One
    process: the most common span verdict, ties going to the slowest tied span."""
    if dist:
        counts = Counter(d.verdict for d in dist)
        best = max(counts.values())
        return next(d.verdict for d in reversed(dist) if counts[d.verdict] == best)
    counts = Counter(s.verdict for s in spans)
    best = max(counts.values())
    tied = {v for v, c in counts.items() if c == best}
    return max((s for s in spans if s.verdict in tied), key=lambda s: s.metrics.step_ms).verdict

"""The analysis of a run (RunReport): every trace (span.py), plus cross-rank (cross_rank.py).

    parsed = parse_paths([(path, worker, span), ...], max_memory, cpus)   # ParsedTrace or TraceError each
    report = run_report("logs/myrun", [analyze_parsed_file(p, path) for ...])
    json.dumps(report.to_dict())

``stepscope.report.front.analyze`` is the way in: it finds the traces (trace/discover.py) and calls these.
Each trace file is parsed streaming (stream_parse.py). Several traces (ranks) are parsed where the worker
policy says (trace/workers.py): in this process, in local processes, or on a Dask cluster.

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
from dataclasses import dataclass
from pathlib import Path

from stepscope.analysis.cross_rank import CrossRankReport, cross_rank
from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanReport, analyze_selected
from stepscope.analysis.stream_parse import NoSteps, Unreadable, parse_trace_file
from stepscope.trace.bounded_read import TraceTooLarge
from stepscope.trace.errors import TraceError
from stepscope.trace.files import gzipped_since
from stepscope.trace.workers import Workers


@dataclass(frozen=True)
class RunReport:
    run_dir: str
    verdict: str
    spans: tuple[SpanReport, ...]
    distributed: tuple[CrossRankReport, ...]  # empty for a single-process run

    def to_dict(self) -> dict:
        out = {"verdict": self.verdict, "spans": [s.to_dict() for s in self.spans]}
        if self.distributed:
            out["distributed"] = [d.to_dict() for d in self.distributed]
        return out


def run_report(label: str, spans: list[SpanReport]) -> RunReport:
    """The spans as one run: their cross-rank sections and the run's verdict."""
    dist = tuple(cross_rank(spans))
    return RunReport(label, run_verdict(spans, dist), tuple(spans), dist)


def analyze_paths(jobs: list[tuple], workers: Workers) -> list[SpanReport]:
    """``analyze_path(*job)`` for each job (path, worker, span, ...), in order, where ``workers`` says."""
    return workers.map(analyze_path, jobs)


def parse_paths(jobs: list[tuple], workers: Workers) -> list:
    """``parse_path(*job)`` for each job (path, worker, span), in order, where ``workers`` says."""
    return workers.map(parse_path, jobs)


def analyze_path(path: Path, worker: str, span: str, telemetry: dict | None = None,
                 selection: StepSelection | None = None, parts: int = 1) -> SpanReport:
    """The report of one trace file (``parse_path``, then ``analyze_parsed_file``); raises the one-line
    TraceError of either."""
    parsed = parse_path(path, worker, span, parts)
    if isinstance(parsed, TraceError):
        raise parsed
    return analyze_parsed_file(parsed, path, telemetry, selection)


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
                        selection: StepSelection | None = None) -> SpanReport:
    """The report of a trace parsed from ``path``; its one-line TraceError, and running out of memory,
    name the file."""
    try:
        return analyze_selected(parsed, telemetry, selection)
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

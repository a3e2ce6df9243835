"""The analysis of a run directory (RunReport): every trace (span.py), plus cross-rank (cross_rank.py).

    report = analyze_run(Path("logs/myrun"))
    report = analyze_run(Path("logs/myrun"), StepSelection(steps=(3, 8)), max_memory=2 << 30)
    json.dumps(report.to_dict())

Each trace file is parsed streaming (stream_parse.py); a file that the streaming parser leaves to the
ordinary reader (``StreamFallback``) is loaded whole with ``read_trace`` and parsed by events.py, which gives
the same report or the same one-line error. Several traces (ranks) are analysed where the worker policy says
(trace/workers.py): in this process, in local processes, or on a Dask cluster.

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

import json
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..trace.bounded_read import TraceTooLarge
from ..trace.errors import TraceError
from ..trace.files import find_traces, load_trace
from ..trace.workers import Workers
from .cross_rank import CrossRankReport, cross_rank
from .events import ParsedTrace
from .select import StepSelection
from .span import SpanReport, analyze_selected, analyze_trace
from .stream_parse import StreamFallback, parse_trace_file


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


def analyze_run(run_dir: Path, telemetry: dict | None = None, selection: StepSelection | None = None,
                max_memory: int | None = None, cpus: int | None = None, workers: Workers | None = None) -> RunReport:
    """Analyse every (worker, span) trace in a run directory, plus a cross-rank section when several workers
    share a profiling cycle. `telemetry` is the run's own unprofiled step timing (the trainer's run.json
    `final.telemetry`), when the run was made by stepscope's trainer. ``selection`` restricts each trace to
    some steps (select.py). Traces are analysed where ``workers`` says (trace/workers.py); without it, in
    local processes as far as ``max_memory`` bytes (default: a quarter of RAM) and ``cpus`` allow, and in
    this process alone when ``cpus`` is 1. Raises TraceError (a ValueError) with a one-line message on bad
    input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: not a directory (expected a run directory such as logs/<run>)")
    files = find_traces(run_dir)
    if not files:
        raise TraceError(f"{run_dir}: no traces (expected <worker>.<span>.pt.trace.json[.gz], or "
                         "raw/<span>/<worker>.trace.json[.gz])")
    jobs = [(tf.path, tf.worker, tf.span, telemetry, selection) for tf in files]
    if workers is None:
        workers = Workers.inline() if cpus == 1 else Workers.local(cpus, max_memory)
    return run_report(str(run_dir), analyze_paths(jobs, workers))


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
    """The report of one trace file, streamed (stream_parse.py; in ``parts`` byte ranges at once), else read
    whole; errors as ``analyze_file``."""
    try:
        parsed = parse_trace_file(path, worker, span, parts=parts)
    except StreamFallback:
        return analyze_file(read_trace(path), path, worker, span, telemetry, selection)
    except TraceTooLarge as e:
        raise TraceError(str(e)) from None
    except MemoryError:
        raise TraceError(f"{path}: too large to load into the memory available here") from None
    return analyze_parsed_file(parsed, path, telemetry, selection)


def parse_path(path: Path, worker: str, span: str, parts: int = 1) -> ParsedTrace | None:
    """The streamed parse of a trace file (in ``parts`` byte ranges at once); None when it must be read whole
    (StreamFallback), and when it is too large: ``read_trace`` then raises the one-line error, in the order
    the caller reads the files."""
    try:
        return parse_trace_file(path, worker, span, parts=parts)
    except (StreamFallback, TraceTooLarge, MemoryError):
        return None


def analyze_parsed_file(parsed: ParsedTrace, path: Path, telemetry: dict | None = None,
                        selection: StepSelection | None = None) -> SpanReport:
    """``analyze_file`` for a trace parsed from ``path`` already."""
    try:
        return analyze_selected(parsed, telemetry, selection)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None
    except MemoryError:
        raise TraceError(f"{path}: too large to analyse in the memory available here") from None


def read_trace(path: Path) -> dict:
    """A trace file's JSON object; TraceError (one line naming the file) when it cannot be read."""
    try:
        trace = load_trace(path)
    except TraceTooLarge as e:
        raise TraceError(str(e)) from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: unreadable trace ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise TraceError(f"{path}: unreadable trace (JSON nested too deeply to parse)") from None
    except MemoryError:
        raise TraceError(f"{path}: too large to load into the memory available here") from None
    if not isinstance(trace, dict):
        raise TraceError(f"{path}: unreadable trace (a JSON {type(trace).__name__}, not an object)")
    return trace


def analyze_file(raw: dict, path: Path, worker: str, span: str, telemetry: dict | None = None,
                 selection: StepSelection | None = None) -> SpanReport:
    """``analyze_trace`` with its one-line TraceError, and running out of memory, naming the file."""
    try:
        return analyze_trace(raw, worker, span, telemetry, selection)
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

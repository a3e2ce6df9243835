"""The analysis of a run directory (RunReport): every trace (span.py), plus cross-rank (cross_rank.py).

    report = analyze_run(Path("logs/myrun"))
    json.dumps(report.to_dict())

JSON shape (documented in the README):
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

from stepscope.trainer.profiler.bounded_read import TraceTooLarge
from stepscope.trainer.profiler.files import find_traces, load_trace

from .cross_rank import CrossRankReport, cross_rank
from .errors import TraceError
from .span import SpanReport, analyze_trace


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


def analyze_run(run_dir: Path, telemetry: dict | None = None) -> RunReport:
    """Analyse every (worker, span) trace in a run directory, plus a cross-rank section when several workers
    share a profiling cycle. `telemetry` is the run's own unprofiled step timing (the trainer's run.json
    `final.telemetry`), when the run was made by stepscope's trainer. Raises TraceError (a ValueError) with a
    one-line message on bad input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: not a directory (expected a run directory such as logs/<run>)")
    files = find_traces(run_dir)
    if not files:
        raise TraceError(f"{run_dir}: no traces (expected <worker>.<span>.pt.trace.json[.gz], or "
                         "raw/<span>/<worker>.trace.json[.gz])")
    spans = [analyze_file(read_trace(tf.path), tf.path, tf.worker, tf.span, telemetry) for tf in files]
    dist = tuple(cross_rank(spans))
    return RunReport(str(run_dir), run_verdict(spans, dist), tuple(spans), dist)


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


def analyze_file(raw: dict, path: Path, worker: str, span: str, telemetry: dict | None = None) -> SpanReport:
    """``analyze_trace`` with its one-line TraceError, and running out of memory, naming the file."""
    try:
        return analyze_trace(raw, worker, span, telemetry)
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

"""The analysis of one trace (SpanReport) and of a run directory (RunReport), and their JSON form.

    report = analyze_run(Path("logs/myrun"))
    json.dumps(report.to_dict())

JSON shape (documented in the README):
    {"verdict": str,
     "spans": [{"worker", "span", "rank", "device", "verdict", "evidence": [str],
                "metrics": {"step_ms", "gpu_busy_pct", "kernels_per_step", "syncs_per_step",
                            "sync_ms_per_step", ...},
                "breakdown_ms_per_step": {bucket: ms}, "top": [{"name", "ms_per_step", ...}],
                "findings": [{"id", "text", "cost_ms_per_step", "remedies"}], "remedies": [str]}],
     "distributed": [...]}     # only when several workers share a profiling cycle; see distributed.py
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from trainer.trace_files import find_traces, load_trace

from .breakdown import Breakdown, breakdown
from .distributed import CrossRankReport, cross_rank
from .events import ParsedTrace, TraceError, parse_trace
from .findings import Finding, evidence, findings, remedies, verdict
from .metrics import SpanMetrics, span_metrics
from .steps import step_windows


@dataclass(frozen=True)
class SpanReport:
    worker: str
    span: str
    rank: int | None
    device: str  # GPU name, or "cpu"
    verdict: str
    metrics: SpanMetrics
    breakdown: Breakdown
    evidence: tuple[str, ...]
    findings: tuple[Finding, ...]
    remedies: tuple[str, ...]

    @property
    def gpu(self) -> bool:
        return self.metrics.gpu_busy_pct is not None

    def to_dict(self) -> dict:
        return {
            "worker": self.worker, "span": self.span, "rank": self.rank, "device": self.device,
            "verdict": self.verdict, "evidence": list(self.evidence), "metrics": self.metrics.to_dict(),
            "breakdown_ms_per_step": {b: round(self.breakdown.ms_per_step(b), 4)
                                      for b in self.breakdown.buckets},
            "top": [{"name": t.name, "ms_per_step": round(t.ms_per_step, 4),
                     "count_per_step": t.count_per_step, "pct": round(t.pct, 2)} for t in self.metrics.top],
            "findings": [f.to_dict() for f in self.findings],
            "remedies": list(self.remedies),
        }


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


def analyze_parsed(trace: ParsedTrace) -> SpanReport:
    windows = step_windows(trace)
    bd = breakdown(trace, windows)
    m = span_metrics(trace, windows, bd)
    v = verdict(bd, trace.has_gpu)
    found = findings(bd, m, trace.has_gpu, v)
    device = (trace.device_name or "gpu") if trace.has_gpu else "cpu"
    return SpanReport(trace.worker, trace.span, trace.rank, device, v, m, bd,
                      tuple(evidence(bd, m, trace.has_gpu)), tuple(found), tuple(remedies(found)))


def analyze_trace(trace: dict, worker: str, span: str) -> SpanReport:
    """Analyse one parsed-JSON trace. Raises TraceError on a trace without training steps."""
    return analyze_parsed(parse_trace(trace, worker, span))


def analyze_run(run_dir: Path) -> RunReport:
    """Analyse every (worker, span) trace in a run directory, plus a cross-rank section when several workers
    share a profiling cycle. Raises TraceError (a ValueError) with a one-line message on bad input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: not a directory (expected a run directory such as logs/<run>)")
    files = find_traces(run_dir)
    if not files:
        raise TraceError(f"{run_dir}: no traces (expected <worker>.<span>.pt.trace.json[.gz], or "
                         "raw/<span>/<worker>.trace.json[.gz])")
    spans = []
    for tf in files:
        try:
            raw = load_trace(tf.path)
        except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TraceError(f"{tf.path}: unreadable trace ({type(e).__name__}: {e})") from None
        spans.append(analyze_trace(raw, tf.worker, tf.span))
    dist = tuple(cross_rank(spans))
    return RunReport(str(run_dir), run_verdict(spans, dist), tuple(spans), dist)


def run_verdict(spans: list[SpanReport], dist: tuple[CrossRankReport, ...]) -> str:
    """The most common span verdict. Ties go to the cross-rank verdict when it is among them, else to the
    verdict of the slowest tied span."""
    counts = Counter(s.verdict for s in spans)
    best = max(counts.values())
    tied = {v for v, c in counts.items() if c == best}
    for d in dist:
        if d.verdict in tied:
            return d.verdict
    return max((s for s in spans if s.verdict in tied), key=lambda s: s.metrics.step_ms).verdict

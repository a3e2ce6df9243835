"""The analysis of one (worker, span) trace: `SpanReport`, and the pipeline that makes it.

    report = analyze_trace(trace_dict, worker="rank0", span="1795259107760373831")
    report.verdict, report.to_dict()

parse (events.py) -> step windows (steps.py) -> breakdown (breakdown.py) -> metrics (metrics.py) ->
verdict, evidence and findings (findings.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .breakdown import Breakdown, breakdown
from .errors import TraceError
from .events import ParsedTrace, parse_trace
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
    """Analyse one parsed-JSON trace. Raises TraceError (one line) on a trace without training steps or one
    that is corrupt. Errors that no input check foresaw become a TraceError naming the exception, so that a
    corrupt trace never ends in a traceback."""
    try:
        return analyze_parsed(parse_trace(trace, worker, span))
    except TraceError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise TraceError(f"{worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None

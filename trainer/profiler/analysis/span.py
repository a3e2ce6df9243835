"""The analysis of one (worker, span) trace: `SpanReport`, and the pipeline that makes it.

    report = analyze_selected(parse_trace_file(path, "rank0", "1795259107760373831"))
    report = analyze_selected(parsed, telemetry={"step_ms": 9.1, "data_ms": 0.1}, selection=StepSelection(...))
    report.verdict, report.to_dict()

parse (stream_parse.py) -> step windows (steps.py) -> trust gate (trust.py: cold steps left out) -> breakdown of
the profiled steps (breakdown.py) and their metrics (metrics.py) -> the same step without the profiler
(unprofiled.py: from the run's own telemetry, else from the overhead model, overhead.py) -> verdict,
evidence and findings of the unprofiled step (findings.py). The profiled figures stay in the report,
labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..trace.errors import TraceError
from .breakdown import Breakdown, breakdown, host_sets
from .by_name import NameTimes, name_times
from .events import ParsedTrace
from .findings import Finding, cold_start_finding, evidence, findings, near_tie, remedies, verdict
from .inferred_steps import FROM_PROFILER, NOTES
from .metrics import SpanMetrics, span_metrics
from .overhead import Inflation, Recording, host_inflation, recording
from .select import StepSelection, select
from .step_range import StepRange, error_band, step_range
from .steps import step_windows
from .trust import representative_steps
from .unprofiled import loader_paced, unprofiled_view, worker_fed
from .verdicts import DATA_BOUND

WORKERS_UNSEEN = ("a DataLoader feeds these steps from worker processes, which the trace does not show: a short "
                  "profiled window can run on batches they had prefetched, so whether they keep up without the "
                  "profiler cannot be read from here; time the wait for each batch over a few hundred unprofiled "
                  "steps (stepscope train records it as telemetry data_ms)")

LOADER_PACES = ("the DataLoader paces the step: the host waited {data:.2f} ms per step for its next batch on "
                "{basis}, so faster host or GPU work would only lengthen that wait")


@dataclass(frozen=True)
class SpanReport:
    worker: str
    span: str
    rank: int | None
    device: str  # GPU name, or "cpu"
    verdict: str
    metrics: SpanMetrics  # of the step without the profiler (step_ms, gpu_busy_pct); the rest as profiled
    breakdown: Breakdown  # of the step without the profiler
    evidence: tuple[str, ...]
    findings: tuple[Finding, ...]
    remedies: tuple[str, ...]
    profiled: SpanMetrics | None = None  # the profiled steps' own figures
    breakdown_profiled: Breakdown | None = None
    basis: str = "telemetry"  # where the unprofiled figures come from: telemetry | overhead_model
    recording: Recording | None = None
    inflation: Inflation | None = None
    uncertainty: dict | None = None  # overhead_model only: {"gpu_busy_pct": [lo, hi], "verdicts": [...]}
    loader_paced: bool = False  # the DataLoader sets the step's pace (unprofiled.py)
    names: NameTimes | None = None  # the profiled steps' phases by name (by_name.py), for cross-rank comparison
    steps_from: str = FROM_PROFILER  # where the steps came from (inferred_steps.py)
    step_range: StepRange | None = None  # overhead_model only: the step's range and the verdicts at its ends
    tie: str | None = None  # the other device verdict where the two are a near tie (findings.near_tie)

    @property
    def steps_note(self) -> str | None:
        """One line on how the steps were found, when the trace has no ProfilerStep# ranges."""
        return NOTES.get(self.steps_from)

    @property
    def gpu(self) -> bool:
        return self.metrics.gpu_busy_pct is not None

    def to_dict(self) -> dict:
        metrics = self.metrics.to_dict()
        if self.profiled is not None:
            metrics["profiled"] = {k: _r(getattr(self.profiled, k)) for k in ("step_ms", "host_step_ms",
                                                                               "gpu_busy_pct")}
        out = {
            "worker": self.worker, "span": self.span, "rank": self.rank, "device": self.device,
            "verdict": self.verdict, "basis": self.basis, "loader_paced": self.loader_paced,
            "evidence": list(self.evidence), "metrics": metrics,
            "breakdown_ms_per_step": _buckets(self.breakdown),
        }
        if self.breakdown_profiled is not None:
            out["breakdown_profiled_ms_per_step"] = _buckets(self.breakdown_profiled)
        if self.recording is not None:
            out["recording"] = self.recording.to_dict()
        if self.inflation is not None:
            out["profiler_inflation"] = self.inflation.to_dict()
        if self.uncertainty is not None:
            out["uncertainty"] = self.uncertainty
        if self.step_range is not None:
            out["step_range"] = self.step_range.to_dict()
            out["alternative"] = self.step_range.alternative or self.tie
        elif self.tie is not None:
            out["alternative"] = self.tie
        if self.steps_note is not None:
            out["steps_from"] = self.steps_from
            out["steps_note"] = self.steps_note
        out.update({
            "top": [{"name": t.name, "ms_per_step": round(t.ms_per_step, 4),
                     "count_per_step": t.count_per_step, "pct": round(t.pct, 2)} for t in self.metrics.top],
            "findings": [f.to_dict() for f in self.findings],
            "remedies": list(self.remedies),
        })
        return out


def _r(v):
    return round(v, 4) if isinstance(v, float) else v


def _buckets(bd: Breakdown) -> dict:
    return {b: round(bd.ms_per_step(b), 4) for b in bd.buckets}


def busy_pct(bd: Breakdown) -> float:
    """Share of the step the GPU is working: kernels, copies, collectives, and its own turn-around between
    work already queued (about 1 µs a kernel, the gaps of a replayed CUDA graph), which the verdict counts as
    device time too."""
    return sum(bd.pct(b) for b in ("gpu_busy", "transfer", "communication", "device_idle"))


def analyze_parsed(trace: ParsedTrace, telemetry: dict | None = None) -> SpanReport:
    gpu = trace.has_gpu
    every = step_windows(trace)
    kept, cold = representative_steps(trace, every)
    bd_prof = breakdown(trace, kept)
    m_prof = span_metrics(trace, kept, bd_prof)
    inflation = host_inflation(trace, kept, m_prof.median_launch_us, list(host_sets(trace).data))
    paced = loader_paced(trace, kept)
    view = unprofiled_view(bd_prof, m_prof.step_ms, m_prof.data_ms_per_step, inflation, paced, telemetry)
    bd = view.breakdown
    m = replace(m_prof, step_ms=bd.total_us / bd.steps / 1e3, gpu_busy_pct=busy_pct(bd) if gpu else None)
    v = verdict(bd, gpu, view.loader_paced)
    found = findings(bd, m, gpu, v)
    ev = evidence(bd, m, gpu)
    tie = near_tie(bd, gpu, v)
    if tie is not None:
        ev.insert(1, tie[1])
    uncertainty = rng = None
    if view.low is not None:
        rng = step_range(bd_prof, bd, error_band(trace, recording(trace)), gpu, view.loader_paced)
        verdicts = sorted({verdict(b, gpu, view.loader_paced) for b in (view.low, bd, view.high)})
        unseen_workers = not paced and v != DATA_BOUND.name and worker_fed(trace, kept)
        if unseen_workers:
            verdicts = sorted({*verdicts, DATA_BOUND.name})
        uncertainty = {"gpu_busy_pct": [round(busy_pct(view.low), 2), round(busy_pct(view.high), 2)] if gpu
                       else None, "verdicts": verdicts}
        ev.insert(1, _model_line(m_prof, m, inflation, verdicts, v))
        if unseen_workers:
            ev.insert(2, WORKERS_UNSEEN)
    if cold is not None:
        found = sorted([*found, cold_start_finding(cold.steps, cold.cold_ms, cold.warm_ms, cold.module_loads,
                                                   cold.whole_window, len(every), m.step_ms)],
                       key=lambda f: f.cost_ms_per_step, reverse=True)
    device = (trace.device_name or "gpu") if gpu else "cpu"
    if view.loader_paced and v == DATA_BOUND.name:
        ev.insert(1, LOADER_PACES.format(data=bd.ms_per_step("data"), basis="the run's unprofiled steps"
                                         if view.basis == "telemetry" else "every profiled step"))
    return SpanReport(trace.worker, trace.span, trace.rank, device, v, m, bd, tuple(ev), tuple(found),
                      tuple(remedies(found)), profiled=m_prof, breakdown_profiled=bd_prof, basis=view.basis,
                      recording=recording(trace), inflation=inflation, uncertainty=uncertainty,
                      loader_paced=view.loader_paced, names=_names(trace, kept, m_prof),
                      steps_from=trace.steps_from, step_range=rng, tie=tie and tie[0])


def _names(trace: ParsedTrace, kept: list, m_prof: SpanMetrics) -> NameTimes | None:
    """The steps' time by op, kernel and range name, which only a straggler's comparison with the other
    ranks reads: computed for the trace of a rank of a job of several (its distributedInfo says so), not for a
    single process, where it would cost about 8% of the analysis of a large trace for nothing."""
    if trace.world_size is None or trace.world_size < 2:
        return None
    return name_times(trace, kept, m_prof.sync_episodes)


def _model_line(m_prof: SpanMetrics, m: SpanMetrics, inflation: Inflation, verdicts: list[str], v: str) -> str:
    busy = ""
    if m.gpu_busy_pct is not None:
        busy = f", GPU busy {m_prof.gpu_busy_pct:.0f}% as profiled, {m.gpu_busy_pct:.0f}% without"
    line = (f"profiled step {m_prof.step_ms:.2f} ms; the profiler's own host cost is about "
            f"{inflation.ms_per_step:.2f} ms per step ({inflation.low:.2f}-{inflation.high:.2f}){busy}")
    others = [x for x in verdicts if x != v]
    if others:
        line += (f"; within that uncertainty the verdict could also be {', '.join(others)}: time the step "
                 "without the profiler (CUDA events around a few hundred steps), or profile with "
                 "record_shapes=False, profile_memory=False, with_stack=False, and compare")
    return line


def analyze_selected(trace: ParsedTrace, telemetry: dict | None = None,
                     selection: StepSelection | None = None) -> SpanReport:
    """The report of a parsed trace (stream_parse.py), on the steps ``selection`` keeps (select.py). Raises
    TraceError (one line) on a trace without training steps in the selection, or one that is corrupt. Errors
    that no input check foresaw become a TraceError naming the exception, so that a corrupt trace never ends
    in a traceback."""
    return _guarded(lambda: trace, trace.worker, trace.span, telemetry, selection)


def _guarded(parse, worker: str, span: str, telemetry: dict | None, selection: StepSelection | None) -> SpanReport:
    try:
        return analyze_parsed(select(parse(), selection or StepSelection()), telemetry)
    except TraceError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise TraceError(f"{worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None

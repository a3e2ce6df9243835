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

from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace

import numpy as np
from stepscope.analysis.breakdown import Breakdown, breakdown, host_sets
from stepscope.analysis.by_name import NameTimes, name_times
from stepscope.analysis.columns import device_columns, op_columns
from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.findings import (
    Finding,
    cold_start_finding,
    evidence,
    findings,
    near_tie,
    remedies,
    verdict,
)
from stepscope.analysis.inferred_steps import FROM_PROFILER, NOTES
from stepscope.analysis.memory import (
    MemoryDevices,
    MemoryReport,
    StallFigures,
    memory_devices,
    memory_section,
    stall_figures,
    stall_finding,
)
from stepscope.analysis.metrics import SpanMetrics, span_metrics, sync_episodes, sync_figures
from stepscope.analysis.overhead import Inflation, Recording, host_inflation, recording
from stepscope.analysis.select import StepSelection, select
from stepscope.analysis.step_range import Band, StepRange, error_band, step_range
from stepscope.analysis.steps import step_windows
from stepscope.analysis.trust import representative_steps
from stepscope.analysis.unprofiled import in_process, loader_paced, unprofiled_view, worker_fed
from stepscope.analysis.verdicts import DATA_BOUND, TRANSFER_BOUND
from stepscope.analysis.vocabulary import COMMUNICATION, DATA, DEVICE_IDLE, GPU_BUSY, TRANSFER
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers

WORKERS_UNSEEN = ("a DataLoader feeds these steps from worker processes, which the trace does not show: a short "
                  "profiled window can run on batches they had prefetched, so whether they keep up without the "
                  "profiler cannot be read from here; time the wait for each batch over a few hundred unprofiled "
                  "steps (stepscope train records it as telemetry data_ms)")

LOADER_UNTIMED = ("the trace shows the step waiting {data:.2f} ms ({pct:.0f}% of the profiled step) for its data, "
                  "which the schedule did not time (no data_ms): that wait is the trace's, scaled to the measured "
                  "step; to time it on every step, wrap the loader: `for batch in stepscope.loader(loader):`")
COPY_UNTIMED = ("pageable host-to-device copies take {copy:.2f} ms ({pct:.0f}%) of the profiled step, which the "
                "schedule did not time (no copy_ms): to time them on every step, wrap the copy: "
                "`with stepscope.input_copy(): x = x.to(device, non_blocking=True)`")
DATA_DISAGREES = ("the run's unprofiled steps waited {measured:.2f} ms for each batch, the profiled steps {traced:.2f} "
                  "ms: the figures here use the measured wait")
# A measured wait and the trace's differ enough to say so from this many ms and this share of the step
DISAGREE_MS, DISAGREE_SHARE = 1.0, 0.10

LOAD_CHANGED = ("the run's unprofiled steps took {unprofiled:.2f} ms{what}, the profiled ones {profiled:.2f} ms: the "
                "profiler never makes a step faster, so the machine's load changed between them; ")
LOAD_CHANGED_GPU = ("GPU busy and the figures here are the profiled steps' less the profiler's modelled cost, not "
                    "the contradicted measured step")
LOAD_CHANGED_CPU = "the shares of the step here are the trace's own, which the step's length does not change"
# Unprofiled steps this much slower than the profiled ones (the wait for data left out where it was measured)
# contradict them: beyond the 30% a loop's steps were seen to drift on a busy host (an H100 loop's own steps
# against the same step timed alone minutes earlier) and by at least LOAD_CHANGED_MS, since a sub-millisecond
# CPU step doubles under a shared 2-core machine's hiccups and the trace handler's own background work.
LOAD_CHANGED_FACTOR, LOAD_CHANGED_MS = 1.3, 5.0

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
    memory: MemoryReport | None = None  # the profiled steps' memory (memory.py), when profile_memory was on

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
        if self.memory is not None:
            out["memory"] = self.memory.to_dict()
        return out


def _r(v):
    return round(v, 4) if isinstance(v, float) else v


def _buckets(bd: Breakdown) -> dict:
    return {b: round(bd.ms_per_step(b), 4) for b in bd.buckets}


def busy_pct(bd: Breakdown) -> float:
    """Share of the step the GPU is working: kernels, copies, collectives, and its own turn-around between
    work already queued (about 1 µs a kernel, the gaps of a replayed CUDA graph), which the verdict counts as
    device time too."""
    return sum(bd.pct(b) for b in (GPU_BUSY, TRANSFER, COMMUNICATION, DEVICE_IDLE))


@dataclass(frozen=True)
class SpanEvidence:
    """Everything a trace's report takes from its events (span_evidence), before the run's telemetry enters:
    span_report(evidence, telemetry) finishes the report from it alone. So a trace analysed once can be
    reported again with other telemetry without being read again (report/engine.py's Memo)."""
    worker: str
    span: str
    rank: int | None
    device: str  # GPU name, or "cpu"
    gpu: bool
    windows: int  # the trace's step windows, before the trust gate
    breakdown: Breakdown  # of the kept profiled steps
    metrics: SpanMetrics  # of the kept profiled steps
    inflation: Inflation
    serial: bool  # no GPU, or the batches loaded in the training process (unprofiled.in_process)
    paced: bool  # unprofiled.loader_paced
    fed: bool  # a worker-fed DataLoader (unprofiled.worker_fed), where it does not pace the step
    recording: Recording
    band: Band  # the overhead model's error band (step_range.error_band)
    pageable: bool  # pageable input copies, where the transfers are a share the verdict counts
    stalls: StallFigures | None  # the allocator calls' cost (memory.stall_figures)
    cold: object  # the trust gate's cold steps (trust.representative_steps), or None
    names: NameTimes | None
    steps_from: str
    memory: MemoryDevices


def analyze_parsed(trace: ParsedTrace, telemetry: dict | None = None, processes: int = 1) -> SpanReport:
    """The report of a parsed trace. ``processes``: how many the worker policy lets this analysis use (the
    parse's ``parts``); with more than one, a forked helper makes the memory section meanwhile."""
    return span_report(span_evidence(trace, processes), telemetry)


def span_evidence(trace: ParsedTrace, processes: int = 1) -> SpanEvidence:
    """What the report of ``trace`` takes from its events (SpanEvidence). ``processes``: as analyze_parsed."""
    every = step_windows(trace)
    kept, cold = representative_steps(trace, every)
    workers = Workers.local(processes) if processes > 1 and trace.memory else Workers.inline()
    if workers.forks:
        op_columns(trace)  # both processes read it: made once, before the fork, and inherited
    with workers.beside(_beside, trace, kept) as later:
        def helped() -> MemoryDevices:
            try:
                return later.result()
            except BrokenProcessPool:  # the helper died (killed, out of memory): made here instead
                return _beside(trace, kept)

        return _evidence_kept(trace, every, kept, cold, helped)


def _beside(trace: ParsedTrace, kept: list) -> MemoryDevices:
    """What a helper makes while this process makes the rest of the evidence (or this process, last, where
    there is no helper): the memory section's devices, a pass over the trace that nothing else waits for and
    about as long as the rest of the evidence on a large GPU trace (which includes its host syncs)."""
    return memory_devices(trace, kept)


def _evidence_kept(trace: ParsedTrace, every: list, kept: list, cold,
                   helped: Callable[[], MemoryDevices]) -> SpanEvidence:
    """span_evidence on the steps ``kept``; ``helped()`` gives ``_beside``'s, asked for last."""
    gpu = trace.has_gpu
    bd_prof = breakdown(trace, kept)
    m_prof = span_metrics(trace, kept, bd_prof, episodes=[])  # its sync figures set below
    inflation = host_inflation(trace, kept, m_prof.median_launch_us, list(host_sets(trace).data))
    serial = not gpu or in_process(trace, kept)
    paced = not serial and loader_paced(trace, kept)
    rec = recording(trace)
    pageable = (gpu and bd_prof.pct(TRANSFER) >= TRANSFER_BOUND.causes[0].threshold_pct
                and any("Pageable" in trace.device[i].name
                        for i in np.flatnonzero(device_columns(trace).is_copy).tolist()))
    fed, band, stalls = not paced and worker_fed(trace, kept), error_band(trace, rec), stall_figures(trace, kept)
    episodes = sync_episodes(trace) if gpu else []
    memory = helped()
    if gpu:
        m_prof = replace(m_prof, **sync_figures(kept, episodes))
    return SpanEvidence(trace.worker, trace.span, trace.rank, (trace.device_name or "gpu") if gpu else "cpu", gpu,
                        len(every), bd_prof, m_prof, inflation, serial, paced, fed, rec, band, pageable, stalls,
                        cold, _names(trace, kept, m_prof), trace.steps_from, memory)


def span_report(e: SpanEvidence, telemetry: dict | None = None) -> SpanReport:
    """The report of a trace from its evidence (span_evidence) and the run's telemetry (None: the overhead
    model stands in for the unprofiled steps)."""
    gpu, bd_prof, m_prof, inflation = e.gpu, e.breakdown, e.metrics, e.inflation
    measured = telemetry  # the allocator's counters stand whatever the step's figures say
    changed = _load_changed(telemetry, m_prof, gpu) if telemetry else None
    if changed is not None and gpu:  # a CPU trace's shares do not depend on the step's length
        telemetry = None
    view = unprofiled_view(bd_prof, m_prof.step_ms, m_prof.data_ms_per_step, inflation, e.paced, telemetry, e.serial)
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
        rng = step_range(bd_prof, bd, e.band, gpu, view.loader_paced)
        verdicts = sorted({verdict(b, gpu, view.loader_paced) for b in (view.low, bd, view.high)})
        unseen_workers = v != DATA_BOUND.name and e.fed
        if unseen_workers:
            verdicts = sorted({*verdicts, DATA_BOUND.name})
        uncertainty = {"gpu_busy_pct": [round(busy_pct(view.low), 2), round(busy_pct(view.high), 2)] if gpu
                       else None, "verdicts": verdicts}
        ev.insert(1, _model_line(m_prof, m, inflation, verdicts, v))
        if unseen_workers:
            ev.insert(2, WORKERS_UNSEEN)
    stalls = stall_finding(e.stalls, m.step_ms)  # allocator churn, where it costs the step
    if stalls is not None:
        found = sorted([*found, stalls], key=lambda f: f.cost_ms_per_step, reverse=True)
    cold = e.cold
    if cold is not None:
        found = sorted([*found, cold_start_finding(cold.steps, cold.cold_ms, cold.warm_ms, cold.module_loads,
                                                   cold.whole_window, e.windows, m.step_ms)],
                       key=lambda f: f.cost_ms_per_step, reverse=True)
    if changed is not None:
        ev.insert(1, changed)
    at = 2 if tie is not None else 1  # the near tie stays the second line
    ev[at:at] = _telemetry_lines(e.pageable, telemetry, view.data_measured, bd_prof, m_prof) if view.basis == "telemetry" else []
    if view.loader_paced and v == DATA_BOUND.name:
        ev.insert(1, LOADER_PACES.format(data=bd.ms_per_step(DATA), basis="the run's unprofiled steps"
                                         if view.basis == "telemetry" else "every profiled step"))
    return SpanReport(e.worker, e.span, e.rank, e.device, v, m, bd, tuple(ev), tuple(found),
                      tuple(remedies(found)), profiled=m_prof, breakdown_profiled=bd_prof, basis=view.basis,
                      recording=e.recording, inflation=inflation, uncertainty=uncertainty,
                      loader_paced=view.loader_paced, names=e.names,
                      steps_from=e.steps_from, step_range=rng, tie=tie and tie[0],
                      memory=memory_section(e.memory, measured))


def _load_changed(telemetry: dict, m_prof: SpanMetrics, gpu: bool) -> str | None:
    """The evidence line when the run's unprofiled steps contradict the profiled ones (LOAD_CHANGED_FACTOR),
    else None. The whole steps must contradict each other, and where the wait for data was measured, the
    steps without it too: workers that fell behind unprofiled and had batches ready while the profiler
    recorded make the unprofiled steps slower for a reason of their own, and a profiled "wait" can hold work
    the measured one leaves out (a pageable copy made while the loader's range is open)."""
    def slower(step: float, profiled: float) -> bool:
        return profiled > 0 and step > max(LOAD_CHANGED_FACTOR * profiled, profiled + LOAD_CHANGED_MS)

    step, profiled = telemetry.get("step_ms") or 0.0, m_prof.step_ms
    if not slower(step, profiled):
        return None
    what = ""
    if "data_ms" in telemetry:
        step, profiled = step - telemetry["data_ms"], profiled - m_prof.data_ms_per_step
        what = " besides the wait for data"
        if not slower(step, profiled):
            return None
    return LOAD_CHANGED.format(unprofiled=step, profiled=profiled, what=what) + (LOAD_CHANGED_GPU if gpu
                                                                                 else LOAD_CHANGED_CPU)


def _telemetry_lines(pageable: bool, telemetry: dict, data_measured: bool, bd_prof: Breakdown,
                     m_prof: SpanMetrics) -> list[str]:
    """What the run's measured steps leave to the trace, and where the two disagree: a wait for data or a
    pageable input copy that the trace shows on the step's critical path but the schedule did not time
    (stepscope.loader, stepscope.input_copy not used), and a measured wait far from the trace's."""
    lines = []
    data_pct = bd_prof.pct(DATA)
    if not data_measured and data_pct >= DATA_BOUND.causes[0].threshold_pct:
        lines.append(LOADER_UNTIMED.format(data=bd_prof.ms_per_step(DATA), pct=data_pct))
    elif data_measured:
        measured, traced = telemetry["data_ms"], m_prof.data_ms_per_step
        if abs(measured - traced) >= max(DISAGREE_MS, DISAGREE_SHARE * telemetry["step_ms"]):
            lines.append(DATA_DISAGREES.format(measured=measured, traced=traced))
    if "copy_ms" not in telemetry and pageable:  # pageable: SpanEvidence's, a share the verdict counts
        lines.append(COPY_UNTIMED.format(copy=bd_prof.ms_per_step(TRANSFER), pct=bd_prof.pct(TRANSFER)))
    return lines


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
                     selection: StepSelection | None = None, processes: int = 1) -> SpanReport:
    """The report of a parsed trace (stream_parse.py), on the steps ``selection`` keeps (select.py). Raises
    TraceError (one line) on a trace without training steps in the selection, or one that is corrupt. Errors
    that no input check foresaw become a TraceError naming the exception, so that a corrupt trace never ends
    in a traceback."""
    return report_guarded(evidence_selected(trace, selection, processes), telemetry)


def evidence_selected(trace: ParsedTrace, selection: StepSelection | None = None,
                      processes: int = 1) -> SpanEvidence:
    """analyze_selected's first half: the trace's SpanEvidence on the steps ``selection`` keeps, its errors
    as analyze_selected's."""
    return _guarded(trace.worker, trace.span,
                    lambda: span_evidence(select(trace, selection or StepSelection()), processes))


def report_guarded(e: SpanEvidence, telemetry: dict | None = None) -> SpanReport:
    """analyze_selected's second half: span_report, its errors as analyze_selected's."""
    return _guarded(e.worker, e.span, lambda: span_report(e, telemetry))


def _guarded(worker: str, span: str, make: Callable):
    try:
        return make()
    except TraceError:
        raise
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise TraceError(f"{worker}.{span}: cannot analyse this trace ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None

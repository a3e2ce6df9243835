"""The verdict on one (worker, span), the evidence behind it, and findings with their cost and remedies.

The verdict (exactly one per span) is taken from the step as it runs without the profiler (unprofiled.py), by
the rules of the verdict registry (verdicts.py), which also holds each verdict's findings, thresholds and
remedies: the GPU busy for most of the step names a device verdict; otherwise a DataLoader that paces the
step does, and else the largest idle cause, so a verdict never rests on a bucket that a bigger one outweighs.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.metrics import SpanMetrics
from stepscope.analysis.verdicts import (
    BIGGER_BATCH,
    DEVICE_TIE,
    FUSE,
    GPU_BOUND_PCT,
    REGISTRY,
    VERDICTS,
    WARM_UP_FIRST,
    Verdict,
    by_name,
    cause_of,
    primary_cause,
    threshold_pct,
)
from stepscope.analysis.vocabulary import (
    COLD_START,
    COMMUNICATION,
    CPU_COMPUTE,
    CPU_OPS,
    DATA,
    DATA_LOADING,
    DEVICE_IDLE,
    GPU_BUSY,
    GPU_COMPUTE,
    HOST_SYNC,
    HOST_WORK,
    LAUNCH,
    LAUNCH_OVERHEAD,
    OTHER_HOST,
    SYNC,
    TRANSFER,
    bucket,
)

__all__ = ["GPU_BOUND_PCT", "VERDICTS", "Finding", "cold_start_finding", "evidence", "findings", "near_tie",
           "remedies", "verdict"]


@dataclass(frozen=True)
class Finding:
    id: str
    text: str
    cost_ms_per_step: float
    remedies: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "cost_ms_per_step": round(self.cost_ms_per_step, 4),
                "remedies": list(self.remedies)}


def verdict(bd: Breakdown, gpu: bool, loader_paces: bool = False) -> str:
    """The bucket that bounds the step. A GPU busy for at least GPU_BOUND_PCT of it bounds it (the device
    verdict with the larger share); else a DataLoader that paces the step (`loader_paces`, unprofiled.py)
    does, since whatever else is made faster the host would only wait longer for its batch; else the
    largest host-side cause. Ties go to the verdict listed first in the registry."""
    kinds = [v for v in REGISTRY if v.applies(gpu)]
    device = {v.name: _share_pct(bd, v) for v in kinds if v.kind == "device"}
    if device and sum(device.values()) >= GPU_BOUND_PCT:
        return max(device, key=device.get)
    paced = [v for v in kinds if v.paces]
    if loader_paces and any(bd.buckets[b] > 0 for v in paced for b in v.buckets):
        return paced[0].name
    causes = {v.name: sum(bd.buckets.get(b, 0.0) for b in v.buckets) for v in kinds if v.kind == "host"}
    return max(causes, key=causes.get)


def near_tie(bd: Breakdown, gpu: bool, v: str) -> tuple[str, str] | None:
    """(the other device verdict, the evidence line) when ``v`` is a device verdict and the other's share of
    the step is at least DEVICE_TIE of its own: the two causes are too close for the larger to be known."""
    if by_name(v).kind != "device":
        return None
    shares = {x.name: _share_pct(bd, x) for x in REGISTRY if x.applies(gpu) and x.kind == "device"}
    other = max((n for n in shares if n != v), key=shares.get, default=None)
    if other is None or shares[other] <= 0 or shares[other] < DEVICE_TIE * shares[v]:
        return None
    ms = {n: sum(bd.ms_per_step(b) for b in by_name(n).buckets) for n in (v, other)}
    return other, (f"near tie: {other} takes {ms[other]:.2f} ms a step against {v}'s {ms[v]:.2f} ms, within "
                   f"{100 * (1 - DEVICE_TIE):.0f}% of each other, as much as a pageable copy's time moves within "
                   f"one run: the verdict could as well be {other}, and removing either cause leaves the other "
                   "bounding the step")


def _share_pct(bd: Breakdown, v: Verdict) -> float:
    return sum(bd.pct(b) for b in v.buckets)


def evidence(bd: Breakdown, m: SpanMetrics, gpu: bool) -> list[str]:
    """The numbers behind the verdict, largest share first: one line per time bucket."""
    order = sorted(bd.buckets, key=bd.buckets.get, reverse=True)
    lines = [f"step {m.step_ms:.2f} ms without the profiler ({m.steps} profiled steps analysed)"]
    lines += [f"{bd.pct(b):.1f}% ({bd.ms_per_step(b):.2f} ms) {bucket(b).label_on(gpu)}"
              for b in order if bd.buckets[b] > 0]
    return lines


def findings(bd: Breakdown, m: SpanMetrics, gpu: bool, the_verdict: str) -> list[Finding]:
    """Findings worth acting on (each above a share of the step, or the one behind the verdict), costliest
    first."""
    candidates = _gpu_candidates(bd, m) if gpu else _cpu_candidates(bd, m)
    primary = primary_cause(by_name(the_verdict), {f.id: f.cost_ms_per_step for f, _ in candidates}).finding
    out = [f for f, share in candidates if share >= threshold_pct(f.id) or f.id == primary]
    return sorted(out, key=lambda f: f.cost_ms_per_step, reverse=True)


def remedies(found: list[Finding]) -> list[str]:
    out: list[str] = []
    for f in sorted(found, key=lambda f: f.cost_ms_per_step, reverse=True):
        out += [r for r in f.remedies if r not in out]
    return out


def _gpu_candidates(bd: Breakdown, m: SpanMetrics) -> list[tuple[Finding, float]]:
    out = []
    k, kd, ld = m.kernels_per_step, m.median_kernel_us, m.median_launch_us
    kernels = f"{k:.0f} kernels per step"
    if kd is not None and ld is not None:
        rel = "shorter than" if kd < 0.9 * ld else "about as long as" if kd <= 1.1 * ld else "vs"
        kernels += f", median {kd:.1f} µs, {rel} their launch call ({ld:.1f} µs)"
    if m.host_us_per_kernel is not None:
        kernels += f"; the host spends {m.host_us_per_kernel:.1f} µs per kernel"
    out.append((Finding(LAUNCH_OVERHEAD,
                        f"{kernels}; GPU idle {bd.ms_per_step(LAUNCH):.2f} ms per step "
                        f"({bd.pct(LAUNCH):.0f}%) while the host dispatches ops and launches kernels",
                        bd.ms_per_step(LAUNCH), _remedies(LAUNCH_OVERHEAD)), bd.pct(LAUNCH)))
    if m.syncs_per_step:
        names = sorted({e.name for e in m.sync_episodes})
        out.append((Finding(HOST_SYNC,
                            f"{m.syncs_per_step:g} host sync{'' if m.syncs_per_step == 1 else 's'} per step, "
                            f"{m.sync_ms_per_step:.2f} ms blocked "
                            f"({', '.join(names)}); GPU idle {bd.ms_per_step(SYNC):.2f} ms per step "
                            "around them",
                            max(bd.ms_per_step(SYNC), m.sync_ms_per_step), _remedies(HOST_SYNC)),
                    bd.pct(SYNC)))
    out.append((_data_finding(bd, m, "the GPU idles", True), bd.pct(DATA)))
    out.append((Finding(HOST_WORK,
                        f"GPU idle {bd.ms_per_step(OTHER_HOST):.2f} ms per step "
                        f"({bd.pct(OTHER_HOST):.0f}%) "
                        "while the host runs code outside torch ops (metrics, logging, a framework's bookkeeping; "
                        "without with_stack, also the model's own Python between ops)",
                        bd.ms_per_step(OTHER_HOST), _remedies(HOST_WORK)), bd.pct(OTHER_HOST)))
    if m.memcpy_ms_per_step:
        out.append((Finding(TRANSFER,
                            f"host<->device copies {m.memcpy_ms_per_step:.2f} ms per step "
                            f"({m.memcpy_per_step:.0f} copies), {bd.ms_per_step(TRANSFER):.2f} ms of it "
                            f"({bd.pct(TRANSFER):.0f}% of the step) with no kernel running",
                            bd.ms_per_step(TRANSFER), _remedies(TRANSFER)),
                    bd.pct(TRANSFER)))
    out.append((Finding(DEVICE_IDLE,
                        f"GPU idle {bd.ms_per_step(DEVICE_IDLE):.2f} ms per step "
                        f"({bd.pct(DEVICE_IDLE):.0f}%) "
                        "between kernels that were already queued (dependencies, many tiny kernels)",
                        bd.ms_per_step(DEVICE_IDLE), (FUSE, BIGGER_BATCH)), bd.pct(DEVICE_IDLE)))
    top = f"; top kernel {_short(m.top[0].name)} ({m.top[0].pct:.0f}% of kernel time)" if m.top else ""
    out.append((Finding(GPU_COMPUTE, f"GPU busy {m.gpu_busy_pct:.0f}% of the step{top}",
                        bd.ms_per_step(GPU_BUSY), _remedies(GPU_COMPUTE)), bd.pct(GPU_BUSY)))
    out.append((_comm_finding(bd, m), bd.pct(COMMUNICATION)))
    return out


def _cpu_candidates(bd: Breakdown, m: SpanMetrics) -> list[tuple[Finding, float]]:
    top = f"; top op {m.top[0].name} ({m.top[0].pct:.0f}% of op self time)" if m.top else ""
    return [
        (Finding(CPU_COMPUTE, f"CPU inside torch ops {bd.pct(CPU_OPS):.0f}% of the step "
                                f"({bd.ms_per_step(CPU_OPS):.2f} ms){top}",
                 bd.ms_per_step(CPU_OPS), _remedies(CPU_COMPUTE, gpu=False)), bd.pct(CPU_OPS)),
        (_data_finding(bd, m, "the step waits", False), bd.pct(DATA)),
        (Finding(HOST_WORK, f"{bd.ms_per_step(OTHER_HOST):.2f} ms per step ({bd.pct(OTHER_HOST):.0f}%) "
                              "outside torch ops (Python, sleeping, waiting on a lock)",
                 bd.ms_per_step(OTHER_HOST), _remedies(HOST_WORK, gpu=False)), bd.pct(OTHER_HOST)),
        (_comm_finding(bd, m), bd.pct(COMMUNICATION)),
    ]


def _data_finding(bd: Breakdown, m: SpanMetrics, who_waits: str, gpu: bool) -> Finding:
    share = 100.0 * m.data_ms_per_step / m.step_ms if m.step_ms > 0 else 0.0  # a window of zero-length steps
    return Finding(DATA_LOADING,
                   f"data loading {m.data_ms_per_step:.2f} ms per step "
                   f"({share:.0f}% of step); {who_waits} "
                   f"{bd.ms_per_step(DATA):.2f} ms per step for input",
                   bd.ms_per_step(DATA), _remedies(DATA_LOADING, gpu))


def _comm_finding(bd: Breakdown, m: SpanMetrics) -> Finding:
    hidden = 100.0 * m.overlap_ms_per_step / m.comm_ms_per_step if m.comm_ms_per_step else 0.0
    return Finding(COMMUNICATION,
                   f"communication {m.comm_ms_per_step:.2f} ms per step, {hidden:.0f}% overlapped with "
                   f"compute; {bd.ms_per_step(COMMUNICATION):.2f} ms per step "
                   f"({bd.pct(COMMUNICATION):.0f}%) exposed",
                   bd.ms_per_step(COMMUNICATION), _remedies(COMMUNICATION))


def _remedies(finding: str, gpu: bool = True) -> tuple[str, ...]:
    return cause_of(finding).remedies_on(gpu)


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def cold_start_finding(steps: tuple[int, ...], cold_ms: float, warm_ms: float, module_loads: int,
                       whole_window: bool, window_steps: int, step_ms: float) -> Finding:
    """Steps that do not represent the run (trust.py): named, costed, and left out of the verdict. The cost is
    what the cold steps add to the mean step of the window's ``window_steps`` steps, and never more than the
    step the verdict describes (``step_ms``), which they are left out of."""
    loads = f", {module_loads} CUDA module loads" if module_loads else ""
    if whole_window:
        text = (f"every profiled step looks like cold start ({cold_ms:.1f} ms per step{loads}): the window "
                "holds the process's first CUDA work, so the verdict below describes start-up, not training")
    else:
        names = ", ".join(f"#{s}" for s in steps)
        text = (f"cold start: step{'s' if len(steps) > 1 else ''} {names} took {cold_ms:.1f} ms vs "
                f"{warm_ms:.2f} ms for the others{loads} (CUDA context, lazy module loading, cuDNN autotuning); "
                "left out of the verdict")
    cost = (cold_ms - warm_ms) * len(steps) / max(window_steps, len(steps))
    return Finding(COLD_START, text, max(0.0, min(cost, step_ms)), (WARM_UP_FIRST,))

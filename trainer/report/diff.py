"""Two runs compared, aware of run-to-run noise: is B's step really slower or faster than A's?

    d = compare_runs("logs/before", "logs/after", "before", "after")     # two paths (analysed through the door)
    d = compare_runs(report_a, report_b)      # two Reports in hand (made with tables=True to compare operators)
    d["summary"]    # "after is 1.93x the step of before, slower (95% CI ...)" / "no significant change ..."

The step-time ratio is B's mean log step over A's, with an interval that holds two kinds of noise:

- within a run, the drift of its steps: each run's steps are cut into up to BLOCKS contiguous blocks and
  each block counts by its median, so a burst of slow steps (another process on the core) is one block's
  worth of evidence, not as many independent samples as it has steps;
- between runs, the drift of the machine: two runs of one configuration, back to back, differ by more than
  their steps' spread says, because the load of the machine changes between them. A run's level is taken
  as uncertain by as much as its own blocks wander (the standard deviation of its blocks' log medians: on a
  busy machine they wander far, and the next run may sit anywhere in that range), and by no less than
  ``run_noise`` (RUN_NOISE by default, ``--run-noise``), for the drift that a run too short to show it
  still meets. Both were measured on same-configuration pairs: BENCHMARKS.md, "stepscope diff: false and
  true alarms".

The interval is Welch's on the blocks' log medians, widened by each run's level term (it adds no degrees of
freedom). When it holds 1.0 the runs do not differ beyond their noise. The per-step times
are Measured.step_ms (measure.py): the unprofiled timed steps of run.json when both runs have them, else each
run's traced steps. The rest (verdicts, busy, breakdown, operators from both runs' full tables, and the
configurations' differences) is the two runs side by side.

Where a run records that other processes slowed it (they used more than OTHERS_MAX_PCT of all CPUs while it ran,
and one of its busy threads waited for a CPU more than WAITED_MAX_PCT of the time it was ready to run: run.json's
``others_cpu_pct`` and ``waited_cpu_pct``, capture/machine_load.py), the interval is widened by as much as that
waiting could have slowed its steps, 1 / (1 - waited): on a shared machine the difference between such runs is
largely the neighbours' load, which no interval drawn from the runs' own steps can hold. A change larger than
that still stands; ``low`` and ``high`` are then the widened ends, and the summary says why. Torch-free.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from stepscope.analysis.report import Report
from stepscope.report.measure import TRACED, UNPROFILED, Measured, measure_path, measured
from stepscope.report.summary import run_figures
from stepscope.trace.workers import Workers

CONFIDENCE = 0.95
TOP_CHANGED = 10
BLOCKS = 8  # blocks a run's steps are cut into, at most
BLOCK_STEPS = 3  # steps a block holds, at least (fewer steps: each step is its own block)
# the least sd of one run's level between runs of one configuration: 12%, measured between 21 runs of one
# configuration back to back on an idle 2-core VM (BENCHMARKS.md, "stepscope diff: false and true alarms")
RUN_NOISE = 0.12
# a run whose busiest-waiting thread waited for a CPU more than this share of the time it was ready to run, while
# other processes used more than this share of all CPUs (run.json's waited_cpu_pct, others_cpu_pct), was slowed by
# them: the interval is widened by as much as that waiting could have slowed its steps
OTHERS_MAX_PCT = 10.0
WAITED_MAX_PCT = 10.0
MIN_WAIT_FACTOR = 0.001  # a thread that waited all the time it was ready bounds nothing: 1000x at most


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (p > 0.5) for ``df`` degrees of freedom, by bisection on its CDF, which is
    integrated numerically (numpy only; exact to about 1e-6 for df >= 1)."""
    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 4001)
        log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
        density = np.exp(log_c - (df + 1) / 2 * np.log1p(grid * grid / df))
        return 0.5 + float(np.trapezoid(density, grid))
    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def blocks(steps: list[float]) -> np.ndarray:
    """The log of each block's median step: ``steps`` cut into min(BLOCKS, n // BLOCK_STEPS) contiguous
    blocks, or every step alone when there are too few for two blocks."""
    x = np.asarray(steps, float)
    k = min(BLOCKS, len(x) // BLOCK_STEPS)
    if k < 2:
        return np.log(x)
    return np.log([np.median(part) for part in np.array_split(x, k)])


def ratio_interval(a: list[float], b: list[float], confidence: float = CONFIDENCE,
                   run_noise: float = RUN_NOISE) -> tuple[float, float, float]:
    """(ratio, low, high): B's step over A's (the exp of the difference of their blocks' mean log medians)
    and its interval: Welch on the blocks, plus each run's level variance, the larger of its blocks' own
    variance and ``run_noise`` squared. Needs 2 steps each."""
    la, lb = blocks(a), blocks(b)
    diff = lb.mean() - la.mean()
    va, vb = la.var(ddof=1) / len(la), lb.var(ddof=1) / len(lb)
    floor = run_noise * run_noise
    between = max(floor, la.var(ddof=1)) + max(floor, lb.var(ddof=1)) if run_noise > 0 else 0.0
    se = math.sqrt(va + vb + between)
    if se == 0.0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    spread = va * va / (len(la) - 1) + vb * vb / (len(lb) - 1)
    df = (va + vb + between) ** 2 / spread if spread > 0 else math.inf
    q = t_quantile(0.5 + confidence / 2, min(df, 1e6))
    return math.exp(diff), math.exp(diff - q * se), math.exp(diff + q * se)


def slowed_by_others(m: Measured) -> bool:
    """The run's threads waited for CPUs that other processes held (both beyond their bounds, above)."""
    return (m.others_pct is not None and m.waited_pct is not None and m.others_pct > OTHERS_MAX_PCT
            and m.waited_pct > WAITED_MAX_PCT)


def wait_factor(m: Measured) -> float:
    """1 / the most that waiting for CPUs could have slowed the run's steps: 1 - waited for a run that other
    processes slowed (a wait recorded as 99.9% or more counts as 99.9%: at most 1000x), else 1."""
    return max(1 - m.waited_pct / 100, MIN_WAIT_FACTOR) if slowed_by_others(m) else 1.0


def config_changes(a: dict, b: dict) -> list[dict]:
    """The keys of two runs' setups (Measured.setup) whose values differ, in A's order then B's."""
    keys = list(dict.fromkeys([*a, *b]))
    return [{"key": k, "a": a.get(k), "b": b.get(k)} for k in keys if a.get(k) != b.get(k)] if a and b else []


def same_source(a: Measured, b: Measured) -> tuple[list[float], list[float], str]:
    """The two runs' step times measured alike: unprofiled when both have them, else traced."""
    if a.source == b.source == UNPROFILED:
        return a.step_ms, b.step_ms, UNPROFILED
    return a.traced_ms, b.traced_ms, TRACED


def _side(m: Measured, name: str, steps: list[float]) -> dict:
    fig = run_figures(m.report)
    return {"run": name, "verdict": fig["verdict"], "step_ms": fig["step_ms"],
            "profiled_step_ms": fig["profiled_step_ms"], "gpu_busy_pct": fig["gpu_busy_pct"],
            "breakdown_ms": fig["breakdown_ms"], "steps": len(steps),
            "mean_step_ms": float(np.mean(steps)) if steps else None}


Run = Measured | Report | str | os.PathLike


def as_measured(run: Run, workers: Workers | None = None) -> Measured:
    """A run to compare: a Measured as it is; a Report with its run folder's run.json (``measured``); a path
    through the door (``measure_path``, parsed where ``workers`` says)."""
    if isinstance(run, Measured):
        return run
    if isinstance(run, Report):
        return measured(run, Path(run.run_dir))
    return measure_path(run, workers)


def compare_runs(a: Run, b: Run, name_a: str = "A", name_b: str = "B",
                 confidence: float = CONFIDENCE, run_noise: float = RUN_NOISE, workers: Workers | None = None
                 ) -> dict:
    """B against A (module docstring); each a Report, a path or a Measured (``as_measured``)."""
    a, b = as_measured(a, workers), as_measured(b, workers)
    steps_a, steps_b, source = same_source(a, b)
    out = {"a": _side(a, name_a, steps_a), "b": _side(b, name_b, steps_b), "source": source,
           "confidence": confidence, "run_noise": run_noise,
           "config_changes": config_changes(a.setup, b.setup),
           "cpu_sharing": {side: {"others_cpu_pct": m.others_pct, "waited_cpu_pct": m.waited_pct,
                                  "slowed_by_others": slowed_by_others(m)} for side, m in (("a", a), ("b", b))}}
    if len(steps_a) < 2 or len(steps_b) < 2:
        out.update(ratio=None, low=None, high=None, significant=False,
                   summary=f"too few steps to compare ({len(steps_a)} and {len(steps_b)}; 2 each at least)")
    else:
        ratio, low, high = ratio_interval(steps_a, steps_b, confidence, run_noise)
        significant = not low <= 1.0 <= high
        ci = (f"{confidence * 100:g}% CI {low:.3f}x-{high:.3f}x, {len(steps_a)} vs {len(steps_b)} steps, "
              f"run-to-run noise {run_noise:.0%}")
        loaded = [(n, m) for n, m in ((name_a, a), (name_b, b)) if slowed_by_others(m)]
        if loaded:
            # B's steps may be up to 1 / (1 - waited) slower than its work (the ratio lower), A's likewise
            low *= wait_factor(b)
            high /= wait_factor(a)
            significant = not low <= 1.0 <= high
            said = "; ".join(f"while {n} ran, other processes used {m.others_pct:.0f}% of all CPUs and one of its "
                             f"threads waited for a CPU {m.waited_pct:.0f}% of the time it was ready" for n, m in loaded)
            ci += f"; {said}: allowing for that, {low:.3f}x-{high:.3f}x"
        if not significant:
            summary = f"no significant change: the step of {name_b} over {name_a} is {ratio:.3f}x ({ci})"
        else:
            way = "slower" if ratio > 1 else "faster"
            summary = f"{name_b} is {ratio:.3f}x the step of {name_a}, {way} ({ci})"
        out.update(ratio=ratio, low=low, high=high, significant=significant, summary=summary,
                   slowed_by_others=bool(loaded))
    buckets = list(dict.fromkeys([*out["a"]["breakdown_ms"], *out["b"]["breakdown_ms"]]))
    both = out["a"]["breakdown_ms"] and out["b"]["breakdown_ms"]  # a run without a trace has none
    out["breakdown"] = [{"bucket": k, "a_ms": out["a"]["breakdown_ms"].get(k, 0.0),
                         "b_ms": out["b"]["breakdown_ms"].get(k, 0.0)} for k in buckets] if both else []
    # full tables: a name missing from one is an operator that run never ran (0 ms), not one outside a top 5;
    # a run without a trace (or a Measured from before the tables) has none, and then nothing is compared
    ops_a, ops_b = a.ops_ms, b.ops_ms
    changed = ([{"name": n, "a_ms": ops_a.get(n, 0.0), "b_ms": ops_b.get(n, 0.0),
                 "delta_ms": ops_b.get(n, 0.0) - ops_a.get(n, 0.0)} for n in {*ops_a, *ops_b}]
               if ops_a and ops_b else [])
    changed.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    out["ops"] = changed[:TOP_CHANGED]
    memory = memory_delta(a.report, b.report)
    if memory is not None:
        out["memory"] = memory
    return out


def _memory_side(report: dict) -> dict | None:
    """A run's largest peaks and smallest headroom over its traces' GPUs (its CPU on a CPU run), and the
    spread of its profiled steps' peaks (the noise a difference must exceed)."""
    devs = [d for s in report.get("spans", []) if s.get("memory") for d in s["memory"]["devices"]]
    devs = [d for d in devs if d["device"] != "cpu"] or devs
    if not devs:
        return None
    peaks = [st["peak_allocated_gib"] for d in devs for st in d["steps"]]
    headroom = [d["headroom_pct"] for d in devs if d.get("headroom_pct") is not None]
    return {"peak_allocated_gib": max(d["peak_allocated_gib"] for d in devs),
            "peak_reserved_gib": max(d["peak_reserved_gib"] for d in devs),
            "headroom_pct": min(headroom) if headroom else None, "step_spread_gib": max(peaks) - min(peaks)}


def memory_delta(report_a: dict, report_b: dict) -> dict | None:
    """B's memory against A's: the peak allocated and reserved and the headroom, each B minus A; the noise is
    the larger spread of either run's step peaks, and the peak's change is significant beyond it. None unless
    both runs have a memory section."""
    a, b = _memory_side(report_a), _memory_side(report_b)
    if a is None or b is None:
        return None
    delta = b["peak_allocated_gib"] - a["peak_allocated_gib"]
    noise = max(a["step_spread_gib"], b["step_spread_gib"])
    return {"a": a, "b": b, "peak_allocated_delta_gib": round(delta, 4),
            "peak_reserved_delta_gib": round(b["peak_reserved_gib"] - a["peak_reserved_gib"], 4),
            "headroom_delta_pct": None if a["headroom_pct"] is None or b["headroom_pct"] is None
            else round(b["headroom_pct"] - a["headroom_pct"], 4),
            "noise_gib": round(noise, 4), "significant": abs(delta) > noise}

"""Two runs compared, aware of run-to-run noise: is B's step really slower or faster than A's?

    d = compare_runs("logs/before", "logs/after", "before", "after")     # two paths (analysed through the door)
    d = compare_runs(report_a, report_b)      # two Reports in hand (made with tables=True to compare operators)
    d = compare_sides(["logs/a1", "logs/a2", "logs/a3"], ["logs/b1", "logs/b2", "logs/b3"])   # repeated runs
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
freedom). When it holds 1.0 the runs do not differ beyond their noise.

With several runs of a side (``compare_sides``; ``stepscope diff A1 A2 A3 --vs B1 B2 B3``) the drift between
runs is measured instead of assumed: each run counts once, by its level (the mean of its blocks' log
medians), and the interval is Welch's on the two sides' levels (``levels_interval``; a side of one run takes
the other side's spread, Student's with that side's degrees of freedom). ``run_noise`` and the widening for
other processes' load are then not used: the runs' own spread holds both, as long as the two sides' runs
were made alike (alternated on one machine). On the 2-core VM, runs of one configuration drifted by about 10%
(sd of the level) however long they were, so one run a side cannot tell a 20% change from that drift;
four a side can (BENCHMARKS.md, "Several runs a side"). The per-step times
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
    """Student's t quantile (p > 0.5) for ``df`` degrees of freedom: the density integrated once on a fine
    grid (trapezoids) up to a bound past the quantile, and the CDF inverted by interpolation (numpy only;
    exact to about 1e-6 for df >= 1)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(grid: np.ndarray) -> np.ndarray:  # at every point of ``grid`` (0 first, evenly spaced)
        density = np.exp(log_c - (df + 1) / 2 * np.log1p(grid * grid / df))
        steps = (density[1:] + density[:-1]) * (grid[1] - grid[0]) / 2
        return 0.5 + np.concatenate(([0.0], np.cumsum(steps)))

    hi = 1.0
    while cdf(np.linspace(0.0, hi, 2001))[-1] < p:
        hi *= 2
    grid = np.linspace(0.0, hi, 20_001)
    return float(np.interp(p, cdf(grid), grid))


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


def level(steps: list[float]) -> float:
    """A run's level: the mean of its blocks' log medians (``blocks``), what a side of several runs
    averages."""
    return float(blocks(steps).mean())


def levels_interval(la: list[float], lb: list[float], confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float]:
    """(ratio, low, high) from each run's level on the two sides (``level``), each run one sample: Welch's
    interval when both sides have two runs or more; when one side has a single run, it is taken to drift as
    much as the other side's runs do (Student's, with that side's degrees of freedom). Needs three runs in all,
    two of them on one side."""
    a, b = np.asarray(la, float), np.asarray(lb, float)
    if max(len(a), len(b)) < 2:
        raise ValueError("levels_interval needs two runs on one side at least")
    diff = b.mean() - a.mean()
    if len(a) >= 2 and len(b) >= 2:
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        spread = va * va / (len(a) - 1) + vb * vb / (len(b) - 1)
        se2, df = va + vb, ((va + vb) ** 2 / spread if spread > 0 else math.inf)
    else:
        many = a if len(a) >= 2 else b
        se2, df = many.var(ddof=1) * (1 / len(a) + 1 / len(b)), len(many) - 1
    if se2 == 0.0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    q = t_quantile(0.5 + confidence / 2, min(df, 1e6)) * math.sqrt(se2)
    return math.exp(diff), math.exp(diff - q), math.exp(diff + q)


def slowed_by_others(m: Measured) -> bool:
    """The run's threads waited for CPUs that other processes held (both beyond their bounds, above)."""
    return (m.others_pct is not None and m.waited_pct is not None and m.others_pct > OTHERS_MAX_PCT
            and m.waited_pct > WAITED_MAX_PCT)


def wait_factor(m: Measured) -> float:
    """1 / the most that waiting for CPUs could have slowed the run's steps: 1 - waited for a run that other
    processes slowed (a wait recorded as 99.9% or more counts as 99.9%: at most 1000x), else 1."""
    return max(1 - m.waited_pct / 100, MIN_WAIT_FACTOR) if slowed_by_others(m) else 1.0


def config_changes(a: list[dict], b: list[dict]) -> list[dict]:
    """The keys of the two sides' setups (Measured.setup, one per run) whose values differ, in A's order then
    B's: each side's value, or its runs' values in order where they differ among themselves (seeds 1, 2, 3 on
    both sides are no change). Nothing when any run has no setup."""
    if not all(a) or not all(b):
        return []

    def value(side: list[dict], k: str):
        values = [s.get(k) for s in side]
        return values[0] if all(v == values[0] for v in values) else values

    keys = list(dict.fromkeys(k for s in (*a, *b) for k in s))
    return [{"key": k, "a": value(a, k), "b": value(b, k)} for k in keys if value(a, k) != value(b, k)]


def same_source(a: list[Measured], b: list[Measured]) -> tuple[list[list[float]], list[list[float]], str]:
    """Each run's step times, measured alike on both sides: unprofiled when every run has them, else traced."""
    if all(m.source == UNPROFILED for m in (*a, *b)):
        return [m.step_ms for m in a], [m.step_ms for m in b], UNPROFILED
    return [m.traced_ms for m in a], [m.traced_ms for m in b], TRACED


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _side(runs: list[Measured], names: list[str], steps: list[list[float]]) -> dict:
    """One side's figures: a single run's, or the mean over its runs (a bucket or figure a run lacks counts
    for the runs that have it); the verdict where they all agree, else each run's joined by ' / '."""
    figs = [run_figures(m.report) for m in runs]
    verdicts = list(dict.fromkeys(f["verdict"] or "-" for f in figs))
    buckets = list(dict.fromkeys(k for f in figs for k in f["breakdown_ms"]))
    with_breakdown = [f["breakdown_ms"] for f in figs if f["breakdown_ms"]]
    flat = [t for s in steps for t in s]
    return {"run": names[0] if len(names) == 1 else f"{names[0]} +{len(names) - 1}", "runs": names,
            "verdict": figs[0]["verdict"] if len(verdicts) == 1 else " / ".join(verdicts),
            "step_ms": _mean([f["step_ms"] for f in figs]),
            "profiled_step_ms": _mean([f["profiled_step_ms"] for f in figs]),
            "gpu_busy_pct": _mean([f["gpu_busy_pct"] for f in figs]),
            "breakdown_ms": {k: float(np.mean([b.get(k, 0.0) for b in with_breakdown])) for k in buckets},
            "steps": len(flat), "mean_step_ms": float(np.mean(flat)) if flat else None}


def _ops(runs: list[Measured]) -> dict:
    """A side's operators, ms per step, averaged over its runs (0 in a run that never ran one); {} when a run
    has no table."""
    if not all(m.ops_ms for m in runs):
        return {}
    names = {n for m in runs for n in m.ops_ms}
    return {n: float(np.mean([m.ops_ms.get(n, 0.0) for m in runs])) for n in names}


def _sharing(runs: list[Measured]) -> dict:
    """What a side's runs shared their CPUs with: a single run's record; of several, the one that waited most."""
    m = max(runs, key=lambda r: -1.0 if r.waited_pct is None else r.waited_pct)
    return {"others_cpu_pct": m.others_pct, "waited_cpu_pct": m.waited_pct, "slowed_by_others": slowed_by_others(m)}


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
    return compare_sides([a], [b], [name_a], [name_b], confidence, run_noise, workers)


def compare_sides(runs_a: list[Run], runs_b: list[Run], names_a: list[str] | None = None,
                  names_b: list[str] | None = None, confidence: float = CONFIDENCE, run_noise: float = RUN_NOISE,
                  workers: Workers | None = None) -> dict:
    """Side B's runs against side A's (module docstring): one run each, by their steps' blocks and the
    run-to-run noise; several on a side, by each run's level (``levels_interval``)."""
    if not runs_a or not runs_b:
        raise ValueError("compare_sides needs a run on each side")
    names_a = names_a or [f"A{i + 1}" if len(runs_a) > 1 else "A" for i in range(len(runs_a))]
    names_b = names_b or [f"B{i + 1}" if len(runs_b) > 1 else "B" for i in range(len(runs_b))]
    a = [as_measured(r, workers) for r in runs_a]
    b = [as_measured(r, workers) for r in runs_b]
    steps_a, steps_b, source = same_source(a, b)
    name_a, name_b = (names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
                      for names in (names_a, names_b))
    repeated = len(a) + len(b) > 2
    out = {"a": _side(a, names_a, steps_a), "b": _side(b, names_b, steps_b), "source": source,
           "confidence": confidence, "noise": "runs" if repeated else "steps",
           "run_noise": None if repeated else run_noise,
           "config_changes": config_changes([m.setup for m in a], [m.setup for m in b]),
           "cpu_sharing": {"a": _sharing(a), "b": _sharing(b)}}
    short = [len(s) for s in (*steps_a, *steps_b) if len(s) < 2]
    if short:
        counts = " and ".join(str(len(s)) for s in (*steps_a, *steps_b))
        out.update(ratio=None, low=None, high=None, significant=False, slowed_by_others=False,
                   summary=f"too few steps to compare ({counts}; 2 each at least)")
    elif repeated:
        ratio, low, high = levels_interval([level(s) for s in steps_a], [level(s) for s in steps_b], confidence)
        significant = not low <= 1.0 <= high
        ci = (f"{confidence * 100:g}% CI {low:.3f}x-{high:.3f}x, {len(a)} vs {len(b)} runs, "
              "drift between runs measured from them")
        out.update(ratio=ratio, low=low, high=high, significant=significant, slowed_by_others=False,
                   summary=_summary(ratio, significant, name_a, name_b, ci))
    else:
        (one_a,), (one_b,), (ma,), (mb,) = steps_a, steps_b, a, b
        ratio, low, high = ratio_interval(one_a, one_b, confidence, run_noise)
        significant = not low <= 1.0 <= high
        ci = (f"{confidence * 100:g}% CI {low:.3f}x-{high:.3f}x, {len(one_a)} vs {len(one_b)} steps, "
              f"run-to-run noise {run_noise:.0%}")
        loaded = [(n, m) for n, m in ((name_a, ma), (name_b, mb)) if slowed_by_others(m)]
        if loaded:
            # B's steps may be up to 1 / (1 - waited) slower than its work (the ratio lower), A's likewise
            low *= wait_factor(mb)
            high /= wait_factor(ma)
            significant = not low <= 1.0 <= high
            said = "; ".join(f"while {n} ran, other processes used {m.others_pct:.0f}% of all CPUs and one of its "
                             f"threads waited for a CPU {m.waited_pct:.0f}% of the time it was ready" for n, m in loaded)
            ci += f"; {said}: allowing for that, {low:.3f}x-{high:.3f}x"
        out.update(ratio=ratio, low=low, high=high, significant=significant,
                   summary=_summary(ratio, significant, name_a, name_b, ci), slowed_by_others=bool(loaded))
    buckets = list(dict.fromkeys([*out["a"]["breakdown_ms"], *out["b"]["breakdown_ms"]]))
    both = out["a"]["breakdown_ms"] and out["b"]["breakdown_ms"]  # a run without a trace has none
    out["breakdown"] = [{"bucket": k, "a_ms": out["a"]["breakdown_ms"].get(k, 0.0),
                         "b_ms": out["b"]["breakdown_ms"].get(k, 0.0)} for k in buckets] if both else []
    # full tables: a name missing from one is an operator that run never ran (0 ms), not one outside a top 5;
    # a run without a trace (or a Measured from before the tables) has none, and then nothing is compared
    ops_a, ops_b = _ops(a), _ops(b)
    changed = ([{"name": n, "a_ms": ops_a.get(n, 0.0), "b_ms": ops_b.get(n, 0.0),
                 "delta_ms": ops_b.get(n, 0.0) - ops_a.get(n, 0.0)} for n in {*ops_a, *ops_b}]
               if ops_a and ops_b else [])
    changed.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    out["ops"] = changed[:TOP_CHANGED]
    memory = memory_delta([m.report for m in a], [m.report for m in b])
    if memory is not None:
        out["memory"] = memory
    return out


def _summary(ratio: float, significant: bool, name_a: str, name_b: str, ci: str) -> str:
    if not significant:
        return f"no significant change: the step of {name_b} over {name_a} is {ratio:.3f}x ({ci})"
    return f"{name_b} is {ratio:.3f}x the step of {name_a}, {'slower' if ratio > 1 else 'faster'} ({ci})"


def _memory_side(reports: list[dict]) -> dict | None:
    """A side's largest peaks and smallest headroom over its runs' traces' GPUs (their CPU on a CPU run), and
    the spread of its profiled steps' peaks (the noise a difference must exceed)."""
    devs = [d for r in reports for s in r.get("spans", []) if s.get("memory") for d in s["memory"]["devices"]]
    devs = [d for d in devs if d["device"] != "cpu"] or devs
    if not devs:
        return None
    peaks = [st["peak_allocated_gib"] for d in devs for st in d["steps"]]
    headroom = [d["headroom_pct"] for d in devs if d.get("headroom_pct") is not None]
    return {"peak_allocated_gib": max(d["peak_allocated_gib"] for d in devs),
            "peak_reserved_gib": max(d["peak_reserved_gib"] for d in devs),
            "headroom_pct": min(headroom) if headroom else None, "step_spread_gib": max(peaks) - min(peaks)}


def memory_delta(reports_a: list[dict], reports_b: list[dict]) -> dict | None:
    """Side B's memory against A's (each a list of Report dicts, one per run): the peak allocated and reserved
    and the headroom, each B minus A; the noise is the larger spread of either side's step peaks, and the peak's
    change is significant beyond it. None unless both sides have a memory section."""
    a, b = _memory_side(reports_a), _memory_side(reports_b)
    if a is None or b is None:
        return None
    delta = b["peak_allocated_gib"] - a["peak_allocated_gib"]
    noise = max(a["step_spread_gib"], b["step_spread_gib"])
    return {"a": a, "b": b, "peak_allocated_delta_gib": round(delta, 4),
            "peak_reserved_delta_gib": round(b["peak_reserved_gib"] - a["peak_reserved_gib"], 4),
            "headroom_delta_pct": None if a["headroom_pct"] is None or b["headroom_pct"] is None
            else round(b["headroom_pct"] - a["headroom_pct"], 4),
            "noise_gib": round(noise, 4), "significant": abs(delta) > noise}

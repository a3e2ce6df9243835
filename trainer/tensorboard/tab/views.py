"""The JSON each route of the tab answers with, shaped from a run's Measured (the report of
``stepscope analyze --json`` plus per-step times). Pure functions of dicts; plugin.py serves them.

    run_row(name, measured)      # one line of the runs list: verdict, step ms, busy %, trend over cycles
    run_view(name, measured, verification)   # the whole report, per cycle (from 0), with shares of the step
    memory_view(report, folder)  # memory per cycle (from 0) and step (peaks vs capacity, at the peak), creep, OOM captures
    ranks_view(name, measured)   # per cycle of a multi-rank job: each rank's breakdown, stragglers and why
"""

from __future__ import annotations

import json
from pathlib import Path

from stepscope.report.measure import Measured
from stepscope.report.summary import cycles, run_figures, spans_by_cycle


def _round(x, digits: int = 4):
    return None if x is None else round(float(x), digits)


def run_row(name: str, m: Measured) -> dict:
    fig = run_figures(m.report)
    return {"name": name, "state": "ready", "verdict": fig["verdict"], "step_ms": fig["step_ms"],
            "profiled_step_ms": fig["profiled_step_ms"], "gpu_busy_pct": fig["gpu_busy_pct"],
            "ranks": max((len(c) for c in spans_by_cycle(m.report)), default=0),
            "trend": [{"cycle": c["cycle"], "step_ms": c["step_ms"], "profiled_step_ms": c["profiled_step_ms"],
                       "gpu_busy_pct": c["gpu_busy_pct"]} for c in cycles(m.report)]}


def _span_view(s: dict, cycle: int) -> dict:
    metrics = s["metrics"]
    profiled = metrics.get("profiled") or {}
    step = profiled.get("step_ms") or metrics.get("step_ms")
    top = [{**op, "share_of_step_pct": _round(100.0 * op["ms_per_step"] / step, 2) if step else None}
           for op in s.get("top", [])]
    return {"worker": s["worker"], "span": s["span"], "rank": s["rank"], "device": s["device"], "cycle": cycle,
            "verdict": s["verdict"], "basis": s.get("basis"),
            "unprofiled": {"step_ms": metrics.get("step_ms"), "gpu_busy_pct": metrics.get("gpu_busy_pct")},
            "profiled": {"step_ms": profiled.get("step_ms"), "gpu_busy_pct": profiled.get("gpu_busy_pct")},
            "evidence": s.get("evidence", []), "findings": s.get("findings", []),
            "remedies": s.get("remedies", []), "top": top}


OOM_DIR = "oom"  # capture/oom.py's folder in a run (not imported: that module needs torch)
OOM_CAPTURES = 20  # the latest ones shown


def _device_memory(cycle: int, span: dict, d: dict) -> dict:
    steps = d.get("steps") or []
    peak = max(steps, key=lambda x: x.get("peak_allocated_gib") or 0.0) if steps else {}
    return {"cycle": cycle, "worker": span["worker"], "span": span["span"], "rank": span.get("rank"),
            "device": d.get("device"), "capacity_gib": d.get("capacity_gib"),
            "peak_allocated_gib": d.get("peak_allocated_gib"), "peak_reserved_gib": d.get("peak_reserved_gib"),
            "headroom_gib": d.get("headroom_gib"), "headroom_pct": d.get("headroom_pct"),
            "fragmentation_gib": d.get("fragmentation_gib"), "fragmentation_pct": d.get("fragmentation_pct"),
            "creep_mib_per_step": d.get("creep_mib_per_step"),
            "steps": [{"step": x.get("step"), "peak_allocated_gib": x.get("peak_allocated_gib"),
                       "peak_reserved_gib": x.get("peak_reserved_gib"), "at_start_gib": x.get("at_start_gib")}
                      for x in steps],
            "peak_step": peak.get("step"), "peak_phase": peak.get("peak_phase"),
            "composition_gib": peak.get("composition_gib") or {}, "top_allocators": peak.get("top_allocators") or [],
            # by module only where the trace has module frames: None, not an empty table, otherwise
            "top_modules": peak.get("top_modules"), "outside_modules_gib": peak.get("outside_modules_gib")}


def oom_captures(folder: Path | None) -> list[dict]:
    """The run's out-of-memory captures (``oom/<worker>.<ns>/oom.json``), latest first: the error, the likely
    cause, what was live and whether the allocator's snapshot (and its stacks) is there."""
    if folder is None or not (Path(folder) / OOM_DIR).is_dir():
        return []
    out = []
    for f in sorted((Path(folder) / OOM_DIR).glob("*/oom.json"), key=lambda p: p.parent.name, reverse=True):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict):
            continue
        err, diag = info.get("error") or {}, info.get("diagnosis") or {}
        message = str(err.get("message") or "")
        out.append({"capture": f.parent.name, "worker": info.get("worker"), "error_type": err.get("type"),
                    "message": message.splitlines()[0] if message else None, "cause": diag.get("cause"),
                    "why": diag.get("why"), "live": diag.get("live"), "remedy": diag.get("remedy"),
                    "snapshot": bool(info.get("snapshot")),
                    "stacks": bool((info.get("snapshot_live") or {}).get("stacks"))})
        if len(out) == OOM_CAPTURES:
            break
    return out


def memory_view(report: dict, folder: Path | None = None) -> dict:
    """Memory per profiling cycle and device, the steps numbered as the time view's (ProfilerStep#N): each
    step's peak allocated and reserved against the capacity; at the cycle's peak step its composition and top
    allocators; fragmentation; the peak and allocated at the steps' start over the cycles (creep); the findings;
    the run's own counters when it measured them; and the out-of-memory captures under the run's folder."""
    rows, findings, measured = [], [], {}
    for i, spans in enumerate(spans_by_cycle(report)):
        for s in spans:
            mem = s.get("memory") or {}
            rows += [_device_memory(i, s, d) for d in mem.get("devices") or []]
            findings += [{"cycle": i, "worker": s["worker"], **f} for f in mem.get("findings") or []]
            measured = mem.get("measured") or measured
    creep = {}
    for r in rows:
        start = r["steps"][0]["at_start_gib"] if r["steps"] else None
        creep.setdefault(r["device"], []).append({"cycle": r["cycle"], "worker": r["worker"],
                                                  "peak_allocated_gib": r["peak_allocated_gib"],
                                                  "at_start_gib": start})
    return {"devices": rows, "creep": [{"device": k, "cycles": v} for k, v in creep.items()],
            "findings": findings, "measured": measured, "oom": oom_captures(folder)}


def cycle_verdict(report: dict, index: int, spans: list[dict]) -> str | None:
    """A cycle's own verdict: its cross-rank section's on a multi-rank job (the section whose ranks are this
    cycle's spans), else its span's (the most common of its spans', ties to the slowest, as the run's verdict
    is taken over spans)."""
    own = {(s["worker"], s["span"]) for s in spans}
    job = next((d for d in report.get("distributed", []) if own & _members(d)), None)
    if job is not None:
        return job.get("verdict")
    if not spans:
        return None
    counts = {v: sum(s["verdict"] == v for s in spans) for v in {s["verdict"] for s in spans}}
    best = max(counts.values())
    return max((s for s in spans if counts[s["verdict"]] == best), key=lambda s: s["metrics"]["step_ms"])["verdict"]


def run_view(name: str, m: Measured, verification: dict | None, folder: Path | None = None) -> dict:
    """The run, and each cycle with its own verdict and spans: the tab shows one cycle at a time (the latest
    first), its headline, figures, evidence, remedies and operators all of that cycle."""
    fig = run_figures(m.report)
    grouped = spans_by_cycle(m.report)
    index = {(s["worker"], s["span"]): i for i, group in enumerate(grouped) for s in group}
    per_cycle = [{**c, "verdict": cycle_verdict(m.report, i, grouped[i])} for i, c in enumerate(cycles(m.report))]
    return {"memory": memory_view(m.report, folder), "name": name, "verdict": m.report.get("verdict"), "figures": fig, "cycles": per_cycle,
            "spans": [_span_view(s, index[(s["worker"], s["span"])]) for s in m.report.get("spans", [])],
            "distributed": m.report.get("distributed", []), "verification": verification,
            "steps": {"source": m.source, "count": len(m.step_ms)}, "report": m.report}


def _why_given(d: dict) -> dict[int, dict]:
    """The cross-rank section's own account of each straggler (``stragglers_why``), by rank."""
    return {w["rank"]: w for w in d.get("stragglers_why", [])}


def _members(d: dict) -> set[tuple[str, str]]:
    """The (worker, span) of each rank of a cross-rank section, as the report lists them."""
    return {(r.get("worker"), r.get("span")) for r in d.get("ranks", [])}


def _job_view(d: dict, spans: dict, cycle_of: dict | None = None) -> dict:
    ranks = []
    for r in d["ranks"]:
        span = spans.get((r["worker"], r["span"]), {})
        ranks.append({**r, "breakdown_ms": span.get("breakdown_ms_per_step", {})})
    buckets = list(dict.fromkeys(k for r in ranks for k in r["breakdown_ms"]))
    median = d.get("median_breakdown_ms_per_step", {})  # the ranks that keep pace: the report's reference
    given = _why_given(d)
    stragglers = []
    for rank in d.get("stragglers", []):
        row = next((r for r in ranks if r["rank"] == rank), None)
        if row is None:
            continue
        own = given.get(rank, {})
        diffs = sorted(({"bucket": x["phase"], "ms": _round(x["delta_ms"]), "median_ms": _round(x["median_ms"])}
                        for x in own.get("phases", [])), key=lambda x: -abs(x["ms"]))
        stragglers.append({"rank": rank, "step_ms": row["step_ms"], "verdict": row["verdict"],
                           "why": own.get("text"), "phase_differences": diffs,
                           "top_differing": own.get("top_differing", [])})
    # the cycle its ranks' spans make in the run view (numbered from 0, as diagnosis.md numbers them)
    cycle = next((cycle_of[k] for k in sorted(_members(d)) if k in (cycle_of or {})), None)
    return {"cycle": cycle, "world_size": d.get("world_size"),
            "verdict": d.get("verdict"),
            "median_step_ms": d.get("median_step_ms"), "buckets": buckets, "median_breakdown_ms": median,
            "ranks": sorted(ranks, key=lambda r: r["rank"]), "stragglers": stragglers,
            "findings": d.get("findings", [])}


def ranks_view(name: str, m: Measured) -> dict:
    spans = {(s["worker"], s["span"]): s for s in m.report.get("spans", [])}
    cycle_of = {(s["worker"], s["span"]): i for i, group in enumerate(spans_by_cycle(m.report)) for s in group}
    return {"name": name, "verdict": m.report.get("verdict"),
            "jobs": [_job_view(d, spans, cycle_of) for d in m.report.get("distributed", [])]}

"""A report's figures per profiling cycle and for the whole run, from ``Report.to_dict()``.

    cycles(report)   # [{"cycle": 0, "step_ms", "profiled_step_ms", "gpu_busy_pct", "breakdown_ms": {...}}, ...]
    run_figures(report)   # the last cycle's figures: what a run list shows

A cycle is one profiling window (``schedule(repeat=...)``, or one trigger of a long job): the i-th span of
each worker, grouped by analysis/cycles.py (numbered from 0 as diagnosis.md and cycles.jsonl number
them). Over several ranks a cycle's figures are the median rank's
(the ranks of one job wait for each other), its breakdown the ranks' mean. Torch-free, dicts only.
"""

from __future__ import annotations

import statistics

from stepscope.analysis.cycles import cycles as group_cycles


def spans_by_cycle(report: dict) -> list[list[dict]]:
    """The report's spans grouped into cycles, in order: cycle i holds each worker's i-th span (the one rule
    of analysis/cycles.py)."""
    return group_cycles(report.get("spans", []), lambda s: s["worker"], lambda s: s["span"])


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def mean_breakdown(spans: list[dict], key: str = "breakdown_ms_per_step") -> dict[str, float]:
    """The buckets' mean over ``spans`` (ms per step), in the order the first span lists them."""
    total: dict[str, float] = {}
    for s in spans:
        for bucket, ms in (s.get(key) or {}).items():
            total[bucket] = total.get(bucket, 0.0) + (ms or 0.0)
    return {bucket: ms / len(spans) for bucket, ms in total.items()} if spans else {}


def cycle_figures(index: int, spans: list[dict]) -> dict:
    profiled = [(s["metrics"].get("profiled") or {}).get("step_ms") for s in spans]
    return {"cycle": index, "spans": len(spans),
            "verdicts": sorted({s["verdict"] for s in spans}),
            "step_ms": _median(s["metrics"]["step_ms"] for s in spans),
            "profiled_step_ms": _median(profiled),
            "gpu_busy_pct": _median(s["metrics"].get("gpu_busy_pct") for s in spans),
            "profiled_gpu_busy_pct": _median((s["metrics"].get("profiled") or {}).get("gpu_busy_pct") for s in spans),
            "breakdown_ms": mean_breakdown(spans)}


def cycles(report: dict) -> list[dict]:
    return [cycle_figures(i, spans) for i, spans in enumerate(spans_by_cycle(report))]


def run_figures(report: dict) -> dict:
    """The run's verdict and its last cycle's figures (the run as it stands at the end)."""
    all_cycles = cycles(report)
    last = all_cycles[-1] if all_cycles else {}
    return {"verdict": report.get("verdict"), "step_ms": last.get("step_ms"),
            "profiled_step_ms": last.get("profiled_step_ms"), "gpu_busy_pct": last.get("gpu_busy_pct"),
            "profiled_gpu_busy_pct": last.get("profiled_gpu_busy_pct"),
            "breakdown_ms": last.get("breakdown_ms", {}), "cycles": len(all_cycles)}

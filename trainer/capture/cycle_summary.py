"""A run's diagnosis merged from per-cycle summaries: each profiling cycle is analysed once, when it ends.

    summaries.append(CycleSummary(index, span, trigger, steps, telemetry, report, worker=worker))
    md = render_cycles(label, summaries)        # diagnosis.md and the TensorBoard Text
    line = summaries[-1].json_line()            # one line of cycles.jsonl

The run's verdict is the analysis's own rule over the cycles' reports (analysis/report.py run_verdict). The
Markdown holds one row per cycle (verdict, unprofiled and profiled step, GPU busy, what started the cycle) and
the full report of the latest cycles; earlier cycles' reports stay in memory only as these rows. Torch-free.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace

from stepscope.analysis.render import md_code, md_text, render_span_markdown
from stepscope.analysis.report import Report, run_verdict
from stepscope.analysis.span import SpanReport
from stepscope.report.telemetry import Telemetry, as_dict

DETAILED_CYCLES = 3  # full reports kept for the last cycles; the rest are rows


@dataclass(frozen=True)
class CycleSummary:
    index: int  # 0, 1, ... in the order the cycles ended
    span: str
    trigger: str  # "schedule", "slowdown: ...", "loader wait: ...", "file ...", "signal ..."
    steps: tuple[int, int] | None  # the cycle's first and last profiler step, when the schedule is stepscope's
    telemetry: Telemetry | None  # the unprofiled steps around the cycle (schedule.Cycle.telemetry)
    report: SpanReport | None
    error: str | None = None  # why there is no report (e.g. a cycle without prof.step())
    notes: tuple[str, ...] = ()  # e.g. no TensorBoard copy
    worker: str = ""  # the handler's worker name: the trace is raw/<span>/<worker>.trace.json
    cycle_report: Report | None = None  # the cycle's Report from the door (report is its one span)

    def row(self) -> dict:
        out = {"cycle": self.index, **({"worker": self.worker} if self.worker else {}), "span": self.span,
               "trigger": self.trigger,
               "steps": list(self.steps) if self.steps else None, "telemetry": as_dict(self.telemetry)}
        if self.report is not None:
            r = self.report
            out.update(verdict=r.verdict, basis=r.basis, step_ms=_r(r.metrics.step_ms),
                       gpu_busy_pct=_r(r.metrics.gpu_busy_pct),
                       profiled_step_ms=_r(r.profiled.step_ms) if r.profiled is not None else None)
        if self.error:
            out["error"] = self.error
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def json_line(self) -> str:
        return json.dumps(self.row()) + "\n"


def _r(v):
    return round(float(v), 3) if v is not None else None


def merged_report(label: str, summaries: list[CycleSummary]) -> Report | None:
    """The cycles' reports as one single-process run (no re-analysis), with their step windows and their
    operator tables' mean when every cycle's Report carries them; None before any report."""
    done = [s for s in summaries if s.report is not None]
    if not done:
        return None
    spans = [s.report for s in done]
    merged = Report(label, run_verdict(spans, ()), tuple(spans), ())
    reports = [s.cycle_report for s in done]
    if any(r is None or r.ops_ms is None for r in reports):
        return merged
    tables: dict[str, list[float]] = defaultdict(list)
    for r in reports:
        for name, ms in r.ops_ms.items():
            tables[name].append(ms)
    return replace(merged, traced_ms=tuple(ms for r in reports for ms in r.traced_ms),
                   ops_ms={name: statistics.fmean(ms) for name, ms in tables.items()})


def render_cycles(label: str, summaries: list[CycleSummary], verdict: str | None) -> str:
    title = f"`{verdict}`" if verdict else "no diagnosis yet"
    out = [f"# stepscope diagnosis: {title}", "",
           f"Run `{md_code(label)}`: {len(summaries)} profiling cycle(s), each analysed once when it ended. The verdict and "
           "the figures describe the steps as they run without the profiler (measured by stepscope.schedule "
           "where the profiler's schedule is one; else the profiled steps less the profiler's modelled cost); "
           "the profiled steps' own figures are given beside them, labelled \"as profiled\".", "",
           "| cycle | steps | started by | verdict | step ms | as profiled | GPU busy % | basis |",
           "|---:|---|---|---|---:|---:|---:|---|"]
    for s in summaries:
        row = s.row()
        steps = f"{s.steps[0]}-{s.steps[1]}" if s.steps else "–"
        if s.report is None:
            out.append(f"| {s.index} | {steps} | {_cell(s.trigger)} | no diagnosis: {_cell(s.error or '')} "
                       "| | | | |")
            continue
        out.append(f"| {s.index} | {steps} | {_cell(s.trigger)} | `{row['verdict']}` | {_f(row['step_ms'])} | "
                   f"{_f(row['profiled_step_ms'])} | {_f(row['gpu_busy_pct'])} | {row['basis']} |")
    out.append("")
    for s in [s for s in summaries if s.report is not None][-DETAILED_CYCLES:][::-1]:
        out += [f"# Cycle {s.index}" + (f" (steps {s.steps[0]}-{s.steps[1]})" if s.steps else ""), "",
                f"Started by: {md_text(s.trigger)}.", ""]
        if s.telemetry:
            t = s.telemetry
            data = f", waiting {t['data_ms']:.2f} ms for data" if "data_ms" in t else ""
            out += [f"Unprofiled steps measured around it: {t['steps']}, {t['step_ms']:.2f} ms each{data} (means).",
                    ""]
        out += [f"- {md_text(n)}" for n in s.notes] + ([""] if s.notes else [])
        out.append(render_span_markdown(s.report))
    return "\n".join(out).rstrip() + "\n"


def _f(v) -> str:
    return "–" if v is None else f"{v:.2f}"


def _cell(text: str) -> str:
    return md_text(text)

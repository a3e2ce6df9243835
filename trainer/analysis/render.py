"""Text forms of a Report: the console summary, the Markdown diagnosis, and TensorBoard scalars.

    print(render_console(report))                     # verdict + evidence, a few lines per span
    Path("logs/run/diagnosis.md").write_text(render_markdown(report))   # also TensorBoard's Text tab
    for tag, value in summary_scalars(report).items(): writer.add_scalar(tag, value, step)
"""

from __future__ import annotations

from collections import defaultdict

from stepscope.analysis.cross_rank import CrossRankReport
from stepscope.analysis.memory import PHASES as COMPOSITION  # the parts of a step's peak
from stepscope.analysis.metrics import TOP_N
from stepscope.analysis.report import Report
from stepscope.analysis.span import SpanReport
from stepscope.analysis.straggler_why import PHASES, StragglerWhy

CONSOLE_EVIDENCE_LINES = 3
CONSOLE_FINDINGS = 3
SCALAR_METRICS = ("step_ms", "gpu_busy_pct", "kernels_per_step", "median_kernel_us", "median_launch_us",
                  "syncs_per_step", "sync_ms_per_step", "data_ms_per_step", "memcpy_ms_per_step",
                  "peak_gpu_memory_mib", "compute_ms_per_step", "comm_ms_per_step", "overlap_ms_per_step")
UNPROFILED_METRICS = ("step_ms", "gpu_busy_pct")  # of SCALAR_METRICS, those of the step without the profiler


def md_text(text: str) -> str:
    """``text`` (which may hold what a trace, a file name or a run name says) as Markdown text that renders as
    itself and never as HTML or an image: ``&`` and ``<`` become entities (TensorBoard's sanitizer keeps
    ``<img src>``, which a browser fetches), ``![`` loses its image meaning, ``|`` its table one."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace("![", "!\\[")
            .replace("|", "\\|"))


def md_code(text: str) -> str:
    """``text`` inside a Markdown code span, which renders its content as text: only a backtick could end the
    span early, so it becomes a prime; ``|`` is escaped for tables."""
    return str(text).replace("`", "\u2032").replace("|", "\\|")


def _title(s: SpanReport) -> str:
    rank = f" rank {s.rank}" if s.rank is not None else ""
    return md_text(f"{s.worker}{rank} (span {s.span or '-'}, {s.device})")


BASIS = {"telemetry": "the run's own timing of its unprofiled steps",
         "overhead_model": "the profiled steps less the profiler's modelled host cost"}


def _headline(s: SpanReport) -> str:
    m, p = s.metrics, s.profiled
    busy = f", GPU busy {m.gpu_busy_pct:.0f}%" if m.gpu_busy_pct is not None else ""
    profiled = f" ({p.step_ms:.2f} as profiled)" if p is not None else ""
    return f"{s.verdict}: step {m.step_ms:.2f} ms without the profiler{profiled}{busy}"


def render_console(report: Report) -> str:
    lines = [f"stepscope diagnosis: {report.verdict}"]
    for s in report.spans:
        lines.append(f"  {_title(s)}: {_headline(s)}")
        if s.steps_note:
            lines.append(f"    note: {s.steps_note}")
        if s.step_range is not None:
            lines.append(f"    {_range_line(s)}")
        lines += [f"    {e}" for e in s.evidence[1: 1 + CONSOLE_EVIDENCE_LINES]]
        lines += [_console_finding(f) for f in s.findings[:CONSOLE_FINDINGS]]
        if s.memory is not None:  # the memory diagnosis (memory.py), its lines all starting with "memory"
            lines += [f"    {line}" for line in s.memory.lines(top=False)]
            lines += [f"    memory {f.id}: {f.text}" + (f" [~{f.cost_ms_per_step:.2f} ms/step]" if f.cost_ms_per_step
                                                       else "") for f in s.memory.findings[:CONSOLE_FINDINGS]]
    for d in report.distributed:
        lines.append(f"  cross-rank (cycle {d.cycle}, {len(d.ranks)} ranks): {d.verdict}, "
                     f"median step {d.median_step_ms:.2f} ms, stragglers: {_ranks(d.stragglers)}")
        lines += [_console_finding(f) for f in d.findings[:CONSOLE_FINDINGS]]
        lines += [f"    - why: {w.text()}" for w in d.why]
        if d.memory is not None:
            lines += [f"    memory {f['id']}: {f['text']}" for f in d.memory["findings"]]
    return "\n".join(lines)


def _range_line(s: SpanReport) -> str:
    return s.step_range.line(s.verdict)


def render_top(report: Report, rows: int = TOP_N) -> str:
    """The first trace's top kernels (GPU) or top ops by self time (CPU), per step, as an aligned table."""
    s = next((s for s in report.spans if s.metrics.top), None)
    if s is None:
        return ""
    what = "kernels" if s.gpu else "ops by self CPU time"
    width = min(80, max(len(t.name) for t in s.metrics.top[:rows]))
    lines = [f"top {what}, {_title(s)}:", f"  {'name':<{width}} {'ms/step':>9} {'calls/step':>10} {'%':>6}"]
    lines += [f"  {t.name[:width]:<{width}} {t.ms_per_step:9.3f} {t.count_per_step:10g} {t.pct:6.1f}"
              for t in s.metrics.top[:rows]]
    return "\n".join(lines)


def _console_finding(f) -> str:
    return f"    - {f.text} [~{f.cost_ms_per_step:.2f} ms/step]"


def _ranks(ranks) -> str:
    """"none", "rank 0", "ranks 0, 3": a rank number never reads as a count."""
    ranks = [str(r) for r in ranks]
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}" if ranks else "none"


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def render_markdown(report: Report) -> str:
    out = [f"# stepscope diagnosis: `{report.verdict}`", ""]
    out.append(f"Run `{md_code(report.run_dir)}`: {len(report.spans)} trace(s). The verdict and the figures describe the "
               "steps as they run without the profiler, which slows the host (not the GPU); the profiled steps' "
               "own figures are given beside them, labelled \"as profiled\".")
    out.append("")
    for d in report.distributed:
        out += _markdown_cross_rank(d)
    for s in report.spans:
        out += _markdown_span(s)
    return "\n".join(out).rstrip() + "\n"


def render_span_markdown(s: SpanReport) -> str:
    """One trace's section of the Markdown diagnosis."""
    return "\n".join(_markdown_span(s)).rstrip() + "\n"


def _markdown_span(s: SpanReport) -> list[str]:
    out = [f"## {_title(s)}: `{s.verdict}`", "", f"**{md_text(_headline(s))}**", ""]
    if s.steps_note:
        out += [f"Note: {md_text(s.steps_note)}.", ""]
    if s.basis in BASIS:
        out += [f"Unprofiled figures from {BASIS[s.basis]}.", ""]
    if s.step_range is not None:
        out += [f"{'**Undecided:** ' if s.step_range.alternative else ''}{_range_line(s)[0].upper()}"
                f"{_range_line(s)[1:]}.", ""]
    out += ["Where the step goes without the profiler:", ""] + [f"- {md_text(e)}" for e in s.evidence[1:]] + [""]
    if s.breakdown_profiled is not None:
        out += ["| bucket | ms/step | ms/step as profiled |", "|---|---:|---:|"]
        out += [f"| {b} | {s.breakdown.ms_per_step(b):.2f} | {s.breakdown_profiled.ms_per_step(b):.2f} |"
                for b in s.breakdown.buckets] + [""]
    if s.findings:
        out += ["| finding | cost (ms/step) |", "|---|---:|"]
        out += [f"| {md_text(f.text)} | {f.cost_ms_per_step:.2f} |" for f in s.findings] + [""]
    if s.remedies:
        out += ["Remedies, most valuable first:", ""] + [f"1. {md_text(r)}" for r in s.remedies] + [""]
    out += ["| metric | value |", "|---|---:|"]
    out += [f"| {k} | {_fmt(v)} |" for k, v in s.metrics.to_dict().items()] + [""]
    if s.metrics.top:
        what = "kernel" if s.gpu else "op (self time)"
        out += [f"| top {what} | ms/step | calls/step | % |", "|---|---:|---:|---:|"]
        out += [f"| `{_cell(t.name)}` | {t.ms_per_step:.3f} | {t.count_per_step:g} | {t.pct:.1f} |"
                for t in s.metrics.top] + [""]
    if s.memory is not None:
        out += _markdown_memory(s.memory)
    return out


def _markdown_memory(mem) -> list[str]:
    """The memory section of a trace (memory.py): per device and step, the peak and its composition."""
    out = ["### Memory", ""] + [f"- {md_text(line)}" for line in mem.lines()] + [""]
    for d in mem.devices:
        out += [f"| {d.device} step | peak allocated GiB | peak reserved GiB | "
                + " | ".join(k.replace("_", " ") for k in COMPOSITION) + " | reserved but free GiB |",
                "|---:|---:|---:|" + "---:|" * len(COMPOSITION) + "---:|"]
        out += [f"| {st.step} | {st.peak_allocated / 2**30:.2f} | {st.peak_reserved / 2**30:.2f} | "
                + " | ".join(f"{st.composition[k] / 2**30:.2f}" for k in COMPOSITION)
                + f" | {st.fragmentation / 2**30:.2f} |" for st in d.steps] + [""]
    if mem.findings:
        out += ["| memory finding | remedy |", "|---|---|"]
        out += [f"| {_cell(f.text, 400)} | {_cell(' '.join(f.remedies), 400)} |" for f in mem.findings] + [""]
    return out


def _markdown_cross_rank(d: CrossRankReport) -> list[str]:
    out = [f"## Cross-rank, profiling cycle {d.cycle}: `{d.verdict}`", "",
           f"{len(d.ranks)} ranks, median step {d.median_step_ms:.2f} ms, stragglers: {_ranks(d.stragglers)} "
           "(a straggler spends more than 1.2x the other ranks' median time outside communication).", "",
           "| rank | worker | verdict | step ms | compute ms | comm ms | overlap ms | exposed comm ms | "
           "outside comm ms | straggler |",
           "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    out += [f"| {r.rank} | {md_text(r.worker)} | {r.verdict} | {r.step_ms:.2f} | {r.compute_ms:.2f} | "
            f"{r.comm_ms:.2f} | {r.overlap_ms:.2f} | {r.exposed_comm_ms:.2f} | {r.outside_comm_ms:.2f} | "
            f"{'yes' if r.straggler else ''} |" for r in d.ranks]
    out.append("")
    out += [f"- {md_text(f.text)} (~{f.cost_ms_per_step:.2f} ms/step)" for f in d.findings]
    if d.memory is not None:
        out += ["", "Peak allocated per rank (GiB): " + ", ".join(f"rank {r} {v:.2f}" for r, v in
                                                              d.memory["peak_allocated_gib"].items())]
        out += [f"- {md_text(f['text'])}" for f in d.memory["findings"]]
    if d.remedies:
        out += ["", "Remedies:", ""] + [f"1. {md_text(r)}" for r in d.remedies]
    out.append("")
    for w in d.why:
        out += _markdown_why(w)
    return out


def _markdown_why(w: StragglerWhy) -> list[str]:
    out = [f"### Why rank {w.rank} straggles", "", md_text(w.text()), "",
           f"| phase | rank {w.rank} ms/step | median rank ms/step | difference |", "|---|---:|---:|---:|"]
    out += [f"| {'**' + PHASES[p.phase] + '**' if p.phase in w.causes else PHASES[p.phase]} | "
            f"{p.straggler_ms:.2f} | {p.median_ms:.2f} | {_signed(p.delta_ms)} |" for p in w.phases]
    out.append("")
    if w.names:
        out += [f"| where (phase) | rank {w.rank} ms/step | median rank ms/step | difference |",
                "|---|---:|---:|---:|"]
        out += [f"| `{_cell(n.name)}` ({PHASES[n.phase]}) | {n.straggler_ms:.2f} | {n.median_ms:.2f} | "
                f"{_signed(n.delta_ms)} |" for n in w.names]
        out.append("")
    return out


def _signed(ms: float) -> str:
    """+1.23 / -1.23, and +0.00 for what rounds to zero either side."""
    return f"{round(ms, 2) + 0.0:+.2f}"


def _cell(name: str, n: int = 90) -> str:
    name = md_code(name)
    return name if len(name) <= n else name[: n - 1] + "…"


def memory_scalars(report: Report) -> dict[str, float]:
    """``diagnosis/memory/{peak_allocated_gib,peak_reserved_gib,headroom_pct}``: the largest peaks and the
    smallest headroom over the run's GPUs (the CPU's peaks on a CPU run); nothing without [memory] events."""
    devices = [d for s in report.spans if s.memory is not None for d in s.memory.devices]
    if not devices:
        return {}
    out = {"diagnosis/memory/peak_allocated_gib": max(d.peak.peak_allocated for d in devices) / 2**30,
           "diagnosis/memory/peak_reserved_gib": max(d.peak_reserved for d in devices) / 2**30}
    headroom = [d.headroom_pct for d in devices if d.headroom_pct is not None]
    if headroom:
        out["diagnosis/memory/headroom_pct"] = min(headroom)
    return out


def summary_scalars(report: Report) -> dict[str, float]:
    """Scalars for SummaryWriter, each a mean over the run's traces: the step as it runs without the profiler,
    ``diagnosis/step_ms``, ``diagnosis/gpu_busy_pct`` and the step-time shares ``diagnosis/pct/<bucket>``; the
    figures that come from the profiled steps alone under ``diagnosis/profiled/`` (their own ``step_ms`` and
    ``gpu_busy_pct``, and every other metric: ``data_ms_per_step``, ``compute_ms_per_step``, ...); per worker
    ``diagnosis/<worker>/<metric>`` when there are several, and
    ``diagnosis/stragglers`` (most in any profiling cycle) on a multi-rank run. None values (GPU terms on a
    CPU run) are left out."""
    def means(spans: list[SpanReport]) -> dict[str, float]:
        acc: dict[str, list[float]] = defaultdict(list)
        for s in spans:
            for k in SCALAR_METRICS:
                v = getattr(s.metrics, k)
                if v is not None:  # span.metrics: step_ms and gpu_busy_pct unprofiled, the rest as profiled
                    acc[k if k in UNPROFILED_METRICS else f"profiled/{k}"].append(float(v))
            for b in s.breakdown.buckets:
                acc[f"pct/{b}"].append(s.breakdown.pct(b))
            if s.profiled is not None:
                for k in ("step_ms", "gpu_busy_pct"):
                    v = getattr(s.profiled, k)
                    if v is not None:
                        acc[f"profiled/{k}"].append(float(v))
        return {k: sum(v) / len(v) for k, v in acc.items()}

    out = {f"diagnosis/{k}": v for k, v in means(list(report.spans)).items()}
    out.update(memory_scalars(report))
    workers = sorted({s.worker for s in report.spans})
    if len(workers) > 1:
        for w in workers:
            mine = means([s for s in report.spans if s.worker == w])
            out.update({f"diagnosis/{w}/{k}": v for k, v in mine.items()})
    if report.distributed:
        out["diagnosis/stragglers"] = float(max(len(d.stragglers) for d in report.distributed))
    return out

"""Why is a training step slow? A pure analysis of torch.profiler traces.

    from stepscope.profiler.analysis import analyze_run, render_console, render_markdown, summary_scalars
    report = analyze_run(Path("logs/myrun"))      # every (worker, span) trace, plus cross-rank when several
    print(render_console(report))                 # verdict and evidence
    report.to_dict()                              # the JSON of `scripts/analyze.py RUN_DIR --json`

Modules, one job each: events (parse a trace into typed events), jsonstream and stream_parse (the same,
streamed from the file), select (a window of steps), parallel (processes within a memory budget), intervals (timeline arithmetic), steps
(which GPU work belongs to which step), breakdown (where the step's time goes), metrics (per-span numbers),
verdicts (the verdict registry), findings (verdict, findings, remedies), span (one trace's report),
cross_rank (several ranks of one cycle), report (a run directory, JSON), render (text).
"""

from ..trace.errors import TraceError
from .cross_rank import CrossRankReport
from .events import parse_trace
from .findings import Finding
from .render import render_console, render_markdown, render_top, summary_scalars
from .report import RunReport, analyze_run
from .select import StepSelection
from .span import SpanReport, analyze_parsed, analyze_trace
from .stream_parse import parse_trace_file
from .verdicts import VERDICTS

__all__ = ["VERDICTS", "CrossRankReport", "Finding", "RunReport", "SpanReport", "StepSelection", "TraceError",
           "analyze_parsed", "analyze_run", "analyze_trace", "parse_trace", "parse_trace_file", "render_console",
           "render_markdown", "render_top", "summary_scalars"]

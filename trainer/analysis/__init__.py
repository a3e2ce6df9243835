"""Why is a training step slow? A pure analysis of torch.profiler traces.

    from stepscope.report.front import analyze     # the way in: finds the traces, parses, analyses
    from stepscope.analysis import render_console, render_markdown, summary_scalars
    report = analyze(Path("logs/myrun"))          # every (worker, span) trace, plus cross-rank when several
    print(render_console(report))                 # verdict and evidence
    report.to_dict()                              # the JSON of `stepscope analyze RUN_DIR --json`

Modules, one job each: events (the typed events of a trace), stream_parse (parse a trace file, streamed),
stream_collect (the rules that turn events into them), stream_ranges (one file in byte ranges at once),
validate (input checks), select (a window of steps), intervals (timeline arithmetic), steps
(which GPU work belongs to which step), breakdown (where the step's time goes), metrics (per-span numbers),
verdicts (the verdict registry), vocabulary (the buckets, phases and finding ids), findings (verdict,
findings, remedies), span (one trace's report), cross_rank (several ranks of one cycle), report (a run
directory, JSON), render (text).
"""

from stepscope.analysis.cross_rank import CrossRankReport
from stepscope.analysis.findings import Finding
from stepscope.analysis.render import render_console, render_markdown, render_top, summary_scalars
from stepscope.analysis.report import Report
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanReport, analyze_parsed, analyze_selected
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.analysis.verdicts import VERDICTS
from stepscope.trace.errors import TraceError

__all__ = ["VERDICTS", "CrossRankReport", "Finding", "Report", "SpanReport", "StepSelection", "TraceError",
           "analyze_parsed", "analyze_selected", "parse_trace_file", "render_console",
           "render_markdown", "render_top", "summary_scalars"]

"""The streamed engine on a trace dict: written to a temporary file, then parsed from it (stream_parse.py),
for the tests that build their traces in memory.

    parsed = parse_trace(trace, "w", "1")            # what stream_parse.parse_trace_file makes of the file
    report = analyze_trace(trace, "w", "1", telemetry=None, selection=None)

Errors are the engine's, without the temporary file's name: TraceError (one line) on a bad trace.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from stepscope.profiler.analysis.report import parse_path
from stepscope.profiler.analysis.select import StepSelection
from stepscope.profiler.analysis.span import SpanReport, analyze_selected
from stepscope.profiler.analysis.stream_parse import parse_trace_file
from stepscope.profiler.trace.errors import TraceError


def parse_trace(trace, worker: str, span: str, **kwargs):
    with tempfile.TemporaryDirectory(prefix="stepscope-test-") as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(json.dumps(trace))
        return parse_trace_file(path, worker, span, **kwargs)


def analyze_trace(trace, worker: str, span: str, telemetry: dict | None = None,
                  selection: StepSelection | None = None) -> SpanReport:
    with tempfile.TemporaryDirectory(prefix="stepscope-test-") as tmp:
        path = Path(tmp) / "t.json"
        path.write_text(json.dumps(trace))
        parsed = parse_path(path, worker, span)
        if isinstance(parsed, TraceError):
            raise TraceError(str(parsed).removeprefix(f"{path}: "))
    return analyze_selected(parsed, telemetry, selection)

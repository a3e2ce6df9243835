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

from stepscope.analysis.report import parse_path
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanReport, analyze_selected
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.trace.errors import TraceError


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


def adapt_trace(trace: dict) -> dict:
    """The reference rewrite of ``trace`` (tests/reference/dict_rewrite.py), checked against the streamed one
    (the export's) on the same trace written to a file: the two copies must be the same JSON."""
    from reference.dict_rewrite import adapt_trace as reference
    from stepscope.plugin_copy.stream_plan import plan_edits
    from stepscope.plugin_copy.stream_write import write_adapted_stream
    from stepscope.trace.files import load_trace

    want = reference(trace)
    with tempfile.TemporaryDirectory(prefix="stepscope-test-") as tmp:
        src, dst = Path(tmp) / "t.json", Path(tmp) / "w.1.pt.trace.json"
        src.write_text(json.dumps(trace))
        write_adapted_stream(src, dst, *plan_edits(src))
        assert load_trace(dst) == json.loads(json.dumps(want)), "the streamed rewrite differs from the reference"
    return want

"""The streamed parse (analysis/stream_parse.py) equals events.parse_trace of the loaded dict, and leaves
every input that a validate.py check refuses to the ordinary reader.

    python -m pytest -q tests/test_stream_parse.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepscope.profiler.analysis.events import parse_trace
from stepscope.profiler.analysis.stream_parse import StreamFallback, parse_trace_file
from stepscope.profiler.trace.files import load_trace

DATA = Path(__file__).parent / "data"
TRACES = sorted(p for p in DATA.glob("*/*.json*") if "golden" not in p.parts and ".trace.json" in p.name)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name + "/" + p.name.split(".")[0])
def test_streamed_parse_equals_parse_trace(path):
    assert parse_trace_file(path, "w", "1") == parse_trace(load_trace(path), "w", "1")


def _trace(*events) -> dict:
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 1000.5, "dur": 50}
    return {"traceEvents": [step, *events], "distributedInfo": {"rank": 1, "world_size": 2}}


def test_small_pieces_and_edge_values(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1001 + i, "dur": -1 if i % 7 else 2,
               "tid": i % 3, "args": {"Input Dims": [[1]]} if i == 5 else None} for i in range(40)]
    events += [{"ph": "X", "cat": "Kernel", "name": "k", "ts": 1002, "dur": 3, "pid": None,
                "args": {"device": None, "correlation": 9}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1001.25, "dur": 1,
                "args": {"correlation": 9}},
               {"ph": "i", "name": "[memory]", "ts": 1003, "args": {"Device Type": 1, "Total Allocated": 7}},
               {"ph": "X", "cat": "python_function", "name": "<built-in method x>", "ts": 1004, "dur": 1},
               {"ph": "X", "cat": "python_function", "name": "a.py(1): f", "ts": 1004, "dur": 1},
               {"name": "no ph"}, {"ph": "M", "name": "thread_name", "args": {"name": "x"}}]
    trace = _trace(*events)
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps(trace, indent=2))
    want = parse_trace(trace, "w", "1")
    assert parse_trace_file(path, "w", "1") == want
    for block in (97, 500, 4096):  # pieces of a few events, cut at many positions
        assert parse_trace_file(path, "w", "1", block=block) == want


@pytest.mark.parametrize("bad", [
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": NaN, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": 5, "ts": 1001, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "1001", "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1e300, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1001, "dur": 1, "args": [1]}',
    '7',
    '{"ph": "i", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 1001}',
], ids=["nan", "int_name", "string_ts", "huge_ts", "list_args", "not_object", "instant_step"])
def test_refused_input_falls_back(tmp_path, bad):
    path = tmp_path / "w.1.pt.trace.json"
    step = '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 1000, "dur": 50}'
    path.write_text('{"traceEvents": [' + step + ", " + bad + "]}")
    with pytest.raises(StreamFallback):
        parse_trace_file(path, "w", "1")


def test_no_steps_and_bad_metadata_fall_back(tmp_path):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "Trace", "name": "a", "ts": 1, "dur": 1}]}))
    with pytest.raises(StreamFallback):
        parse_trace_file(path, "w", "1")
    path.write_text(json.dumps({**_trace(), "distributedInfo": [1]}))
    with pytest.raises(StreamFallback):
        parse_trace_file(path, "w", "1")

"""What the analysis accepts (originals, our TensorBoard-adapted copies, the trainer's raw/ layout) and how
it refuses bad input (TraceError, one line, naming the bad thing).

    pytest tests/test_analysis_inputs.py -q
"""

from __future__ import annotations

import copy
import functools
import gzip
import importlib
import json
import shutil
from pathlib import Path

import pytest
from on_disk import analyze_trace
from reference.dict_parse import parse_trace
from stepscope.analysis import TraceError
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.files import (
    load_trace,
    plugin_name,
    raw_path,
    write_trace_atomic,
)

DATA = Path(__file__).parent / "data"


@functools.cache
def scenario_trace(name: str):
    """The scenario's trace file and its JSON, read once per module: every test copies it before changing it."""
    (tf,) = discover(DATA / name).traces
    return tf, load_trace(tf.path)


@functools.cache
def original_report(name: str) -> dict:
    """comparable() of the scenario's trace analysed as recorded, once per module."""
    _, trace = scenario_trace(name)
    return comparable(analyze_trace(trace, "w", "1"))


def comparable(report) -> dict:
    d = report.to_dict()
    return {"verdict": d["verdict"], "metrics": d["metrics"], "breakdown": d["breakdown_ms_per_step"],
            "findings": [f["id"] for f in d["findings"]]}


@pytest.mark.parametrize("scenario", ["eager_bs128", "slow_dataset", "cuda_graph", "item_per_layer"])
def test_runtime_category_renamed_gives_the_same_report(scenario):
    """Our TensorBoard copies rename cuda_runtime/cuda_driver to `runtime`, all that tb-profiler reads."""
    tf, trace = scenario_trace(scenario)
    renamed = copy.deepcopy(trace)
    n = 0
    for e in renamed["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["cat"] = "runtime"
            n += 1
    assert n > 0
    assert comparable(analyze_trace(renamed, "w", "1")) == original_report(scenario)


@pytest.mark.parametrize("scenario", ["eager_bs128", "slow_dataset", "cuda_graph", "cpu_resnet"])
def test_the_plugin_copy_gives_the_same_report(scenario):
    rewrite = importlib.import_module("reference.dict_rewrite")
    _, trace = scenario_trace(scenario)
    adapted = rewrite.adapt_trace(trace)
    assert comparable(analyze_trace(adapted, "w", "1")) == original_report(scenario)


def test_dataloader_span_found_in_any_category():
    _, trace = scenario_trace("slow_dataset")
    moved = copy.deepcopy(trace)
    for e in moved["traceEvents"]:
        if e.get("name", "").startswith("enumerate(DataLoader)"):
            e["cat"] = "cpu_op"
        if e.get("name") == "data":  # leave only the DataLoader span to find
            e["name"] = "not_data"
    r = analyze_trace(moved, "w", "1")
    assert r.verdict == "data_bound"
    assert r.metrics.data_ms_per_step == pytest.approx(49.6, abs=0.2)  # the __next__ spans: 49.24, 49.96 ms


def test_trainer_layout_prefers_raw_originals(tmp_path):
    """logs/<run>/ of our trainer: the adapted copy the plugin lists, and the original under raw/<span>/."""
    tf, trace = scenario_trace("eager_bs128")
    run = tmp_path / "run"
    write_trace_atomic(raw_path(run, "host_123_rank0", "1700000000000000000", gz=True), trace)
    renamed = copy.deepcopy(trace)
    for e in renamed["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["cat"] = "runtime"
    write_trace_atomic(run / plugin_name("host_123_rank0", "1700000000000000000", gz=True), renamed)
    r = analyze(run)
    (s,) = r.spans
    same = analyze(DATA / "eager_bs128").spans[0]  # the original analysed where it was recorded
    assert (s.worker, s.span, s.verdict) == ("host_123_rank0", "1700000000000000000", same.verdict)
    assert s.metrics.step_ms == same.metrics.step_ms
    assert "distributed" not in r.to_dict()


def test_plain_uncompressed_trace(tmp_path):
    _, trace = scenario_trace("cuda_graph")
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker0.123.pt.trace.json").write_text(json.dumps(trace))
    (s,) = analyze(run).spans
    assert (s.worker, s.span, s.verdict) == ("worker0", "123", "gpu_bound")


def test_several_spans_of_one_worker_are_not_cross_rank(tmp_path):
    tf, _ = scenario_trace("eager_bs32")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(tf.path, run / "w.100.pt.trace.json.gz")
    shutil.copy(tf.path, run / "w.200.pt.trace.json.gz")
    r = analyze(run)
    assert [s.span for s in r.spans] == ["100", "200"]
    assert r.distributed == () and r.verdict == "launch_bound"


@pytest.mark.parametrize("trace, message", [
    ([], "not a Chrome trace"),
    ({"events": []}, "not a Chrome trace"),
    ({"traceEvents": []}, "no ProfilerStep#N events"),
    ({"traceEvents": [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 1.0, "dur": 2.0}]},
     "no ProfilerStep#N events"),
    ({"traceEvents": ["x"]}, "event #0 is str"),
    ({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 5.0}]},
     "no numeric ts/dur"),
])
def test_bad_trace_raises_one_line(trace, message):
    with pytest.raises(TraceError, match=message) as e:
        parse_trace(trace, "w", "1")
    assert "\n" not in str(e.value)


def test_bad_run_dirs_raise_one_line(tmp_path):
    with pytest.raises(TraceError, match="not a directory"):
        analyze(tmp_path / "missing")
    with pytest.raises(TraceError, match="no traces"):
        analyze(tmp_path)
    (tmp_path / "w.1.pt.trace.json.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TraceError, match=r"w\.1\.pt\.trace\.json\.gz: unreadable trace"):
        analyze(tmp_path)
    (tmp_path / "w.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [tru'))
    with pytest.raises(TraceError, match="unreadable trace .*JSONDecodeError"):
        analyze(tmp_path)

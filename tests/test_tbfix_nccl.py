"""Regression: torch 2.11 writes ProfilerStep#N on the GPU timeline too (gpu_user_annotation), which made
torch-tb-profiler 0.4.3 count duplicate zero-length steps and fail to load the worker (ZeroDivisionError).
The traces are a real 2-rank NCCL DDP run of scripts/train.py --profile on 2x H200, torch 2.11.0+cu130."""

import shutil
from pathlib import Path

import pytest
from reference.dict_rewrite import adapt_trace
from stepscope.plugin_copy import export_tensorboard
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace import files as trace_files

DATA = Path(__file__).parent / "data" / "nccl_ddp"


def test_device_side_step_annotations_are_renamed():
    for f in sorted(DATA.glob("*.pt.trace.json.gz")):
        raw = trace_files.load_trace(f)
        device_steps = [e for e in raw["traceEvents"]
                        if e.get("cat") == "gpu_user_annotation" and e.get("name", "").startswith("ProfilerStep#")]
        assert len(device_steps) == 3  # the trace really has them: the regression is real
        fixed = adapt_trace(raw)
        steps = [e for e in fixed["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        assert sorted(e["name"] for e in steps) == ["ProfilerStep#17", "ProfilerStep#18", "ProfilerStep#19"]
        assert all(e["cat"] == "user_annotation" for e in steps)
        renamed = [e for e in fixed["traceEvents"] if e.get("name", "").startswith("GPU ProfilerStep#")]
        assert len(renamed) == 3 and all(e["cat"] == "gpu_user_annotation" for e in renamed)


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("nccl") / "logs"
    src = logdir / "before"
    src.mkdir(parents=True)
    for f in DATA.glob("*.pt.trace.json.gz"):
        shutil.copy(f, src / f.name)
    export_tensorboard(src, logdir / "after")
    # the adapted copy with the renaming undone: what the plugin copy was before this fix
    for t in trace_files.find_plugin_traces(logdir / "after"):
        trace = trace_files.load_trace(t.path)
        trace["traceEvents"] = [dict(e, name=e["name"].removeprefix("GPU ")) if e.get("cat") == "gpu_user_annotation"
                                else e for e in trace["traceEvents"]]
        trace_files.write_trace_atomic(logdir / "unrenamed" / t.path.name, trace)
    with TensorBoard(logdir) as server:
        server.wait_for_runs(["before", "after", "unrenamed"])
        yield server


def test_nccl_workers_load_and_the_distributed_view_appears(tb):
    # without the renaming, the duplicate device-side steps crash the Overview: neither worker loads
    assert tb.profiler("workers", run="unrenamed", view="Overview") == []
    assert len(tb.profiler("workers", run="before", view="Overview")) == 2
    views = tb.profiler("views", run="after")
    assert {"Overview", "Operator", "Kernel", "Trace", "Memory", "Distributed"} <= set(views)
    workers = tb.profiler("workers", run="after", view="Overview")
    assert sorted(workers) == ["vm_600_rank0", "vm_601_rank1"]
    for w in workers:
        span = tb.profiler("spans", run="after", worker=w)[0]
        ov = tb.profiler("overview", run="after", worker=w, span=span)
        assert len(ov["steps"]["rows"]) == 3
        table = tb.profiler("operation/table", run="after", worker=w, span=span, group_by="Operation")["data"]
        assert sum(o["device_self_duration"] for o in table) > 0
    span = tb.profiler("spans", run="after", worker="All")[0]
    gpuinfo = tb.profiler("distributed/gpuinfo", run="after", worker="All", span=span)
    assert gpuinfo and "H200" in str(gpuinfo)
    ops = tb.profiler("distributed/commops", run="after", worker="All", span=span)["data"]
    assert set(ops) == {"vm_600_rank0", "vm_601_rank1"}
    counts = {w: {r[0]: r[1] for r in ops[w]["rows"]} for w in ops}
    assert counts["vm_600_rank0"] == counts["vm_601_rank1"] and counts["vm_600_rank0"]["nccl:all_reduce"] > 0

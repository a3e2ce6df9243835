"""Traces from elsewhere that the analysis must read right: torch 1.8/1.9 vocabulary, plain runs that share a
directory without being a distributed job, and a host blocked in a sync while kernels wait in the queue.

    pytest tests/test_foreign_traces.py -q
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from on_disk import analyze_trace
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace, write_trace_atomic

DATA = Path(__file__).parent / "data"

# torch 1.8/1.9 (kineto 0.1/0.2, and torch-tb-profiler's own test traces) spelled the categories of today's
# traces like this, and put ProfilerStep#N in the operator category
OLD_CATEGORY = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "cuda_driver": "Runtime", "kernel": "Kernel",
                "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}


def as_torch19(trace: dict) -> dict:
    """``trace`` written with torch 1.8/1.9's category names."""
    old = copy.deepcopy(trace)
    for e in old["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            e["cat"] = "Operator"
        elif e.get("cat") in OLD_CATEGORY:
            e["cat"] = OLD_CATEGORY[e["cat"]]
    return old


def summary(report) -> dict:
    d = report.to_dict()
    return {"verdict": d["verdict"], "metrics": d["metrics"], "breakdown": d["breakdown_ms_per_step"]}


@pytest.mark.parametrize("scenario", ["eager_bs32", "cpu_resnet"])
def test_torch19_vocabulary_reads_like_today(scenario):
    (tf,) = discover(DATA / scenario).traces
    trace = load_trace(tf.path)
    old = as_torch19(trace)
    assert not [e for e in old["traceEvents"] if e.get("cat") == "user_annotation"
                and str(e.get("name")).startswith("ProfilerStep#")]
    then, now = analyze_trace(old, "worker0", "1"), analyze_trace(trace, "worker0", "1")
    assert then.metrics.steps == now.metrics.steps >= 2
    assert summary(then) == summary(now)  # a ProfilerStep# in Operator is a step, not an op
    assert all(not t.name.startswith("ProfilerStep#") for t in then.metrics.top)


def test_the_plugins_own_test_trace_shape_with_six_steps():
    """The layout of torch-tb-profiler's test traces (tb_plugin/test/test_profiler.py): capitalised
    categories, string tids ("stream 7"), ProfilerStep#N as an Operator; here six steps of one kernel each."""
    events = []
    for k in range(6):
        t0 = 1000 * k
        events += [
            {"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{k + 1}", "pid": 13721, "tid": "123",
             "ts": t0 + 50, "dur": 400, "args": {"Input Dims": [], "External id": 10 * k + 1}},
            {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 13721, "tid": "123",
             "ts": t0 + 100, "dur": 100, "args": {"Input Dims": [], "External id": 10 * k + 2}},
            {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 13721, "tid": "123",
             "ts": t0 + 120, "dur": 10, "args": {"correlation": 100 + k, "external id": 10 * k + 2}},
            {"ph": "X", "cat": "Kernel", "name": "void gemmSN_TN_kernel_64addr", "pid": 0, "tid": "stream 7",
             "ts": t0 + 140, "dur": 200,
             "args": {"correlation": 100 + k, "external id": 10 * k + 2, "device": 0, "stream": 7}},
        ]
    r = analyze_trace({"schemaVersion": 1, "traceEvents": events}, "worker0", "1")
    assert r.metrics.steps == 6
    assert r.metrics.kernels_per_step == 1.0
    assert r.metrics.top[0].name == "void gemmSN_TN_kernel_64addr"


def test_two_plain_runs_in_one_directory_are_not_a_distributed_job(tmp_path):
    """Two processes of one plain tensorboard_trace_handler script: host_PID names, no distributedInfo."""
    (tf,) = discover(DATA / "slow_dataset").traces
    trace = load_trace(tf.path)
    trace.pop("distributedInfo", None)
    fast = copy.deepcopy(trace)
    for e in fast["traceEvents"]:  # halve the second process's steps, so that one of them looks slow
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["dur"] = e["dur"] / 2
    write_trace_atomic(tmp_path / "myhost_41233.1795259112677408466.pt.trace.json.gz", trace)
    write_trace_atomic(tmp_path / "myhost_41877.1795259112677408999.pt.trace.json.gz", fast)
    r = analyze(tmp_path)
    assert len(r.spans) == 2 and [s.rank for s in r.spans] == [None, None]
    assert r.distributed == () and "distributed" not in r.to_dict()
    # the same two files named as our trainer names ranks are a 2-rank job
    ranked = tmp_path / "ranked"
    ranked.mkdir()
    for i, src in enumerate(sorted(tmp_path.glob("*.pt.trace.json.gz"))):
        shutil.copy(src, ranked / src.name.replace(".1795", f"_rank{i}.1795"))  # myhost_41233_rank0.1795...
    assert [len(c.ranks) for c in analyze(ranked).distributed] == [2]


def synced_queue_trace(steps: int = 3) -> dict:
    """Each 1000 µs step: two kernels launched back to back, then the host blocks in cudaStreamSynchronize
    (10..900 µs) while the GPU runs kernel 1 (20..200), idles, and runs the already-queued kernel 2
    (800..890) just before the sync returns; then 90 µs of host ops. GPU busy: 27% of the step."""
    ev = []
    for k in range(steps):
        b, c = 1_000_000 + 1000 * k, 2 * k + 1
        host = [("user_annotation", f"ProfilerStep#{k}", 0, 1000, {}),
                ("cuda_runtime", "cudaLaunchKernel", 0, 5, {"correlation": c}),
                ("cuda_runtime", "cudaLaunchKernel", 5, 5, {"correlation": c + 1}),
                ("cuda_runtime", "cudaStreamSynchronize", 10, 890, {}),
                ("cpu_op", "aten::add", 900, 90, {})]
        ev += [{"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": b + t, "dur": d, "args": a}
               for cat, name, t, d, a in host]
        ev += [{"ph": "X", "cat": "kernel", "name": f"kernel_{j}", "pid": 0, "tid": 7, "ts": b + t, "dur": d,
                "args": {"correlation": c + j, "device": 0, "stream": 7}}
               for j, t, d in ((0, 20, 180), (1, 800, 90))]
    return {"traceEvents": ev}


def test_a_gap_while_the_host_is_blocked_in_a_sync_is_not_the_devices_own_idle():
    r = analyze_trace(synced_queue_trace(), "w", "1")
    assert r.profiled.gpu_busy_pct == pytest.approx(27.0)
    assert r.metrics.syncs_per_step == 1 and r.metrics.sync_ms_per_step == pytest.approx(0.89)
    assert r.verdict == "host_bound"
    bd = r.breakdown_profiled
    assert bd.ms_per_step("device_idle") == pytest.approx(0.0)
    # launching before the sync (0..20), the queued wait (200..800), relaunching after it (890..990)
    assert bd.ms_per_step("sync") == pytest.approx(0.02 + 0.6 + 0.1)
    assert bd.ms_per_step("other_host") == pytest.approx(0.01)  # 990..1000: no op running

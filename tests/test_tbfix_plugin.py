"""stepscope.plugin_copy through torch-tb-profiler 0.4.3's own HTTP API: one real TensorBoard on 127.0.0.1 serves
each recorded trace twice, as plain tensorboard_trace_handler wrote it ("before/<scenario>") and as
export_tensorboard corrected it ("after/<scenario>"). No GPU needed: the traces are committed.

    pytest tests/test_tbfix_plugin.py -q      # about 40 s on 2 cores; TensorBoard's start is most of it

Expected values are computed here from the trace itself (interval arithmetic over its events), not taken
from the plugin, and the Overview's numbers are whole microseconds, so they are compared within 1 us.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from few_by_default import few_by_default
from stepscope.plugin_copy import export_tensorboard
from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace import files as trace_files

DATA = Path(__file__).parent / "data"
SCENARIOS = ["eager_bs128", "slow_dataset", "cuda_graph", "cpu_resnet"]
READ_BY_EVERY_RUN = ["eager_bs128", "slow_dataset"]  # what the tests other than the parametrized one read
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
FRAME_LINE = re.compile(r"\([0-9]+\)$")  # how the plugin's page finds a frame's line (static/index.html)


@pytest.fixture(scope="module")
def tb(tmp_path_factory, request):
    """TensorBoard on the scenarios the selected tests read: the plugin parses every run it serves, read or
    not, so a scenario whose case is left out of this session (`slow`) is not served either."""
    params = [item.callspec.params for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec")]
    wanted = set(READ_BY_EVERY_RUN) | {p["scenario"] for p in params if "scenario" in p}
    logdir = tmp_path_factory.mktemp("plugin_copy") / "logs"
    scenarios = [s for s in SCENARIOS if s in wanted]
    for scenario in scenarios:
        src = logdir / "before" / scenario
        src.mkdir(parents=True)
        f = next((DATA / scenario).glob("*.pt.trace.json.gz"))
        shutil.copy(f, src / f.name)
        export_tensorboard(src, logdir / "after" / scenario)
    with TensorBoard(logdir, startup_timeout_s=180) as server:  # a loaded 2-core machine: start-up takes a while
        server.wait_for_runs([f"{side}/{s}" for side in ("before", "after") for s in scenarios])
        server.scenarios = scenarios
        yield server


class Run:
    """One run's only (worker, span), and GETs against it."""

    def __init__(self, tb: TensorBoard, name: str) -> None:
        self.tb, self.name = tb, name
        self.worker, self.span = tb.first_worker_span(name)

    def get(self, route: str, **params):
        return self.tb.profiler(route, run=self.name, worker=self.worker, span=self.span, **params)

    def overview(self) -> dict[str, int]:
        perf = self.get("overview")["performance"][0]
        return {"Step": perf["value"], **{c["name"]: c["value"] for c in perf["children"]}}

    def recommendations(self) -> str:
        return self.get("overview")["recommendations"]

    def op_rows(self, group_by: str = "Operation") -> list[dict]:
        return self.get("operation/table", group_by=group_by)["data"]


def runs(tb, scenario: str) -> tuple[Run, Run]:
    return Run(tb, f"before/{scenario}"), Run(tb, f"after/{scenario}")


def load(scenario: str) -> dict:
    return trace_files.load_trace(next((DATA / scenario).glob("*.pt.trace.json*")))


# --- interval arithmetic over the trace, to compute what the plugin should report ---------------------

def union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return out


def length(spans) -> float:
    return sum(e - s for s, e in union(spans))


def clip(spans, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)]


def minus(spans, cut):
    out, cut = [], union(cut)
    for s, e in union(spans):
        for c0, c1 in cut:
            if c1 <= s or c0 >= e:
                continue
            if c0 > s:
                out.append((s, c0))
            s = max(s, c1)
        if e > s:
            out.append((s, e))
    return out


def spans_of(trace: dict, cats=(), names=()) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"] if e.get("ph") == "X"
            and (e.get("cat") in cats or e.get("name") in names)]


def per_step_average(trace: dict, role, higher_priority) -> float:
    """Average over ProfilerSteps of |role within the step, minus what the plugin files first|: its
    Overview assigns each instant to the first of Kernel, Memcpy, Memset, Communication, Runtime,
    DataLoader, CPU Exec, Other that covers it (profiler/overall_parser.py:39-55)."""
    steps = step_spans(trace)
    return sum(length(minus(clip(role, a, b), clip(higher_priority, a, b))) for a, b in steps) / len(steps)


def step_spans(trace: dict) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]


def device_spans(trace):
    return spans_of(trace, cats=("kernel", "gpu_memcpy", "gpu_memset"))


def launch_spans(trace):
    return spans_of(trace, cats=("cuda_runtime", "cuda_driver"))


def assert_steps_are_host_spans(trace):
    """The expected values above use host step spans; that holds when each step's GPU work ends before
    its host span does (the plugin then keeps the host span, profiler/event_parser.py:376-389)."""
    steps = sorted(step_spans(trace))
    launches = {e["args"]["correlation"]: e["ts"] for e in trace["traceEvents"]
                if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    for e in trace["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            launched_at = launches[e["args"]["correlation"]]  # and none left over from before the window
            step = next((s for s in steps if s[0] <= launched_at <= s[1]), None)
            assert step is None or e["ts"] + e["dur"] <= step[1]


# --- the plugin lists each run once -----------------------------------------------------------------------

def test_each_run_is_listed_once_and_originals_are_not(tb):
    listed = tb.profiler("runs")["runs"]
    assert sorted(listed) == sorted(f"{side}/{s}" for side in ("before", "after") for s in tb.scenarios)


# --- what was wrong, now right ----------------------------------------------------------------------------

def test_operator_device_time_is_the_device_work_the_operators_launched(tb):
    before, after = runs(tb, "eager_bs128")
    trace = load("eager_bs128")
    assert before.get("operation", group_by="Operation")["device_self_time"] is None  # 0 for every op
    assert all(r["device_self_duration"] == 0 for r in before.op_rows())

    pie = after.get("operation", group_by="Operation")
    self_total = sum(v for _, v in pie["device_self_time"]["rows"])
    ops = {e["args"]["External id"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    launched = {e["args"]["correlation"] for e in trace["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e["args"].get("External id") in ops}
    expected = sum(e["dur"] for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and e["args"]["correlation"] in launched)
    # Float64 steps near ts = 4.4e12 us are 2**-10 us; the plugin subtracts two per device event.
    assert self_total == pytest.approx(expected, abs=2 * 2.0**-10 * 816)
    kernel_total = sum(r[3] for r in after.get("kernel/table", group_by="Kernel")["data"]["rows"])
    assert 0.95 * kernel_total < self_total < 1.05 * kernel_total  # + memcpy/memset, - rounding per row
    conv = next(r for r in after.op_rows() if r["name"] == "aten::cudnn_convolution")
    assert conv["device_self_duration"] > 500 and conv["device_total_duration"] >= conv["device_self_duration"]
    module = after.get("module")["data"][0]  # the Module view gets device time through the same tree
    assert module["name"] == "ResNet_0" and module["device_duration"] > 0


def test_runtime_is_the_launch_time_that_was_lumped_into_cpu_exec(tb):
    before, after = runs(tb, "eager_bs128")
    trace = load("eager_bs128")
    assert_steps_are_host_spans(trace)
    b, a = before.overview(), after.overview()
    assert b["Runtime"] == 0 and a["Runtime"] > 1000
    expected = per_step_average(trace, launch_spans(trace), device_spans(trace))
    assert a["Runtime"] == pytest.approx(expected, abs=1)
    assert a["Runtime"] + a["CPU Exec"] == pytest.approx(b["CPU Exec"], abs=2)  # moved, not invented
    for unchanged in ("Step", "Kernel", "Memcpy", "Memset", "DataLoader", "Other"):
        assert a[unchanged] == b[unchanged], unchanged


def test_dataloader_time_and_the_recommendation_that_follows(tb):
    before, after = runs(tb, "slow_dataset")
    trace = load("slow_dataset")
    assert_steps_are_host_spans(trace)
    b, a = before.overview(), after.overview()
    assert b["DataLoader"] == 0
    assert "DataLoader" not in before.recommendations() and "increase batch size" in before.recommendations()

    expected = per_step_average(trace, spans_of(trace, names=[DATALOADER]),
                                device_spans(trace) + launch_spans(trace))
    assert a["DataLoader"] == pytest.approx(expected, abs=1)
    assert a["DataLoader"] > 0.75 * a["Step"]  # a per-sample Python Dataset: most of the step
    share = re.search(r"([0-9.]+)% of the step time is in DataLoader", after.recommendations())
    assert share and float(share.group(1)) == pytest.approx(100 * a["DataLoader"] / a["Step"], abs=0.1)
    assert "num_workers" in after.recommendations()


def test_call_stacks_show_for_a_with_stack_trace(tb):
    before, after = runs(tb, "eager_bs128")
    assert not any(r["has_call_stack"] for r in before.op_rows())
    conv = next(r for r in after.op_rows() if r["name"] == "aten::conv2d")
    assert conv["has_call_stack"]
    stacks = after.get("operation/stack", op_name="aten::conv2d", group_by="Operation")["data"]
    assert sum(r["calls"] for r in stacks) == conv["calls"]  # every forward conv was called from Python
    stem = ("torch/nn/modules/conv.py(534): _conv_forward;torch/nn/modules/conv.py(552): forward;"
            "torch/nn/modules/module.py(1783): _call_impl;torchvision/models/resnet.py(266): _forward_impl;")
    assert any(r["call_stack"].startswith(stem) for r in stacks)  # innermost frame first, like torch < 1.12
    for row in stacks:
        for frame in row["call_stack"].split(";"):
            file_and_line = ":".join(frame.strip().split(":")[:-1])
            assert FRAME_LINE.search(file_and_line), frame  # the page can link every frame to its line

    shaped = next(r for r in after.op_rows("OperationAndInputShape") if r["name"] == "aten::conv2d")
    assert shaped["has_call_stack"]
    by_shape = after.get("operation/stack", op_name="aten::conv2d", input_shape=shaped["input_shape"],
                         group_by="OperationAndInputShape")["data"]
    assert by_shape and all(r["call_stack"] for r in by_shape)


# --- nothing the plugin showed before is lost -------------------------------------------------------------

# The same checks on each trace; by default on the two GPU traces the other tests read and on the CUDA-graph
# one (kernels launched by cudaGraphLaunch); the CPU-only trace (no Kernel view) is in the slow set: CPU-only
# plugin copies are served and read by default in test_stepscope_tensorboard.py (a plain loop's traces) and
# test_profiler_tab_browser.py (the trainer's run).
@pytest.mark.parametrize("scenario", few_by_default(SCENARIOS, keep=["eager_bs128", "slow_dataset", "cuda_graph"]))
def test_every_view_and_number_the_plugin_showed_is_still_there(tb, scenario):
    before, after = runs(tb, scenario)
    assert tb.profiler("views", run=after.name) == tb.profiler("views", run=before.name)
    views = tb.profiler("views", run=after.name)

    b_over, a_over = before.get("overview"), after.get("overview")
    assert [r[0] for r in a_over["steps"]["rows"]] == [r[0] for r in b_over["steps"]["rows"]]
    def calls(run, group_by):
        return sorted((r["name"], str(r.get("input_shape")), r["calls"]) for r in run.op_rows(group_by))
    for group_by in ("Operation", "OperationAndInputShape"):
        assert calls(after, group_by) == calls(before, group_by)

    if "Kernel" in views:
        assert after.get("kernel/table", group_by="Kernel") == before.get("kernel/table", group_by="Kernel")

        def by_kernel(run):  # the by-operator table now names operators; per kernel nothing may go
            totals: dict = {}
            for r in run.get("kernel/table")["data"]["rows"]:
                calls, total = totals.get(r[0], (0, 0.0))
                totals[r[0]] = (calls + r[8], total + r[9])
            return {k: (c, round(t, 3)) for k, (c, t) in totals.items()}
        assert by_kernel(after) == by_kernel(before)

    if "Memory" in views:
        assert after.get("memory_curve")["metadata"]["peaks"] == before.get("memory_curve")["metadata"]["peaks"]
        def allocations(run):
            return {device: len(rows) for device, rows in run.get("memory_events")["rows"].items()}
        assert allocations(after) == allocations(before)

    if "Module" in views:
        def modules(nodes):
            return [(n["name"], n["occurences"], n["operators"], modules(n["children"])) for n in nodes]
        assert modules(after.get("module")["data"]) == modules(before.get("module")["data"])

    assert after.get("tree")["children"]

    def trace_route(run):
        return json.loads(tb.get_bytes("/data/plugin/pytorch_profiler/trace", run=run.name,
                                       worker=run.worker, span=run.span))["traceEvents"]
    recorded = Counter(e.get("name", "") for e in load(scenario)["traceEvents"])
    for run in (before, after):  # the whole trace, plus the plugin's GPU-utilisation counters
        assert not recorded - Counter(e.get("name", "") for e in trace_route(run))

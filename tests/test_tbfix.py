"""Unit tests for stepscope.plugin_copy: the rewrite (the streamed one and its reference, checked equal by
on_disk.adapt_trace) on events cut from the real H200 traces in tests/data, and the
plugin's own parser (torch-tb-profiler 0.4.3, in-process, no server) on every committed trace.

    pytest tests/test_tbfix.py -q        # about 20 s on 2 cores, most of it the plugin parsing host_bound

The HTTP checks (operator device time, Runtime, DataLoader, call stacks through TensorBoard) are in
tests/test_tbfix_plugin.py.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import pytest
from few_by_default import few_by_default
from on_disk import adapt_trace
from reference.dict_rewrite import plugin_step_spans
from stepscope.plugin_copy import export_tensorboard, write_adapted_pair
from stepscope.plugin_copy.rules import UNLINKED_KEY
from stepscope.trace import files as trace_files
from torch_tb_profiler.profiler.data import RunProfileData
from torch_tb_profiler.profiler.event_parser import EventParser
from torch_tb_profiler.profiler.run_generator import RunGenerator

DATA = Path(__file__).parent / "data"
SCENARIOS = sorted(p.name for p in DATA.iterdir() if p.is_dir() and list(p.glob("*.pt.trace.json*")))


_LOADED: dict[str, dict] = {}


def load(scenario: str) -> dict:
    """The scenario's trace, parsed once per session: treat it as read-only."""
    if scenario not in _LOADED:
        _LOADED[scenario] = load_fresh(scenario)
    return _LOADED[scenario]


def load_fresh(scenario: str) -> dict:
    return trace_files.load_trace(next((DATA / scenario).glob("*.pt.trace.json*")))


def plugin_parse(trace: dict):
    """What the plugin's loader does with one trace file (profiler/loader.py:_process_data)."""
    logging.getLogger("pytorch_profiler").setLevel(logging.ERROR)  # it warns once per odd kernel
    data = RunProfileData.from_json("w", "1", trace)  # it only reads the dict
    data.trace_file_path = "unused.json"
    return data, RunGenerator("w", "1", data).generate_run_profile()


def by_name(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("name") == name]


def conv_slice() -> list[dict]:
    """The first forward aten::conv2d of eager_bs128: its enclosing Python frames, its child ops, their
    launches and the device work they launched, as recorded."""
    ev = load("eager_bs128")["traceEvents"]
    conv = next(e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::conv2d" and e["tid"] == 419)
    start, end = conv["ts"], conv["ts"] + conv["dur"]
    frames = [e for e in ev if e.get("cat") == "python_function" and e["tid"] == conv["tid"]
              and e["ts"] <= start <= e["ts"] + e["dur"]]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e["tid"] == conv["tid"]
           and start <= e["ts"] and e["ts"] + e["dur"] <= end]
    ids = {e["args"]["External id"] for e in ops}
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and e["args"].get("External id") in ids]
    corr = {e["args"]["correlation"] for e in launches}
    device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset") and e["args"].get("correlation") in corr]
    return frames + ops + launches + device


# --- 1. launches become runtime events -------------------------------------------------------------------

def test_launch_categories_become_runtime_and_keep_their_operator():
    events = conv_slice()
    out = adapt_trace({"traceEvents": events})["traceEvents"]
    launches = [(a, b) for a, b in zip(events, out) if a.get("cat") == "cuda_runtime"]
    assert len(launches) == 27
    for before, after in launches:
        assert after["cat"] == "runtime"
        assert after["args"]["External id"] == before["args"]["External id"]  # still its aten op
        assert after["args"]["correlation"] == before["args"]["correlation"]


def test_driver_launches_become_runtime():
    ev = load("eager_bs128")["traceEvents"]
    driver = [e for e in ev if e.get("cat") == "cuda_driver"]
    assert [e["name"] for e in driver] == ["cuLaunchKernel"] * 6  # cuBLASLt's GEMMs launch via the driver
    corr = {e["args"]["correlation"] for e in driver}
    gemms = [e for e in ev if e.get("cat") == "kernel" and e["args"]["correlation"] in corr]
    out = adapt_trace({"traceEvents": driver + gemms})["traceEvents"]
    assert len(gemms) == 6 and [e["cat"] for e in out[:6]] == ["runtime"] * 6


def test_graph_launch_outside_any_operator_goes_to_the_root_with_its_kernels():
    ev = load("cuda_graph")["traceEvents"]
    (launch, _), steps = by_name(ev, "cudaGraphLaunch"), [e for e in ev if e["name"].startswith("ProfilerStep#")]
    assert "External id" not in launch["args"]  # outside every op: torch records no id
    device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
              and e["args"]["correlation"] == launch["args"]["correlation"]]
    out = adapt_trace({"traceEvents": steps + [launch] + device})["traceEvents"]
    assert out[len(steps)]["cat"] == "runtime" and out[len(steps)]["args"]["External id"] == 0
    assert {e["args"]["External id"] for e in out[len(steps) + 1:]} == {0}
    assert len(device) == 408  # the whole training step, replayed by one launch


def test_sync_outside_every_step_stays_invisible_but_in_step_syncs_show():
    ev = load("item_per_layer")["traceEvents"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    flush = by_name(ev, "cudaDeviceSynchronize")
    in_step = by_name(ev, "cudaStreamSynchronize")  # the .item() after each conv
    assert len(flush) == 1 and len(in_step) == 40
    out = adapt_trace({"traceEvents": steps + flush + in_step})["traceEvents"]
    assert out[len(steps)]["cat"] == "cuda_runtime"
    assert {e["cat"] for e in out[len(steps) + 1:]} == {"runtime"}


# --- 2. DataLoader spans -----------------------------------------------------------------------------------

DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def dataloader_step() -> list[dict]:
    ev = load("slow_dataset")["traceEvents"]
    step = by_name(ev, "ProfilerStep#3")[0]
    end = step["ts"] + step["dur"]
    return [e for e in ev if e.get("ph") == "X" and e.get("tid") == step["tid"] and step["ts"] <= e["ts"] <= end
            and e.get("cat") in ("user_annotation", "cpu_op")]


def test_dataloader_span_becomes_an_operator_event_and_other_annotations_do_not():
    events = dataloader_step()
    out = {e["name"]: e["cat"] for e in adapt_trace({"traceEvents": events})["traceEvents"]
           if e["cat"] != "cpu_op" or e["name"] == DATALOADER}
    assert out == {"ProfilerStep#3": "user_annotation", "data": "user_annotation", DATALOADER: "cpu_op",
                   "forward": "user_annotation", "backward": "user_annotation", "optimizer": "user_annotation",
                   "Optimizer.step#SGD.step": "user_annotation",
                   "Optimizer.zero_grad#SGD.zero_grad": "user_annotation"}


def test_dataloader_span_that_straddles_an_operator_is_left_alone():
    events = dataloader_step()
    span = by_name(events, DATALOADER)[0]
    first_op_after = min((e for e in events if e["cat"] == "cpu_op" and e["ts"] > span["ts"] + span["dur"]),
                         key=lambda e: e["ts"])
    late = dict(span, dur=first_op_after["ts"] + first_op_after["dur"] / 2 - span["ts"])
    out = adapt_trace({"traceEvents": [late if e is span else e for e in events]})["traceEvents"]
    assert by_name(out, DATALOADER)[0]["cat"] == "user_annotation"


# --- 3. call stacks ----------------------------------------------------------------------------------------

CONV_STACK = ";".join([
    "torch/nn/modules/conv.py(534): _conv_forward", "torch/nn/modules/conv.py(552): forward",
    "torch/nn/modules/module.py(1783): _call_impl", "torchvision/models/resnet.py(266): _forward_impl",
    "torchvision/models/resnet.py(284): forward", "torch/nn/modules/module.py(1783): _call_impl",
    "record_scenarios.py(89): _loss", "record_scenarios.py(111): step", "record_scenarios.py(200): record",
    "record_scenarios.py(221): main", "record_scenarios.py(226): <module>"])


def test_call_stack_is_the_enclosing_python_frames_innermost_first():
    out = adapt_trace({"traceEvents": conv_slice()})["traceEvents"]
    ops = [e for e in out if e["cat"] == "cpu_op"]
    assert len(ops) == 18
    # Every op under the same Python call shares its stack; C functions and "nn.Module: X" are not frames.
    assert {e["args"].get("Call stack") for e in ops} == {CONV_STACK}


def test_ops_without_python_frames_get_no_stack_and_existing_stacks_are_kept():
    ev = load("eager_bs128")["traceEvents"]
    backward = [e for e in ev if e.get("cat") == "cpu_op" and e["tid"] == 443][:50]  # autograd's thread
    frames = [e for e in ev if e.get("cat") == "python_function"]
    # An op whose producer already wrote a stack keeps it.
    mine = next(dict(e, args={"Call stack": "mine.py(1): f"}) for e in conv_slice() if e["cat"] == "cpu_op")
    out = adapt_trace({"traceEvents": backward + frames + [mine]})["traceEvents"]
    assert all("Call stack" not in e["args"] for e in out[:len(backward)])
    assert out[-1]["args"]["Call stack"] == "mine.py(1): f"


# --- 4. the zero-length-step guard -------------------------------------------------------------------------

def three_steps_with_a_cpu_only_middle(launch_cat: str) -> dict:
    """Step 0 launches a kernel that runs past step 1; step 1 launches nothing; step 2 launches one."""
    def x(cat, name, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    ev = [x("user_annotation", f"ProfilerStep#{i}", 100 * i, 99, **{"External id": 90 + i}) for i in range(3)]
    for ext, ts, kernel_ts, kernel_dur in ((1, 10, 20, 230), (3, 210, 260, 30)):
        ev += [x("cpu_op", "aten::mm", ts, 20, **{"External id": ext}),
               x(launch_cat, "cudaLaunchKernel", ts + 2, 5, **{"External id": ext, "correlation": ext * 11}),
               x("kernel", "gemm", kernel_ts, kernel_dur, pid=0, tid=7, **{"External id": ext, "correlation": ext * 11, "device": 0})]
    ev.append(x("cpu_op", "aten::add", 110, 20, **{"External id": 2}))
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "computeMajor": 9, "computeMinor": 0}]}


def test_naive_runtime_rewrite_crashes_the_plugin_on_a_cpu_only_step():
    with pytest.raises(ZeroDivisionError):  # profiler/run_generator.py:87, a zero-length step
        plugin_parse(three_steps_with_a_cpu_only_middle("runtime"))


def test_guard_unlinks_the_launch_that_would_empty_a_step():
    out = adapt_trace(three_steps_with_a_cpu_only_middle("cuda_runtime"))
    launches = [e for e in out["traceEvents"] if e["name"] == "cudaLaunchKernel"]
    assert [e["cat"] for e in launches] == ["runtime", "runtime"]
    assert "correlation" not in launches[0]["args"] and launches[0]["args"][UNLINKED_KEY] == 11
    assert launches[1]["args"]["correlation"] == 33  # step 2's launch keeps its kernel
    data, profile = plugin_parse(out)
    assert data.steps_names == ["0", "1", "2"]
    assert all(c.costs[-1] > 0 for c in data.steps_costs)
    assert profile.overview["performance"][0]["value"] > 0


# By default an eager GPU step and a CUDA graph, with and without ProfilerStep#N, and the data-bound run with
# them (its DataLoader span rewritten). The slow set adds big_batch, eager_bs128's step at a larger batch, and
# the data-bound run without steps: the same paths at more cost.
GUARD_CASES = [(scenario, with_steps) for scenario in ["big_batch", "cuda_graph", "eager_bs128", "slow_dataset"]
               for with_steps in (True, False)]


@pytest.mark.parametrize("case", few_by_default(
    GUARD_CASES, ids=[f"{w}-{s}" for s, w in GUARD_CASES],
    keep=["True-cuda_graph", "False-cuda_graph", "True-eager_bs128", "False-eager_bs128", "True-slow_dataset"]))
def test_guard_predicts_the_steps_the_plugin_builds(case):
    scenario, with_steps = case
    events = [e for e in load(scenario)["traceEvents"]
              if with_steps or not str(e.get("name", "")).startswith("ProfilerStep#")]
    adapted = adapt_trace({"traceEvents": events})["traceEvents"]
    runtime = {i for i, e in enumerate(adapted) if e.get("cat") == "runtime"}
    data = RunProfileData("w", "1", {"traceEvents": adapted})
    parser = EventParser()
    parser.parse(data.events, data.forward_backward_events)
    predicted = plugin_step_spans(adapted, runtime)
    assert len(predicted) == len(parser.steps) == (2 if with_steps else 1)
    for mine, theirs in zip(predicted, parser.steps):
        assert mine == pytest.approx(theirs, abs=1e-6)


def test_forward_backward_links_are_left_alone():
    # Renaming torch's "fwdbwd" flows to 0.4.3's "forward_backward" would switch on its backward-module
    # builder, which crashes on these traces (op_tree.py:292 -> node.py:182, a None start time).
    ev = load("eager_bs128")["traceEvents"]
    links = [e for e in ev if e.get("cat") == "fwdbwd"]
    assert len(links) == 412
    assert adapt_trace({"traceEvents": links})["traceEvents"] == links


# --- 5. purity and robustness ------------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", ["eager_bs128", "slow_dataset", "cuda_graph"])
def test_adapt_trace_does_not_mutate_its_input(scenario):
    trace = load_fresh(scenario)
    before = json.dumps(trace, sort_keys=True)
    out = adapt_trace(trace)
    assert json.dumps(trace, sort_keys=True) == before
    assert out is not trace and out["traceEvents"] is not trace["traceEvents"]
    assert json.dumps(out, sort_keys=True) != before
    assert {k: v for k, v in out.items() if k != "traceEvents"} == {k: v for k, v in trace.items()
                                                                    if k != "traceEvents"}


def test_events_without_name_or_category_no_longer_fail_the_file():
    bad = {"traceEvents": [{"ph": "X", "name": "aten::add", "ts": 1, "dur": 1, "pid": 1, "tid": 1},
                           {"ph": "i", "ts": 2, "pid": 1, "tid": 1}]}
    with pytest.raises(AttributeError, match="lower"):  # the plugin lower-cases a missing category (None)
        plugin_parse(bad)
    out = adapt_trace(bad)["traceEvents"]
    assert out[0]["cat"] == "" and out[1]["name"] == ""
    plugin_parse({"traceEvents": out})


def test_adapt_trace_rejects_what_is_not_a_trace():
    with pytest.raises(ValueError, match="traceEvents"):
        adapt_trace({"events": []})
    with pytest.raises(ValueError, match="list"):
        adapt_trace([])


@functools.cache
def edge_cases() -> dict[str, dict]:
    """eager_bs128's events with one kind left out, made once (at collection) for every case: read-only."""
    ev = load("eager_bs128")["traceEvents"]
    gpu = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation", "ac2g"}
    return {
        "no_gpu_events": [e for e in ev if e.get("cat") not in gpu],
        "no_memory_events": [e for e in ev if e.get("name") != "[memory]"],
        "no_stack": [e for e in ev if e.get("cat") != "python_function"],
        "no_steps": [e for e in ev if not str(e.get("name", "")).startswith("ProfilerStep#")],
        "no_events": [],
    }


@pytest.mark.parametrize("case", sorted(edge_cases()))
def test_plugin_parses_adapted_edge_cases(case):
    events = edge_cases()[case]
    data, profile = plugin_parse(adapt_trace({"traceEvents": events}))
    assert len(data.steps_names) >= 1


# By default: two ranks of one DDP step (GPU-side ProfilerStep#N), a gloo run, a CUDA graph, an eager GPU run
# and a CPU-only Lightning run; the other scenarios repeat these paths at more cost (slow).
@pytest.mark.parametrize("scenario", few_by_default(
    SCENARIOS, keep=["nccl_ddp", "ddp_gloo", "cuda_graph", "eager_bs128", "lightning_cpu"]))
def test_plugin_parses_every_adapted_trace_and_keeps_what_it_showed(scenario):
    trace = load(scenario)
    before, before_profile = plugin_parse(trace)
    after, after_profile = plugin_parse(adapt_trace(trace))
    assert [v.name for v in after_profile.views] == [v.name for v in before_profile.views]
    # the same steps, once each: torch 2.11 also writes ProfilerStep#N on the GPU timeline (nccl_ddp), which
    # the plugin counted as duplicate steps; the adapted copy renames those "GPU ProfilerStep#N"
    assert after.steps_names == list(dict.fromkeys(before.steps_names))
    assert {o.name: o.calls for o in after.op_list_groupby_name} == {o.name: o.calls for o in before.op_list_groupby_name}
    if before.kernel_stat is not None:
        assert after.kernel_stat[["count", "sum"]].equals(before.kernel_stat[["count", "sum"]])
    # What was 0 before: operators' device self time, now exactly the device work their launches started.
    launched = device_time_launched_by_operators(trace)
    assert sum(o.self_device_duration for o in before.op_list_groupby_name) == 0
    got = sum(o.self_device_duration for o in after.op_list_groupby_name)
    assert got == pytest.approx(launched["us"], abs=float_slack_us(launched["events"]))


def device_time_launched_by_operators(trace: dict) -> dict:
    """Total duration (us) and count of the device events whose launch names a cpu_op, from the trace."""
    ev = trace["traceEvents"]
    ops = {e["args"].get("External id") for e in ev if e.get("cat") == "cpu_op"}
    launches = {e["args"].get("correlation") for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e["args"].get("External id") in ops}
    device = [e["dur"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
              and e["args"].get("correlation") in launches]
    return {"us": sum(device), "events": len(device)}


def float_slack_us(n_events: int) -> float:
    """The plugin computes each duration as (ts + dur) - ts on timestamps near 4.4e12 us, where a float64
    step is 2**-10 us: up to 2 steps of error per device event, plus the sum's own rounding."""
    return 2 * n_events * 2.0**-10 + 1e-6


# --- 6. writing runs ---------------------------------------------------------------------------------------

def test_write_adapted_pair_writes_the_original_first_and_the_adapted_copy_where_the_plugin_looks(
        tmp_path, monkeypatch):
    from stepscope.plugin_copy import export

    trace = {"traceEvents": conv_slice()}
    seen = []  # (the copy being written, whether the original was in place by then)
    real_write = export.write_adapted_stream
    monkeypatch.setattr(export, "write_adapted_stream", lambda src, dst, *a: (
        seen.append((dst, src.is_file() and src.name == "host_1.trace.json.gz")), real_write(src, dst, *a))[1])
    adapted, raw = write_adapted_pair(tmp_path, "host_1", "1795259107760373831", trace)
    assert seen == [(adapted, True)]
    assert adapted == tmp_path / "host_1.1795259107760373831.pt.trace.json.gz"
    assert raw == tmp_path / "raw" / "1795259107760373831" / "host_1.trace.json.gz"
    assert trace_files.load_trace(raw) == trace
    assert trace_files.load_trace(adapted) == adapt_trace(trace)
    assert [t.path for t in trace_files.find_plugin_traces(tmp_path)] == [adapted]  # never listed twice


def test_write_adapted_pair_refuses_a_span_the_plugin_would_misread(tmp_path):
    with pytest.raises(ValueError, match="span of digits"):
        write_adapted_pair(tmp_path, "host", "v2", {"traceEvents": []})
    assert list(tmp_path.iterdir()) == []


def test_export_tensorboard_converts_a_plain_run_and_refuses_bad_directories(tmp_path):
    src = tmp_path / "plain"
    src.mkdir()
    for scenario in ("cuda_graph", "cpu_resnet"):  # a GPU run and a CPU run, small ones: each is exported twice
        f = next((DATA / scenario).glob("*.pt.trace.json.gz"))
        (src / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "fixed"
    written = export_tensorboard(src, out)
    assert sorted(p.name for p in written) == sorted(p.name for p in src.iterdir())
    assert [t.path for t in trace_files.find_plugin_traces(out)] == sorted(written)
    assert [t.worker for t in trace_files.find_raw_traces(out)] == ["cpu_resnet", "cuda_graph"]
    again = tmp_path / "again"  # a run of ours exports from its raw originals
    assert sorted(p.name for p in export_tensorboard(out, again)) == sorted(p.name for p in written)

    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        export_tensorboard(src, out)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no trace here")
    with pytest.raises(ValueError, match="no traces found"):
        export_tensorboard(tmp_path / "empty", tmp_path / "x")
    with pytest.raises(ValueError, match="not a directory"):
        export_tensorboard(tmp_path / "missing", tmp_path / "y")


def test_export_tensorboard_leaves_nothing_half_written(tmp_path):
    src = tmp_path / "plain"
    src.mkdir()
    f = next((DATA / "cuda_graph").glob("*.pt.trace.json.gz"))
    (src / f.name).write_bytes(f.read_bytes())
    (src / "w.1795259109156023364.pt.trace.json").write_text('{"traceEvents": "not a list"}')
    with pytest.raises(ValueError, match="traceEvents"):
        export_tensorboard(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()

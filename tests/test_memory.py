"""The memory section of the report (analysis/memory.py), held to the traces' own [memory] events read with
json (not through the analysis), to a CPU loop recorded here with a known leak, and to small traces with known
allocator calls.

    python -m pytest -q -p no:xdist tests/test_memory.py
"""

from __future__ import annotations

import functools
import glob
import json
from pathlib import Path

import numpy as np
import pytest
from in_process import run_main
from on_disk import analyze_trace
from stepscope.cli.main import main as stepscope_main
from stepscope.report.front import analyze
from stepscope.trace.files import load_trace

DATA = Path(__file__).parent / "data"
GIB = 2**30
GPU_RUNS = ["suite/resnet50_pinned", "suite/gpt_large", "holdout/vit_tiny_bs256", "suite/tiny_ops"]


@functools.cache
def _analyzed(run: str):
    """A committed run's report (no telemetry), made once per module: several tests read it, none changes it."""
    return analyze(DATA / run)


@functools.cache
def _trace(run: str) -> dict:
    """The run's trace as json reads it, once per module (read-only)."""
    return load_trace(glob.glob(str(DATA / run / "*.pt.trace.json*"))[0])


def _truth(trace: dict, step: int) -> dict:
    """The step's peak allocated, peak reserved and allocated at its start, from the CUDA [memory] events."""
    events = trace["traceEvents"]
    s = next(e for e in events if e.get("name") == f"ProfilerStep#{step}")
    mem = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1),
                 key=lambda e: e["ts"])
    before = [e for e in mem if e["ts"] < s["ts"]]
    inside = [e for e in mem if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
    start = before[-1]["args"]["Total Allocated"] if before else inside[0]["args"]["Total Allocated"] - inside[0]["args"]["Bytes"]
    return {"peak": max([start] + [e["args"]["Total Allocated"] for e in inside]),
            "reserved": max(([before[-1]["args"]["Total Reserved"]] if before else [])
                            + [e["args"]["Total Reserved"] for e in inside]),
            "start": start, "capacity": trace["deviceProperties"][0]["totalGlobalMem"]}


@pytest.mark.parametrize("run", GPU_RUNS)
def test_each_steps_peak_and_headroom_are_the_traces_own(run):
    trace = _trace(run)
    s = _analyzed(run).spans[0]
    d = s.memory.devices[0]
    assert d.device == "cuda:0" and [x.device for x in s.memory.devices] == ["cuda:0"]  # the CPU's pinned bytes left out
    for st in d.steps:
        t = _truth(trace, st.step)
        assert st.peak_allocated == t["peak"]
        assert st.at_start == t["start"] and st.peak_reserved == t["reserved"]
        assert sum(st.composition.values()) == st.peak_allocated  # the composition sums to the peak
        assert all(v >= 0 for k, v in st.composition.items() if k == "persistent")
        live = sum(b for _, b in st.top)
        assert 0 <= live <= st.peak_allocated - st.at_start + (64 << 20)  # blocks the step allocated
    assert d.capacity == t["capacity"]
    assert d.headroom == t["capacity"] - max(st.peak_reserved for st in d.steps)
    out = s.to_dict()["memory"]["devices"][0]
    assert out["capacity_gib"] == round(t["capacity"] / GIB, 4)


def test_the_peak_of_a_cnn_comes_from_its_convolutions_and_norms():
    d = _analyzed("suite/resnet50_pinned").spans[0].memory.devices[0]
    names = [n for n, _ in d.peak.top]
    assert names[:2] == ["aten::cudnn_convolution", "aten::native_batch_norm"]
    assert d.peak.peak_phase == "backward"  # activations peak as the backward begins


def test_fragmentation_is_reserved_minus_allocated_at_the_peak():
    trace = _trace("holdout/vit_tiny_bs256")
    mem = _analyzed("holdout/vit_tiny_bs256").spans[0].memory
    d = mem.devices[0]
    p = d.peak
    at_peak = [e["args"] for e in trace["traceEvents"] if e.get("name") == "[memory]"
               and e["args"].get("Total Allocated") == p.peak_allocated and e["args"].get("Device Type") == 1]
    assert at_peak and p.reserved_at_peak == at_peak[0]["Total Reserved"]
    frag = (p.reserved_at_peak - p.peak_allocated) / p.reserved_at_peak
    assert ("fragmentation" in [f.id for f in mem.findings]) == (frag >= 0.5 and p.fragmentation >= GIB)
    assert "fragmentation" in [f.id for f in mem.findings]  # 5.2 of 9.9 GiB reserved is free at the peak
    assert any("expandable_segments:True" in r for f in mem.findings for r in f.remedies)


def test_headroom_predicts_a_larger_batch_and_time_is_unchanged():
    s = _analyzed("suite/gpt_large").spans[0]
    ids = [f.id for f in s.memory.findings]
    assert ids == ["headroom"] and s.memory.devices[0].batch_scale > 8  # 7.5 of 79 GiB reserved
    assert all(f.id not in ("headroom", "oom_risk") for f in s.findings)  # the time findings stay apart


def test_a_trace_without_memory_events_has_no_memory_section():
    s = _analyzed("cuda_graph").spans[0]
    assert s.memory is None and "memory" not in s.to_dict()


def test_console_and_markdown_carry_the_memory_section(capsys):
    # the command in-process: its subprocess path is held by tests/test_corrupt_traces.py
    code, out, err = run_main(stepscope_main, ["analyze", DATA / "suite/gpt_large"], capsys)
    assert code == 0, err
    assert "memory cuda:0: peak 4.05 GiB allocated" in out and "headroom" in out
    from stepscope.analysis.render import render_markdown, summary_scalars
    r = _analyzed("suite/gpt_large")
    assert "### Memory" in render_markdown(r)
    sc = summary_scalars(r)
    assert sc["diagnosis/memory/peak_allocated_gib"] == pytest.approx(r.spans[0].memory.devices[0].peak.peak_allocated / GIB)


def _synthetic(allocator_calls: bool, leak: int = 0) -> dict:
    """Four 10 ms steps on a GPU: each allocates 100 MiB in forward and frees it in backward; ``leak`` bytes a
    step stay; with ``allocator_calls``, a cudaMalloc and a cudaFree of 0.5 ms each in every step."""
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 1,
               "args": {"device": 0, "stream": 7, "correlation": 1}}]
    total, addr = 1 * GIB, 1 << 40
    for i in range(4):
        t0 = 1000 + i * 10_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 9000})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": t0 + 100,
                       "dur": 2000})
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0",
                       "pid": 1, "tid": 1, "ts": t0 + 3000, "dur": 2000})
        for dt, b in ((200, 100 << 20), (300, leak), (3500, -(100 << 20))):
            if b:
                total += b
                addr += 1 << 30
                events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                               "ts": t0 + dt, "args": {"Total Reserved": 2 * GIB, "Total Allocated": total,
                                                       "Bytes": b, "Device Id": 0, "Device Type": 1,
                                                       "Addr": addr if b > 0 else addr - (1 << 30) * (2 if leak else 1)}})
        if allocator_calls:
            for dt, name in ((150, "cudaMalloc"), (3600, "cudaFree")):
                events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": t0 + dt,
                               "dur": 500})
    return {"deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 80 * GIB}],
            "traceEvents": sorted(events, key=lambda e: e["ts"])}


def test_allocator_calls_in_every_step_are_churn_with_their_cost():
    with_calls = analyze_trace(_synthetic(True), "w", "1").memory
    without = analyze_trace(_synthetic(False), "w", "1").memory
    churn = [f for f in with_calls.findings if f.id == "allocator_churn"]
    assert len(churn) == 1 and churn[0].cost_ms_per_step == pytest.approx(1.0)
    assert with_calls.devices[0].allocator_syncs_per_step == 1
    assert "allocator_churn" not in [f.id for f in without.findings]
    st = without.devices[0].steps[0]
    assert st.composition["persistent"] == GIB and st.composition["forward"] == 100 << 20
    assert st.peak_phase == "forward" and st.top == (("aten::linear", 100 << 20),)


def test_a_leak_of_4_mib_a_step_is_creep_and_none_is_not():
    leak = analyze_trace(_synthetic(False, 4 << 20), "w", "1").memory
    clean = analyze_trace(_synthetic(False), "w", "1").memory
    creep = [f for f in leak.findings if f.id == "memory_creep"]
    assert len(creep) == 1 and leak.devices[0].creep_bytes_per_step == 4 << 20
    assert "4.0 MiB a step" in creep[0].text and "fills the device" in creep[0].text
    assert "memory_creep" not in [f.id for f in clean.findings]


def _record_loops(loops) -> None:
    """Each (folder, leak): a small CPU loop profiled by torch.profiler with profile_memory into the folder, keeping
    ``leak`` bytes a step alive. In this process (torch is imported here anyway): a loop of the user's own."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    for out, leak in loops:
        keep = []
        m = torch.nn.Linear(256, 256)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=schedule(wait=1, warmup=1,
                     active=5), on_trace_ready=tensorboard_trace_handler(str(out))) as p:
            for _ in range(7):
                m(torch.randn(64, 256)).sum().backward()
                opt.step()
                opt.zero_grad()
                if leak:
                    keep.append(torch.ones(leak // 4))
                p.step()
        del keep


def test_a_cpu_loop_that_keeps_2_mib_a_step_creeps_by_2_mib(tmp_path):
    """Recorded here by torch.profiler: the truth is the loop's own leak (2 MiB a step), and its absence."""
    leaks = (2 << 20, 0)
    _record_loops([(tmp_path / str(leak), leak) for leak in leaks])
    for leak in leaks:
        mem = analyze(tmp_path / str(leak)).spans[0].memory
        d = mem.devices[0]
        assert d.device == "cpu" and d.capacity is None and d.headroom is None
        ids = [f.id for f in mem.findings]
        if leak:
            assert ids == ["memory_creep"] and d.creep_bytes_per_step == pytest.approx(2 << 20, rel=0.05)
        else:
            assert ids == [] and abs(d.creep_bytes_per_step or 0) < 64 << 10


def test_json_document_holds_the_memory_fields_docs_json_lists(capsys):
    code, out, err = run_main(stepscope_main, ["analyze", "--json", DATA / "holdout/vit_tiny_bs256"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    mem = doc["spans"][0]["memory"]
    text = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    for key in [*mem["devices"][0], *mem["devices"][0]["steps"][0], *mem["devices"][0]["steps"][0]["composition_gib"]]:
        assert f'"{key}"' in text, key


def test_the_runs_own_counters_join_the_memory_section():
    """A telemetry with the allocator's counters (what stepscope.schedule and the trainer record on CUDA)."""
    from stepscope.report.front import analyze as front_analyze
    tel = {"steps": 100, "step_ms": 40.0, "mem_peak_allocated_mib": 4200.0, "mem_peak_reserved_mib": 7800.0,
           "mem_allocated_mib": 1400.0, "mem_reserved_mib": 7800.0, "mem_alloc_retries": 3.0, "mem_ooms": 0.0,
           "mem_creep_mib_per_step": 2.5}
    s = front_analyze(DATA / "suite/gpt_large", telemetry=tel).spans[0]
    mem = s.to_dict()["memory"]
    assert mem["measured"]["mem_alloc_retries"] == 3.0
    ids = [f["id"] for f in mem["findings"]]
    assert "alloc_retries" in ids and "memory_creep" in ids
    assert any("2.5 MiB a step" in f["text"] for f in mem["findings"])
    quiet = front_analyze(DATA / "suite/gpt_large", telemetry={**tel, "mem_alloc_retries": 0.0,
                                                               "mem_creep_mib_per_step": 0.0}).spans[0].memory
    assert [f.id for f in quiet.findings] == ["headroom"]


def test_window_counters_are_none_on_a_cpu_and_the_slope_is_least_squares():
    from stepscope.capture.memory_stats import MemoryWindows, creep_slope, merge, read
    assert read() is None  # CUDA never initialised here: nothing read, nothing reset
    w = MemoryWindows()
    w.edge(50, closing=True)
    assert w.telemetry() == {}
    assert creep_slope([(0, 0), (50, 100 << 20)]) is None
    assert creep_slope([(0, 0), (50, 50 << 20), (100, 100 << 20)]) == pytest.approx(1 << 20)
    assert merge({"mem_peak_allocated_mib": 5.0, "mem_ooms": 0.0},
                 {"mem_peak_allocated_mib": 3.0, "mem_ooms": 1.0}) == {"mem_peak_allocated_mib": 5.0, "mem_ooms": 1.0}


def test_the_headroom_prediction_fills_the_device_less_its_context():
    """verify --memory's prediction from a recorded H100 step: the largest batch whose room (the expected peak
    and the fresh memory of each moment's own new block) fits the device less its context."""
    from stepscope.analysis.memory import CONTEXT_BYTES
    from stepscope.demo.verify_headroom import images_interval, prediction
    p = prediction(DATA / "holdout/vit_tiny_bs256", 256)
    trace = _trace("holdout/vit_tiny_bs256")
    capacity = trace["deviceProperties"][0]["totalGlobalMem"]
    assert p["capacity"] == capacity and p["predicted_batch"] > 256
    d = next(d for s in analyze(DATA / "holdout/vit_tiny_bs256").spans for d in s.memory.devices)
    from stepscope.analysis.memory import peak_at, room_at
    assert p["room_needed"] == room_at(d, p["predicted_batch"] / 256) <= capacity - CONTEXT_BYTES
    assert room_at(d, (p["predicted_batch"] + 1) / 256) > capacity - CONTEXT_BYTES  # the largest that fits
    assert p["traced_peak"] <= p["predicted_peak"] <= p["room_needed"]
    assert peak_at(d, 1.0) == pytest.approx(p["traced_peak"])  # at the recorded batch, the recorded peak
    biggest = max(e["args"]["Bytes"] for e in trace["traceEvents"]
                  if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1 and e["args"]["Bytes"] > 0)
    scale = p["predicted_batch"] / 256
    assert p["room_needed"] - p["predicted_peak"] <= scale * biggest  # at most one block more, grown
    mid, low, high = images_interval([10.0, 10.0, 12.0, 8.0], 128)
    assert mid == pytest.approx(12800.0) and low < mid < high
    assert images_interval([10.0], 128) == [None, None, None]


def test_ranks_whose_peaks_differ_are_an_imbalance_and_equal_ones_are_not():
    from stepscope.analysis.memory import rank_imbalance
    even = analyze_trace(_synthetic(False), "w", "1").memory
    heavy = analyze_trace(_synthetic(False, 600 << 20), "w", "1").memory  # keeps 600 MiB more every step
    out = rank_imbalance({0: even, 1: heavy})
    assert [f["id"] for f in out["findings"]] == ["memory_imbalance"] and "rank 1 runs out of memory first" in \
        out["findings"][0]["text"]
    assert out["peak_allocated_gib"]["1"] > out["peak_allocated_gib"]["0"]
    assert rank_imbalance({0: even, 1: even})["findings"] == []
    assert rank_imbalance({0: even, 1: None}) is None
    job = _analyzed("nccl_ddp").distributed[0].memory  # two H100 ranks of one DDP job: the same peak
    assert job["imbalance"] == 1.0 and job["findings"] == []


def test_diff_gives_the_peak_change_with_its_noise():
    from stepscope.report.diff import compare_runs
    from stepscope.report.measure import measure_path
    small, large = (measure_path(DATA / f"suite/resnet18_bs{b}") for b in (32, 1024))
    d = compare_runs(small, large, "bs32", "bs1024")["memory"]
    truth = {b: max(_truth(_trace(f"suite/resnet18_bs{b}"), st.step)["peak"]
                    for st in _analyzed(f"suite/resnet18_bs{b}").spans[0].memory.devices[0].steps)
             for b in (32, 1024)}
    assert d["peak_allocated_delta_gib"] == pytest.approx((truth[1024] - truth[32]) / GIB, abs=1e-3)
    assert d["significant"] and d["headroom_delta_pct"] < 0
    same = compare_runs(small, small, "a", "b")["memory"]
    assert same["peak_allocated_delta_gib"] == 0 and not same["significant"]


def test_a_larger_batch_gets_synthetic_data_for_two_batches_and_its_bytes_are_predicted():
    from stepscope.demo.verify_headroom import SYNTHETIC_SAMPLE_BYTES, _enough_data
    args = ["--data", "synthetic", "--data-placement", "device", "--synthetic-train-size", "4096", "--batch-size", "9000"]
    out, extra = _enough_data(args, 9000)
    assert out[out.index("--synthetic-train-size") + 1] == "18000" and extra == (18000 - 4096) * SYNTHETIC_SAMPLE_BYTES
    host = _enough_data([*args[:3], "host", *args[4:]], 9000)
    assert host[1] == 0
    assert _enough_data(args, 1000) is None
    assert _enough_data(["--data", "cifar10", *args[2:]], 9000) is None


def test_the_parse_collects_memory_samples_as_columns_that_read_as_samples():
    from stepscope.analysis.events import MemoryColumns, MemorySample
    from stepscope.analysis.stream_parse import parse_trace_file

    (path,) = (DATA / "suite" / "resnet50_pinned").glob("*.pt.trace.json.gz")
    trace = parse_trace_file(path, "w", "s")
    cols = trace.memory
    assert isinstance(cols, MemoryColumns) and len(cols) > 100
    assert len(cols.columns) == len(MemorySample._fields) and {len(c) for c in cols.columns} == {len(cols)}
    samples = tuple(cols)
    assert samples[7] == cols[7] and cols == samples and MemoryColumns.of(samples) == cols
    raw = [e for e in _trace("suite/resnet50_pinned")["traceEvents"] if e.get("name") == "[memory]"]
    assert [s.total_allocated for s in samples] == [e["args"]["Total Allocated"] for e in raw]
    again = MemoryColumns()  # a reader that makes samples one by one fills the same columns
    again.extend(samples[:-1])
    again.append(samples[-1])
    assert again == cols
    # kept as arrays (a few bytes a sample, not a Python int per field), read back as Python numbers
    assert [c.dtype.name for c in cols.columns[:-1]] == ["float64"] + ["int64"] * (len(MemorySample._fields) - 2)
    assert [type(v) for v in samples[7]][:3] == [float, int, int]
    beyond = MemoryColumns([[1.0], [1], [2**64 - 1], [0], [0], [0], [0], [None]])  # past int64: kept exactly
    assert tuple(beyond)[0].total_allocated == 2**64 - 1
    odd = MemoryColumns([[1.0, 2.0], [1, 1], [5, 7.5], [0, 0], [0, 0], [0, 0], [0, 0], [3, 4]])  # never converted
    assert [s.total_allocated for s in odd] == [5, 7.5] and isinstance(odd.field("tid"), np.ndarray)


def test_the_compiled_reader_reads_every_field_of_the_memory_events(monkeypatch):
    """The compiled trace reader and the per-event (msgspec) rules give the same [memory] samples: totals,
    reserved, bytes, address, device and thread; the trace's own reserved figure reaches the analysis."""
    from stepscope.analysis.stream_parse import parse_trace_file
    from stepscope.trace import fastread
    if not fastread.available():
        pytest.skip("the compiled trace reader is not built in this install")
    (path,) = (DATA / "big_batch").glob("*.pt.trace.json*")
    compiled = parse_trace_file(path, "w", "s").memory
    monkeypatch.setenv(fastread.PURE_ENV, "1")
    pure = parse_trace_file(path, "w", "s").memory
    assert [list(c) for c in compiled.columns] == [list(c) for c in pure.columns]
    reserved = max(e["args"]["Total Reserved"] for e in _trace("big_batch")["traceEvents"]
                   if e.get("name") == "[memory]")
    assert reserved > 0 and max(compiled.field("total_reserved")) == reserved


def test_the_batch_prediction_leaves_room_for_each_moments_new_block():
    """A block must be found in one piece when it is asked for: the prediction leaves room for each moment's new
    block beside what is live then, so the same step without that room would be predicted a larger batch; the
    room is at most one block beside the peak, the largest Bytes of the step's [memory] events in the raw
    trace, grown with the batch."""
    from dataclasses import replace

    from stepscope.analysis.memory import CONTEXT_BYTES, batch_scale, peak_at, room_at
    report = _analyzed("big_batch")
    d = report.spans[0].memory.devices[0]
    p = d.peak
    unblocked = replace(d, room=d.scaling)
    assert batch_scale(unblocked) > d.batch_scale
    trace = _trace("big_batch")
    steps = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
             if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"}
    lo, hi = steps[f"ProfilerStep#{p.step}"]
    in_step = [e["args"]["Bytes"] for e in trace["traceEvents"] if e.get("name") == "[memory]"
               and e["args"].get("Device Type") == 1 and lo <= e["ts"] <= hi]
    assert p.largest_allocation == max(in_step)
    s = d.batch_scale
    assert room_at(d, s) == pytest.approx(d.capacity - CONTEXT_BYTES)
    assert peak_at(d, s) < room_at(d, s) <= peak_at(d, s) + s * max(in_step)


# an MLP whose weights outweigh its activations, trained with AdamW: its gradients and the optimizer's
# temporaries have the weights' sizes, and only the activations grow with the batch
MLP_WIDTH, MLP_LAYERS, MLP_BATCH = 1024, 4, 256


def _record_mlp(out: Path, batch: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.GELU())
                                  for _ in range(MLP_LAYERS)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x, y = torch.randn(batch, MLP_WIDTH), torch.randn(batch, MLP_WIDTH)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=2), on_trace_ready=tensorboard_trace_handler(str(out))) as p:
        for _ in range(4):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            p.step()


def test_what_grows_with_the_batch_is_told_from_gradients_and_optimizer_temporaries(tmp_path):
    """Recorded here at a batch and at four times it: the peak that the smaller run predicts for the larger
    batch is the larger run's measured peak within 5%, where letting everything above the step's start grow
    with the batch (the gradients and AdamW's temporaries too) overshoots it by more than half. The gradients
    the backward allocated are found among the fixed bytes: at least the weights' own size."""
    from stepscope.analysis.memory import peak_at, room_at
    for batch in (MLP_BATCH, 4 * MLP_BATCH):
        _record_mlp(tmp_path / str(batch), batch)
    small, large = (analyze(tmp_path / str(b)).spans[0].memory.devices[0] for b in (MLP_BATCH, 4 * MLP_BATCH))
    measured = large.peak.peak_allocated
    assert peak_at(small, 4.0) == pytest.approx(measured, rel=0.05)
    p = small.peak
    kept = p.composition["persistent"] + p.composition["optimizer_state_new"]
    assert kept + 4 * (p.peak_allocated - kept) > 1.5 * measured
    weights = MLP_LAYERS * (MLP_WIDTH * MLP_WIDTH + MLP_WIDTH) * 4
    fixed_grown = max(fixed for fixed, _ in small.scaling) - p.composition["persistent"]
    assert fixed_grown >= weights  # the gradients (and the optimizer's temporaries) stay as the batch grows
    # the room beside the peak is an activation's block grown (batch x width floats), not a weight-sized one (a
    # gradient or an optimizer temporary, which would count 4x its size)
    activation, weight = MLP_BATCH * MLP_WIDTH * 4, MLP_WIDTH * MLP_WIDTH * 4
    assert 0 < room_at(small, 4.0) - peak_at(small, 4.0) <= 4 * activation < 4 * weight


# a CPU model whose one large kept activation is known from its structure: Tanh saves its output for its
# backward (and the next Linear saves it as its input), so the first Tanh's output, BATCH x WIDE float32, is live
# when the backward begins; Linear outputs are not saved (Tanh's backward reads its output, not its input)
BATCH, IN, WIDE, NARROW = 128, 64, 8192, 1024


def _record_modules(out: Path, with_stack: bool) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    model = torch.nn.Sequential(torch.nn.Linear(IN, WIDE), torch.nn.Tanh(), torch.nn.Linear(WIDE, NARROW),
                                torch.nn.Tanh(), torch.nn.Linear(NARROW, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, IN)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=with_stack,
                 schedule=schedule(wait=1, warmup=1, active=2), on_trace_ready=tensorboard_trace_handler(str(out))) as p:
        for _ in range(4):
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            p.step()


def test_the_bytes_live_at_the_peak_are_told_by_module_where_the_trace_has_module_frames(tmp_path, capsys):
    """Recorded here with with_stack=True: the first Tanh holds its BATCH x WIDE output at the peak; the
    backward's gradients (the WIDE x NARROW weight's among them) are allocated outside any module."""
    _record_modules(tmp_path / "stack", True)
    report = analyze(tmp_path / "stack")
    d = report.spans[0].memory.devices[0]
    for st in d.steps:
        assert st.modules[0] == ("Tanh_0", BATCH * WIDE * 4)
        assert all(not name.startswith("Linear_") or b < BATCH * WIDE * 4 for name, b in st.modules)
        assert st.outside_modules >= WIDE * NARROW * 4  # the weight's gradient, made by the backward
        live = sum(b for _, b in st.top)  # the ops' view of the same bytes (its top 5)
        assert sum(b for _, b in st.modules) + st.outside_modules >= live  # both split the same live blocks
    step = report.to_dict()["spans"][0]["memory"]["devices"][0]["steps"][0]
    assert step["top_modules"][0] == {"name": "Tanh_0", "gib": round(BATCH * WIDE * 4 / GIB, 4)}
    assert step["outside_modules_gib"] == round(d.steps[0].outside_modules / GIB, 4)
    code, out, err = run_main(stepscope_main, ["analyze", tmp_path / "stack"], capsys)
    assert code == 0, err
    assert "memory top modules at the peak: Tanh_0 4 MiB" in out
    from stepscope.analysis.render import render_markdown
    assert "memory top modules at the peak: Tanh_0 4 MiB" in render_markdown(report)


def test_a_trace_without_module_frames_says_nothing_of_modules(tmp_path):
    """The same loop recorded without with_stack, and a committed GPU trace without module frames: no module
    list, not an empty one."""
    _record_modules(tmp_path / "plain", False)
    for report in (analyze(tmp_path / "plain"), _analyzed("suite/tiny_ops")):
        mem = report.spans[0].memory
        assert all(st.modules is None for d in mem.devices for st in d.steps)
        steps = report.to_dict()["spans"][0]["memory"]["devices"][0]["steps"]
        assert all("top_modules" not in st and "outside_modules_gib" not in st for st in steps)
        assert not any("modules" in line for line in mem.lines())


# ---------------------------------------------------------------- allocator churn in the time verdict
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _device_spans(events: list) -> list[tuple[float, float]]:
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in DEVICE_CATS)


def _with_allocator_calls(trace: dict, where: str, steps: int | None = None) -> tuple[dict, list[float]]:
    """A real trace (its events untouched) with a cudaMalloc and a cudaFree added to the main thread of each of
    its first ``steps`` steps: ``where="gap"`` puts the cudaFree inside the step's longest GPU idle gap (from a
    quarter to three quarters of it: the GPU idles inside it and after it until the gap ends, three quarters of
    the gap), and the cudaMalloc inside the step's longest kernel; ``where="kernel"`` puts both inside that
    kernel, where the GPU's queued work hides them. Also returns what the calls cost each step."""
    events = [dict(e) for e in trace["traceEvents"]]
    dev = _device_spans(events)
    step_events = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
                         key=lambda e: e["ts"])
    added, costs = [], []
    for s in step_events[:steps]:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        inside = [(a, b) for a, b in dev if a < hi and b > lo]
        gaps, reach = [], None
        for a, b in inside:
            if reach is not None and a > reach:
                gaps.append((a - reach, reach, a))
            reach = b if reach is None else max(reach, b)
        g, g0, g1 = max(gaps)
        k0, k1 = max(((b - a, a, b) for a, b in inside if lo < a and b < hi))[1:]
        calls = [("cudaMalloc", k0 + (k1 - k0) / 4, (k1 - k0) / 4)]
        if where == "gap":
            calls.append(("cudaFree", g0 + g / 4, g / 2))
            costs.append(g1 - (g0 + g / 4))
        else:
            calls.append(("cudaFree", k0 + (k1 - k0) / 2, (k1 - k0) / 4))
            costs.append(0.0)
        for name, ts, dur in calls:
            added.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": s["pid"], "tid": s["tid"],
                          "ts": ts, "dur": dur, "args": {"correlation": 900_000_000 + len(added)}})
    return {**trace, "traceEvents": events + added}, costs


def test_allocator_calls_that_hold_the_gpu_idle_are_a_time_finding_with_their_cost():
    """A real launch-bound H100 trace (every step kept) with a cudaFree in each step's longest GPU gap: the time
    findings name what the calls cost the step, the GPU's idle inside them and after the cudaFree until its
    next work (three quarters of each gap, measured here on the trace's own device events), and their
    remedies. The verdict stays, and so does the memory's churn finding."""
    trace = _trace("suite/resnet18_bs128")
    plain = _analyzed("suite/resnet18_bs128").spans[0]
    churned, costs = _with_allocator_calls(trace, "gap")
    s = analyze_trace(churned, "w", "1")
    assert plain.metrics.steps == s.metrics.steps == len(costs)  # every step analysed: the cost is their mean
    stalls = [f for f in s.findings if f.id == "allocator_stalls"]
    assert len(stalls) == 1 and "allocator_stalls" not in [f.id for f in plain.findings]
    want_ms = sum(costs) / len(costs) / 1e3
    assert stalls[0].cost_ms_per_step == pytest.approx(want_ms, rel=1e-6)
    assert f"waits {want_ms:.2f} ms" in stalls[0].text and "1 of them cudaFree" in stalls[0].text
    assert any("empty_cache()" in r for r in stalls[0].remedies)
    assert any("expandable_segments:True" in r for r in stalls[0].remedies)
    assert any("pad or bucket" in r for r in stalls[0].remedies)
    assert set(stalls[0].remedies) <= set(s.remedies)
    assert s.verdict == plain.verdict and s.breakdown.total_us == plain.breakdown.total_us
    assert "allocator_churn" in [f.id for f in s.memory.findings]
    out = s.to_dict()
    assert [f for f in out["findings"] if f["id"] == "allocator_stalls"][0]["cost_ms_per_step"] == round(want_ms, 4)


def test_allocator_calls_that_queued_work_hides_or_that_miss_a_step_are_no_time_finding():
    trace = _trace("suite/resnet18_bs128")
    hidden, costs = _with_allocator_calls(trace, "kernel")
    s = analyze_trace(hidden, "w", "1")
    assert costs == [0.0] * 3 and "allocator_stalls" not in [f.id for f in s.findings]
    assert "allocator_churn" in [f.id for f in s.memory.findings]  # churn all the same: the memory side says so
    once, _ = _with_allocator_calls(trace, "gap", steps=1)  # growth in one step is not churn
    s = analyze_trace(once, "w", "1")
    assert "allocator_stalls" not in [f.id for f in s.findings]
    assert "allocator_churn" not in [f.id for f in s.memory.findings]


# ---------------------------------------------------------------- the prediction against the real boundary
BOUNDARY_RUNS = sorted(p.name for p in (DATA / "memory_boundary").iterdir() if p.is_dir())


@pytest.mark.parametrize("family", BOUNDARY_RUNS)
def test_the_predicted_largest_batch_is_within_10_percent_of_the_bisected_boundary(family):
    """Six families recorded on an H100 at a small batch (tests/data/memory_boundary, each with its truth.json:
    the largest batch that trained in a fresh process and the first that ran out of memory, found by bisection
    on the same GPU model without the profiler): the batch the trace predicts is within 10% of the largest that
    fit, and where a larger try ran out of memory, below 1.1 times it."""
    folder = DATA / "memory_boundary" / family
    truth = json.loads((folder / "truth.json").read_text())
    d = next(d for s in analyze(folder).spans if s.memory for d in s.memory.devices if d.capacity)
    predicted = truth["base_batch"] * d.batch_scale
    assert abs(predicted / truth["boundary_fits"] - 1) <= 0.10, (predicted, truth["boundary_fits"])
    if truth["boundary_oom"] is not None:
        assert predicted < 1.1 * truth["boundary_oom"]

"""bench.workloads, the one workload library of the benchmarks and recorders, on the CPU: a step runs
inside the ranges the analysis reads, each knob injects what it says, and the recorded scenarios and the
verdict sets are built from it.

    python -m pytest -q tests/test_bench_workloads.py
"""

import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from bench import scenarios, workloads
from bench.workloads import NO_CLOCK, SlowSamples, TinyOps, Workload, ce_loss, cifar_batch
from torch.profiler import ProfilerActivity, profile

CPU = torch.device("cpu")


def _conv_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


def _ranges(step) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return {e.name for e in prof.events()}


def test_a_step_runs_in_named_ranges_and_trains():
    w = Workload("w", "conv", "cpu_bound", CPU, _conv_net(), cifar_batch(4), ce_loss)
    before = [p.detach().clone() for p in w.model.parameters()]
    names = _ranges(w.step)
    assert {"data", "forward", "backward", "optimizer"} <= names and "host_postprocess" not in names
    assert any(not torch.equal(a, b) for a, b in zip(before, w.model.parameters()))
    assert w.fixed() is None and w.copy_bytes == 0 and w.graph is None


def test_knobs_inject_their_cause():
    calls = []

    def sgd(params):
        calls.append(1)
        return torch.optim.SGD(params, lr=0.1)

    dl = torch.utils.data.DataLoader(SlowSamples(64, 0.0), batch_size=4)
    w = Workload("knobs", "conv", "host_bound", CPU, _conv_net(), cifar_batch(4), ce_loss, opt=sgd, loader=dl,
                 host_work=100, item_hooks=True, fixed=lambda: "the fix")
    assert calls == [1] and type(w.opt) is torch.optim.SGD and w.opt.defaults["lr"] == 0.1
    conv = w.model[0]
    assert len(conv._forward_hooks) == 1 and not w.model[3]._forward_hooks  # one .item() per convolution
    names = _ranges(lambda: w.step(NO_CLOCK))
    assert {"data", "forward", "backward", "optimizer", "host_postprocess"} <= names
    assert w.loader_iter is not None and w.fixed() == "the fix"
    host = Workload("copy", "pooled", "transfer_bound", CPU, workloads.pooled_linear(), cifar_batch(8), ce_loss,
                    host_input=True)
    assert host.copy_bytes == 8 * 3 * 32 * 32 * 4 + 8 * 8


def test_adamw_loop_keeps_cpu_step_counters():
    w = Workload("a", "conv", "launch_bound", CPU, _conv_net(), cifar_batch(2), ce_loss, opt="adamw_loop")
    assert isinstance(w.opt, torch.optim.AdamW) and w.opt.defaults["foreach"] is False


def test_tiny_ops_is_nothing_but_elementwise_ops():
    t = TinyOps(CPU, n_ops=20, name="tiny")
    assert t.name == "tiny" and t.cause == "launch_bound"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t.step()
    ops = [e.name for e in prof.events() if e.name.startswith("aten::")]
    assert ops.count("aten::mul") == 10 and ops.count("aten::add") == 10


def test_the_recorded_scenarios_are_built_from_the_library():
    assert set(scenarios.SCENARIOS) == {"eager_bs32", "eager_bs128", "big_batch", "cuda_graph", "tiny_ops",
                                        "slow_dataset", "host_bound", "item_per_layer", "cpu_resnet"}
    for name in ("cpu_resnet", "item_per_layer", "host_bound", "tiny_ops"):
        w = scenarios.SCENARIOS[name](CPU)
        assert isinstance(w, (Workload, TinyOps)) and w.name == name
    w = scenarios.SCENARIOS["host_bound"](CPU)
    assert w.cause == "host_bound" and w.host_work == 120_000
    assert isinstance(w.opt, torch.optim.SGD) and w.opt.defaults["nesterov"]


@pytest.mark.cuda
def test_a_graphed_workload_replays_the_whole_step():
    w = Workload("g", "conv", "gpu_bound", torch.device("cuda"), _conv_net(), cifar_batch(8), ce_loss, graphed=True)
    before = [p.detach().clone() for p in w.model.parameters()]
    names = _ranges(w.step)
    torch.cuda.synchronize()
    assert "graph_replay" in names and "forward" not in names
    assert any(not torch.equal(a, b) for a, b in zip(before, w.model.parameters()))


def test_the_bench_package_and_its_scorers_import_without_torch():
    """`import bench` is cheap: the package, the verdict benchmark's runner and scorer, and the
    measuring helpers import in a process where `import torch` fails (torch comes with the workloads)."""
    script = """
import sys
sys.modules["torch"] = None
import bench, bench.verdicts
from bench import ddp_scaling, memory, ranks, same_reports
from bench.verdicts import bench, score
assert bench.GPU_ORDER and callable(score.score_rows)
try:
    import bench.workloads
except ImportError:
    print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr[-3000:]

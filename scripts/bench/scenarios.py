"""Record the small real traces under tests/data/ that the analysis and trace-fix tests run on.

Each scenario is a textbook bottleneck, profiled with plain ``torch.profiler`` and
``tensorboard_trace_handler`` (CPU+CUDA activities, record_shapes, profile_memory, with_stack),
2 active steps after a warm-up, gzip. Before profiling, each scenario's step is timed with CUDA
events (median of 20 steps after 5 warm-up steps) and printed, so the trace can be checked
against an unprofiled number. The workloads are bench.workloads' (`SCENARIOS` below).

Run on a GPU machine:

    python scripts/record_scenarios.py --out /tmp/scenarios            # all scenarios
    python scripts/record_scenarios.py --out /tmp/s --only tiny_ops    # one

and on the CPU for the CPU-only trace:

    python scripts/record_scenarios.py --out tests/data --device cpu --only cpu_resnet

Prints one line per scenario: name, median ms/step, trace file and its size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from stepscope.analysis.verdicts import DATA_BOUND, GPU_BOUND, HOST_BOUND, LAUNCH_BOUND
from stepscope.demo.timing import time_fn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

from bench.workloads import SlowSamples, TinyOps, Workload, cifar_batch, cifar_resnet18


def _sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)


def _smoothed_ce(out, y):
    return F.cross_entropy(out.float(), y, label_smoothing=0.1)


def resnet(name: str, device: torch.device, batch: int, cause: str | None = None, *, loader: bool = False,
           **kw) -> Workload:
    """The CIFAR ResNet-18 step the recorded traces share; `loader`: its batches from a main-process
    DataLoader over a per-sample dataset of 0.3 ms a sample, like a slow decode."""
    dl = torch.utils.data.DataLoader(SlowSamples(100_000, 0.3), batch_size=batch, shuffle=True, num_workers=0,
                                     pin_memory=device.type == "cuda") if loader else None
    return Workload(name, "resnet18", cause, device, cifar_resnet18(), cifar_batch(batch), _smoothed_ce, opt=_sgd,
                    loader=dl, **kw)


SCENARIOS = {
    # name -> workload; its cause is the one it was built to show (None: no one cause). tests/test_analysis.py
    # takes its expected verdicts from the unprofiled step times in BENCHMARKS.md, not from here
    "eager_bs32": lambda d: resnet("eager_bs32", d, 32, LAUNCH_BOUND.name),
    "eager_bs128": lambda d: resnet("eager_bs128", d, 128, LAUNCH_BOUND.name),
    "big_batch": lambda d: resnet("big_batch", d, 1024, GPU_BOUND.name),
    "cuda_graph": lambda d: resnet("cuda_graph", d, 128, GPU_BOUND.name, graphed=True),
    "tiny_ops": lambda d: TinyOps(d, name="tiny_ops"),
    "slow_dataset": lambda d: resnet("slow_dataset", d, 128, DATA_BOUND.name, loader=True),
    HOST_BOUND.name: lambda d: resnet(HOST_BOUND.name, d, 128, HOST_BOUND.name, host_work=120_000),
    "item_per_layer": lambda d: resnet("item_per_layer", d, 128, item_hooks=True),
    "cpu_resnet": lambda d: resnet("cpu_resnet", d, 8),
}


def record(name: str, out: Path, device: torch.device) -> str:
    torch.manual_seed(0)
    sc = SCENARIOS[name](device)
    ms = statistics.median(time_fn(sc.step, device, warmup=5, reps=20))
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    run_dir = out / name
    with profile(activities=acts, schedule=schedule(wait=1, warmup=2, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=name, use_gzip=True),
                 record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(6):
            sc.step()
            prof.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    files = sorted(run_dir.glob("*.pt.trace.json.gz"))
    size = sum(f.stat().st_size for f in files)
    return f"{name:16s} {ms:8.2f} ms/step  {files[-1].name if files else '-'}  {size / 1e6:.2f} MB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA GPU is visible; use --device cpu", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    names = a.only or [n for n in SCENARIOS if n != "cpu_resnet"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")
    for n in names:
        print(record(n, a.out, device), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

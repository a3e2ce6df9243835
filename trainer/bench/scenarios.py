"""Record the small real traces under tests/data/ that the analysis and trace-fix tests run on.

Each scenario is a textbook bottleneck, profiled with plain ``torch.profiler`` and
``tensorboard_trace_handler`` (CPU+CUDA activities, record_shapes, profile_memory, with_stack),
2 active steps after a warm-up, gzip. Before profiling, each scenario's step is timed with CUDA
events (median of 20 steps after 5 warm-up steps) and printed, so the trace can be checked
against an unprofiled number.

Run on a GPU machine (the device tool):

    python scripts/record_scenarios.py --out /tmp/scenarios            # all scenarios
    python scripts/record_scenarios.py --out /tmp/s --only tiny_ops    # one

and on the CPU for the CPU-only trace:

    python scripts/record_scenarios.py --out tests/data --device cpu --only cpu_resnet

Prints one line per scenario: name, median ms/step, trace file and its size.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from ..models import torchvision_cifar_resnet18
from ..timing import time_fn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler


class SlowDataset(torch.utils.data.Dataset):
    """A per-sample Python dataset that costs ~0.3 ms a sample, like a slow decode."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(0.0003)
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10


def _sync_hook(_mod: nn.Module, _inp, out: torch.Tensor) -> None:
    out.float().mean().item()  # sync point: deliberate, the anti-pattern under test


class Scenario:
    """A model, an optimizer and a `step()` that runs one training step with named ranges."""

    def __init__(self, name: str, device: torch.device, batch: int, *, graphed: bool = False,
                 item_hooks: bool = False, host_work: bool = False, loader: bool = False) -> None:
        self.name, self.device, self.batch = name, device, batch
        self.cuda = device.type == "cuda"
        self.model = torchvision_cifar_resnet18(10).to(device)
        if self.cuda:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                   weight_decay=5e-4)
        self.x = torch.randn(batch, 3, 32, 32, device=device)
        self.y = torch.randint(0, 10, (batch,), device=device)
        self.host_work = host_work
        self.loader_iter = None
        if loader:
            dl = torch.utils.data.DataLoader(SlowDataset(100_000), batch_size=batch, shuffle=True,
                                             num_workers=0, pin_memory=self.cuda)
            self.loader_iter = iter(dl)
        if item_hooks:
            for mod in self.model.modules():
                if isinstance(mod, nn.Conv2d):
                    mod.register_forward_hook(_sync_hook)
        self.graph = None
        if graphed:
            self._capture()

    def _loss(self):
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda, cache_enabled=False):
            out = self.model(self.x)
            return F.cross_entropy(out.float(), self.y, label_smoothing=0.1), out

    def _capture(self) -> None:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                loss, _ = self._loss()
                loss.backward()
                self.opt.step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss, _ = self._loss()
            self.static_loss.backward()
            self.opt.step()

    def step(self) -> None:
        with record_function("data"):
            if self.loader_iter is not None:
                xb, yb = next(self.loader_iter)
                self.x.copy_(xb.to(self.device, non_blocking=True))
                self.y.copy_(yb.to(self.device, non_blocking=True))
        if self.graph is not None:
            with record_function("graph_replay"):
                self.graph.replay()
            return
        with record_function("forward"):
            loss, out = self._loss()
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.host_work:
            with record_function("host_postprocess"):
                logits = out.detach().float().cpu()  # sync point: copies logits to the host
                # heavy host-side Python outside torch ops (e.g. per-sample metrics)
                acc = 0.0
                for i in range(120_000):
                    acc += math.sqrt(i)
                logits.numpy().argsort(axis=1)


class TinyOps:
    """Thousands of tiny elementwise ops per step on a 1 Ki-element tensor."""

    def __init__(self, name: str, device: torch.device, n_ops: int = 3000) -> None:
        self.name, self.device, self.n_ops = name, device, n_ops
        self.x = torch.randn(1024, device=device)

    def step(self) -> None:
        with record_function("forward"):
            x = self.x
            for _ in range(self.n_ops // 2):
                x = x * 1.0001 + 0.0001
            self.x = x


SCENARIOS = {
    # name: (factory, the cause it was built to show); tests/test_analysis.py takes its expected verdicts from
    # the unprofiled step times in BENCHMARKS.md, not from here
    "eager_bs32": (lambda d: Scenario("eager_bs32", d, 32), "launch_bound"),
    "eager_bs128": (lambda d: Scenario("eager_bs128", d, 128), "launch_bound"),
    "big_batch": (lambda d: Scenario("big_batch", d, 1024), "gpu_bound"),
    "cuda_graph": (lambda d: Scenario("cuda_graph", d, 128, graphed=True), "gpu_bound"),
    "tiny_ops": (lambda d: TinyOps("tiny_ops", d), "launch_bound"),
    "slow_dataset": (lambda d: Scenario("slow_dataset", d, 128, loader=True), "data_bound"),
    "host_bound": (lambda d: Scenario("host_bound", d, 128, host_work=True), "host_bound"),
    "item_per_layer": (lambda d: Scenario("item_per_layer", d, 128, item_hooks=True), None),
    "cpu_resnet": (lambda d: Scenario("cpu_resnet", d, 8), None),
}


def record(name: str, out: Path, device: torch.device) -> str:
    factory, _ = SCENARIOS[name]
    torch.manual_seed(0)
    sc = factory(device)
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

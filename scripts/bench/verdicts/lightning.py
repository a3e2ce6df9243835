"""A Lightning run profiled by Lightning's own PyTorchProfiler, with its truth measured without the profiler.

    python scripts/record_lightning.py --out OUT/traces      # needs lightning and a GPU

A LightningModule trains the CIFAR ResNet-18 at batch 64 in bf16. Unprofiled, a callback records a CUDA event
at every batch start (median step time over 60 steps); the GPU time of the same step is its CUDA-graph
replay outside Lightning. Then `PyTorchProfiler(record_shapes, profile_memory, with_stack)` records 3 steps.
Writes OUT/traces/lightning_resnet18/ (Lightning's trace files and truth.json, in bench.py's format)
and prints one line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from stepscope.analysis.verdicts import LAUNCH_BOUND

from bench.verdicts.truth import expected_verdict, graph_ms
from bench.workloads import Workload, ce_loss, cifar_batch

BATCH = 64


def resnet_module(fused: bool | None = None):
    """The LightningModule: the CIFAR ResNet-18 (channels_last) with cross-entropy and SGD (momentum 0.9;
    ``fused`` as torch.optim.SGD takes it: None leaves torch to choose, as SGD's own default does)."""
    import lightning as L
    from stepscope.demo.models import torchvision_cifar_resnet18

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torchvision_cifar_resnet18(10).to(memory_format=torch.channels_last)

        def training_step(self, batch, _i):
            x, y = batch
            return F.cross_entropy(self.net(x).float(), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9, fused=fused)

    return Module()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    import lightning as L
    from lightning.pytorch.profilers import PyTorchProfiler
    from stepscope.demo.models import torchvision_cifar_resnet18

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * 200, 3, 32, 32, generator=g),
                                          torch.randint(0, 10, (BATCH * 200,), generator=g))

    class Boundaries(L.Callback):
        def __init__(self) -> None:
            self.events = []

        def on_train_batch_start(self, *args) -> None:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.events.append(ev)

    def trainer(steps, **kw):
        return L.Trainer(max_steps=steps, accelerator="gpu", devices=1, precision="bf16-mixed", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kw)

    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=0, pin_memory=True)
    clock = Boundaries()
    trainer(70, callbacks=[clock]).fit(resnet_module(), loader)
    torch.cuda.synchronize()  # sync point: once, after the timed run
    ms = [x.elapsed_time(y) for x, y in zip(clock.events[10:], clock.events[11:])]
    # the same step outside Lightning, for its GPU time
    w = Workload("lightning_resnet18", "lightning-resnet18", LAUNCH_BOUND.name, torch.device("cuda"),
                 torchvision_cifar_resnet18(10), cifar_batch(BATCH), ce_loss)
    truth = {"step_ms": statistics.median(ms), "gpu_ms": graph_ms(w.gpu_part), "copy_ms": 0.0,
             "fixed_step_ms": None, "intervention": None}
    truth["expected"], truth["confirmed"] = expected_verdict(w, truth)
    truth.update(cause=w.cause, family=w.family, gpu_busy_pct=min(100.0, 100 * truth["gpu_ms"] / truth["step_ms"]))
    run_dir = a.out / "lightning_resnet18"
    prof = PyTorchProfiler(dirpath=str(run_dir), filename="fit", export_to_chrome=True,
                           schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                           record_shapes=True, profile_memory=True, with_stack=True)
    trainer(8, profiler=prof).fit(resnet_module(), loader)
    (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"lightning_resnet18: {truth['step_ms']:.2f} ms/step, GPU {truth['gpu_ms']:.2f} ms, "
          f"{sorted(q.name for q in run_dir.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

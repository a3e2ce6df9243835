"""Records this folder: a CPU loop whose DataLoader does per-sample NumPy work in the main process
(num_workers=0), its `next()` inside the step, profiled two ways, plus its removal truth.

    python tests/data/loader_main_process/record.py tests/data/loader_main_process
    python tests/data/loader_main_process/record.py tests/data/loader_main_process --light

- dropin/: stepscope.schedule + stepscope.trace_handler, the loader NOT wrapped in stepscope.loader (the
  half-adopted drop-in): the trace and cycles.jsonl with the unprofiled steps' telemetry (no data_ms).
- plain/: the same loop under torch.profiler.schedule + torch's tensorboard_trace_handler (no telemetry).
- truth.json: the unprofiled step (median of STEPS steps) and the same step with the loader's work removed
  (the batch made once and reused), the step's share of loading = 1 - fixed / step.
--light: the same loop with no per-sample work beyond making the sample (a wait of a few % of the step, which
must not be the verdict: each sample a small NumPy draw): light_dropin/, light_plain/ and light_truth.json.
--cuda: the same loop with the model and each batch on the GPU (the loader still works in the main process,
on the CPU): cuda_dropin/, cuda_plain/ and cuda_truth.json; each timed step ends in a synchronize.
One thread (torch.set_num_threads(1)) so the recording is as steady as a shared 2-core machine allows.
"""

import json
import os
import shutil
import statistics
import sys
import time

import numpy as np
import stepscope
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

STEPS = 60  # unprofiled steps timed for the truth
BATCH, FEATURES = 32, 256


class HostWork(Dataset):
    """Per-sample host work in __getitem__: a NumPy 'augmentation' of a 64x64 image (none with `light`), then
    flattened."""

    def __init__(self, light: bool = False) -> None:
        self.rounds = 0 if light else 1

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        if not self.rounds:  # light: a small sample drawn, then collated
            return torch.from_numpy(rng.standard_normal((4, FEATURES), dtype=np.float32).sum(0)), int(i % 10)
        img = rng.standard_normal((64, 64)).astype(np.float32)
        for _ in range(self.rounds):
            img = np.fft.ifft2(np.fft.fft2(img) * 0.9).real.astype(np.float32)
        return torch.from_numpy(img.reshape(-1)[:FEATURES].copy()), int(i % 10)


LIGHT = "--light" in sys.argv
DEVICE = "cuda" if "--cuda" in sys.argv else "cpu"
PREFIX = "light_" if LIGHT else "cuda_" if DEVICE == "cuda" else ""


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    model = model.to(DEVICE)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def loader():
    return DataLoader(HostWork(LIGHT), batch_size=BATCH, num_workers=0, shuffle=False)


def step(model, opt, x, y) -> None:
    x, y = x.to(DEVICE), y.to(DEVICE)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def profiled(out: str, dropin: bool) -> None:
    model, opt = make()
    if dropin:
        sched = stepscope.schedule(skip_first=5, wait=40, warmup=1, active=3, repeat=1)
        handler = stepscope.trace_handler(os.path.join(out, PREFIX + "dropin"), worker_name="loader_main_process")
    else:
        sched = torch.profiler.schedule(skip_first=5, wait=40, warmup=1, active=3, repeat=1)
        handler = torch.profiler.tensorboard_trace_handler(os.path.join(out, PREFIX + "plain"),
                                                           worker_name="loader_main_process", use_gzip=True)
    with torch.profiler.profile(schedule=sched, on_trace_ready=handler, record_shapes=True) as prof:
        for i, (x, y) in enumerate(loader()):  # not wrapped in stepscope.loader
            step(model, opt, x, y)
            prof.step()
            if i >= 5 + 40 + 1 + 3 + 45:  # enough steps after the cycle for its telemetry
                break
    if dropin:
        handler.close()


def timed(batches) -> float:
    model, opt = make()
    durs, t0 = [], time.perf_counter()
    for i, (x, y) in enumerate(batches):
        step(model, opt, x, y)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        durs.append((t1 - t0) * 1e3)
        t0 = t1
        if i >= STEPS + 5:
            break
    return statistics.median(durs[5:])


def resident():
    x, y = next(iter(loader()))
    while True:
        yield x, y


def main(out: str) -> None:
    torch.set_num_threads(1)
    for sub in ("dropin", "plain"):
        shutil.rmtree(os.path.join(out, PREFIX + sub), ignore_errors=True)
    profiled(out, dropin=True)
    profiled(out, dropin=False)
    step_ms, fixed_ms = timed(loader()), timed(resident())
    truth = {"step_ms_median": step_ms, "fixed_step_ms": fixed_ms, "load_share": 1 - fixed_ms / step_ms,
             "intervention": "the batch made once and reused (no loading in the step)",
             "expected": "cpu_bound" if LIGHT else "data_bound", "torch": torch.__version__, "threads": 1,
             "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"}
    with open(os.path.join(out, PREFIX + "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    print(truth)


if __name__ == "__main__":
    main(sys.argv[1])

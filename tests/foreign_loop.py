"""A user's own training loop, profiled the plain way, for tests: no stepscope import anywhere.

    python tests/foreign_loop.py OUT_DIR

Writes OUT_DIR/plain/<host>_<pid>.<span>.pt.trace.json (torch.profiler.tensorboard_trace_handler, plain JSON)
and OUT_DIR/chrome/trace.json (prof.export_chrome_trace), each one profiled cycle of two steps of a tiny CNN
fed by a DataLoader over a Dataset that sleeps 2 ms per sample, on the CPU.
"""

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self) -> int:
        return 48

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(3, 16, 16), i % 10


def train(model, opt, prof) -> None:
    for x, y in DataLoader(SlowDataset(), batch_size=8):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()


def main(out: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(os.path.join(out, "plain"))
    with torch.profiler.profile(schedule=schedule, on_trace_ready=handler, record_shapes=True) as prof:
        train(model, opt, prof)
    os.makedirs(os.path.join(out, "chrome"), exist_ok=True)
    path = os.path.join(out, "chrome", "trace.json")
    with torch.profiler.profile(schedule=schedule, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        train(model, opt, prof)


if __name__ == "__main__":
    main(sys.argv[1])

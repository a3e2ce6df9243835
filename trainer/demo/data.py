"""Training data: a learnable synthetic set generated on the device, or CIFAR-10 through torchvision.

Both give the loop the same thing: `host_batches()`, an endless iterator of `(images, labels)` where they
are kept, `to_device(batch)`, which copies a batch to the device in the model's memory format (nothing to do
for data already there), `batches()`, the two together, `steps_per_epoch`, and `eval_batches()` for one pass
over the eval set. The loop times the wait for a batch and the copy separately (trainer/demo/timing.py).

Synthetic data lives on the device by default. `--data-placement host` keeps it in host memory, gathered
into one shuffled tensor per epoch, so every step copies its batch: from page-locked memory with
`non_blocking=True` (`--pin-memory`, the default), or from pageable memory, where the host waits for the
copy (`--no-pin-memory`).
Under torchrun each rank sees a distinct shard: a rank-strided slice of the synthetic set, or
`DistributedSampler` for CIFAR-10.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from stepscope.demo.config import ConfigError, DataConfig
from stepscope.demo.env import Env
from torch.utils.data import DataLoader, DistributedSampler

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

Batch = tuple[torch.Tensor, torch.Tensor]


def check_data(cfg: DataConfig) -> None:
    """Fail before the run starts, with one line saying how to get the data."""
    if cfg.name != "cifar10" or cfg.download:
        return
    folder = Path(cfg.data_dir) / "cifar-10-batches-py"
    from stepscope.demo.cifar_files import CIFAR_FILES  # torchvision: imported only by CIFAR-10 runs

    missing = [f for f in CIFAR_FILES if not (folder / f).is_file()]
    if missing:
        raise ConfigError(f"CIFAR-10 not found in {folder} (missing {missing[0]}); add --download to fetch it "
                          f"into --data-dir {cfg.data_dir}, or point --data-dir at a folder holding cifar-10-batches-py/")


IMAGE_BYTES = 3 * 32 * 32 * 4  # one float32 image
# generating a set holds the set plus about four same-sized temporaries (class means, nuisance, noise, sums)
GENERATION_FACTOR = 5


def available_memory(device: str) -> int | None:
    """Bytes this process may still allocate on `device` ("cpu": MemAvailable; "cuda": the GPU's free memory)."""
    if device == "cuda":  # this rank's GPU (env.make_env picks it the same way), not GPU 0 for every rank
        return torch.cuda.mem_get_info(int(os.environ.get("LOCAL_RANK", 0)))[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_synthetic_fits(cfg: DataConfig, device: str) -> None:
    """Refuse a synthetic set that cannot be generated in memory, before anything is written.

    Every rank generates the whole set; on the CPU the ranks of one node share its memory."""
    if cfg.name != "synthetic":
        return
    available = available_memory(device)
    if available is None:
        return
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if device == "cpu" else 1
    per_image = IMAGE_BYTES * ranks
    biggest = max(cfg.synthetic_train_size, cfg.synthetic_eval_size)
    need = per_image * (cfg.synthetic_train_size + cfg.synthetic_eval_size + (GENERATION_FACTOR - 1) * biggest)
    if need > available:
        fits = available // (per_image * (GENERATION_FACTOR + 1))
        raise ConfigError(f"--synthetic-train-size {cfg.synthetic_train_size} with --synthetic-eval-size "
                          f"{cfg.synthetic_eval_size} needs about {need / 2**30:.1f} GiB of {device} memory to "
                          f"generate, {available / 2**30:.1f} GiB is available; use at most about {fits} images each")


class SyntheticData:
    """Ten classes, each a smooth random colour pattern, seen under heavy per-sample noise.

    The structure is real (a linear probe on the class means would separate it), so the loss falls and
    accuracy clears chance within the default run; the noise keeps it from being trivial.
    """

    def __init__(self, cfg: DataConfig, env: Env, num_classes: int, seed: int) -> None:
        g = torch.Generator(device=env.device).manual_seed(seed + 1)
        protos = torch.randn(num_classes, 3, 4, 4, device=env.device, generator=g)
        protos = F.interpolate(protos, size=32, mode="bilinear", align_corners=False)
        protos = (protos - protos.mean()) / protos.std()

        def make(n: int) -> Batch:
            y = torch.randint(0, num_classes, (n,), device=env.device, generator=g)
            # low-frequency nuisance patterns do not average away like pixel noise, so the task stays non-trivial
            nuisance = F.interpolate(torch.randn(n, 3, 8, 8, device=env.device, generator=g), size=32, mode="bilinear")
            x = 0.6 * protos[y] + 1.5 * nuisance + 0.5 * torch.randn(n, 3, 32, 32, device=env.device, generator=g)
            return x.contiguous(memory_format=env.memory_format), y

        x, y = make(cfg.synthetic_train_size)
        # rank-distinct shard: every rank generates the same set, then keeps every world_size-th sample
        self.train_x, self.train_y = x[env.rank::env.world_size], y[env.rank::env.world_size]
        self.eval_x, self.eval_y = make(cfg.synthetic_eval_size)
        self.batch_size = cfg.batch_size
        self.steps_per_epoch = len(self.train_y) // cfg.batch_size
        self._gen = g
        self.env = env
        self.on_host = cfg.placement == "host" and env.is_cuda
        self.pinned = self.on_host and cfg.pin_memory
        if self.on_host:
            self.train_x, self.train_y = self.train_x.cpu(), self.train_y.cpu()

    def host_batches(self) -> Iterator[Batch]:
        while True:
            perm = torch.randperm(len(self.train_y), device=self._gen.device, generator=self._gen)
            if not self.on_host:
                for i in range(self.steps_per_epoch):
                    idx = perm[i * self.batch_size:(i + 1) * self.batch_size]
                    yield self.train_x[idx], self.train_y[idx]
                continue
            # one gather per epoch; each batch is then a slice, so a pinned epoch stays pinned
            perm = perm.cpu()  # sync point: once per epoch, the permutation drawn on the device
            x, y = self.train_x[perm], self.train_y[perm]
            if self.pinned:
                x, y = x.pin_memory(), y.pin_memory()
            for i in range(self.steps_per_epoch):
                sl = slice(i * self.batch_size, (i + 1) * self.batch_size)
                yield x[sl], y[sl]

    def to_device(self, batch: Batch) -> Batch:
        if not self.on_host:
            return batch
        x, y = batch
        # pageable memory: the host waits for the copy; pinned: it is queued and overlaps the GPU's work
        x = x.to(self.env.device, non_blocking=self.pinned).contiguous(memory_format=self.env.memory_format)
        return x, y.to(self.env.device, non_blocking=self.pinned)

    def batches(self) -> Iterator[Batch]:
        for batch in self.host_batches():
            yield self.to_device(batch)

    def eval_batches(self) -> Iterator[Batch]:
        for i in range(0, len(self.eval_y), self.batch_size):
            yield self.eval_x[i:i + self.batch_size], self.eval_y[i:i + self.batch_size]


class Cifar10Data:
    def __init__(self, cfg: DataConfig, env: Env, seed: int) -> None:
        # torchvision here, not at the top: its import (about 2 s of CPU, torch._dynamo through torchvision.ops)
        # is paid only by the runs that read CIFAR-10
        import torchvision.transforms as T
        from stepscope.demo.cifar_files import CIFAR10Files, download_cifar

        heavy = [T.RandAugment(num_ops=2, magnitude=9), T.ColorJitter(0.4, 0.4, 0.4, 0.1)] \
            if cfg.augment == "heavy" else []
        train_tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), *heavy, T.ToTensor(),
                              T.Normalize(CIFAR_MEAN, CIFAR_STD)])
        eval_tf = T.Compose([T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])
        root = str(cfg.data_dir)
        if cfg.download:
            download_cifar(cfg.data_dir)
        train = CIFAR10Files(root, train=True, transform=train_tf)
        test = CIFAR10Files(root, train=False, transform=eval_tf)
        self.sampler = None
        if env.world_size > 1:
            self.sampler = DistributedSampler(train, env.world_size, env.rank, shuffle=True, seed=seed, drop_last=True)
        self.pinned = env.is_cuda and cfg.pin_memory
        common = dict(batch_size=cfg.batch_size, num_workers=cfg.workers, pin_memory=self.pinned,
                      persistent_workers=cfg.workers > 0)
        self.train = DataLoader(train, shuffle=self.sampler is None, sampler=self.sampler, drop_last=True,
                                generator=torch.Generator().manual_seed(seed), **common)
        self.test = DataLoader(test, shuffle=False, **common)
        self.steps_per_epoch = len(self.train)
        if self.steps_per_epoch == 0:
            raise ConfigError(f"--batch-size {cfg.batch_size} is larger than the CIFAR-10 training shard "
                              f"({len(train)} images per rank); use a smaller batch size")
        self.env = env

    def to_device(self, batch: Batch) -> Batch:
        x, y = batch
        # non_blocking from pinned memory: the copy overlaps with compute instead of holding the host
        x = x.to(self.env.device, non_blocking=self.pinned).contiguous(memory_format=self.env.memory_format)
        return x, y.to(self.env.device, non_blocking=self.pinned)

    def host_batches(self) -> Iterator[Batch]:
        epoch = 0
        while True:
            if self.sampler is not None:
                self.sampler.set_epoch(epoch)
            yield from self.train
            epoch += 1

    def batches(self) -> Iterator[Batch]:
        for batch in self.host_batches():
            yield self.to_device(batch)

    def eval_batches(self) -> Iterator[Batch]:
        for batch in self.test:
            yield self.to_device(batch)


def build_data(cfg: DataConfig, env: Env, num_classes: int, seed: int) -> SyntheticData | Cifar10Data:
    if cfg.name == "synthetic":
        return SyntheticData(cfg, env, num_classes, seed)
    return Cifar10Data(cfg, env, seed)

"""The real CIFAR-10 loading path (torchvision.datasets.CIFAR10 + DataLoader) on a tiny CIFAR-format folder."""


import pytest
import torch
from make_cifar_folder import write_cifar_folder
from stepscope.trainer.config import ConfigError, DataConfig
from stepscope.trainer.data import Cifar10Data, check_data
from stepscope.trainer.env import Env
from trainrun import FAST, run_json, run_train

N_PER_BATCH = 16


def write_tiny_cifar(root, n=N_PER_BATCH, seed=0):
    """Same files, keys and layout as the real cifar-10-batches-py, with n random images per batch file."""
    return write_cifar_folder(root, n, seed)


def test_loader_reads_tiny_cifar(tmp_path):
    write_tiny_cifar(tmp_path)
    env = Env(torch.device("cpu"), None, False)
    data = Cifar10Data(DataConfig(name="cifar10", data_dir=tmp_path, batch_size=8, workers=0), env, seed=0)
    assert data.steps_per_epoch == 5 * N_PER_BATCH // 8
    x, y = next(data.batches())
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (8,) and y.dtype == torch.int64 and 0 <= int(y.min()) and int(y.max()) < 10
    assert -3 < float(x.mean()) < 3 and float(x.std()) > 0.3  # normalized, not raw 0..255
    evals = list(data.eval_batches())
    assert sum(len(b[1]) for b in evals) == N_PER_BATCH


def test_loader_shards_per_rank(tmp_path):
    write_tiny_cifar(tmp_path)
    seen = []
    for rank in (0, 1):
        env = Env(torch.device("cpu"), None, False, rank=rank, world_size=2)
        data = Cifar10Data(DataConfig(name="cifar10", data_dir=tmp_path, batch_size=4, workers=0), env, seed=0)
        assert data.steps_per_epoch == 5 * N_PER_BATCH // 2 // 4
        seen.append(set(data.sampler.__iter__()))
    assert not seen[0] & seen[1]


def test_missing_cifar_says_how_to_get_it(tmp_path):
    with pytest.raises(ConfigError, match="add --download to fetch it"):
        check_data(DataConfig(name="cifar10", data_dir=tmp_path))


def test_train_on_tiny_cifar_with_workers(tmp_path):
    write_tiny_cifar(tmp_path / "data")
    r = run_train([*FAST, "--data", "cifar10", "--data-dir", str(tmp_path / "data"), "--workers", "1",
                   "--batch-size", "8", "--steps", "4", "--logdir", str(tmp_path / "logs"), "--run-name", "c"])
    assert r.returncode == 0, r.stderr[-2000:]
    d = run_json(tmp_path / "logs" / "c")
    assert d["status"] == "completed" and d["final"]["steps"] == 4
    assert d["final"]["train_loss"] > 0 and 0 <= d["final"]["eval_accuracy"] <= 1

"""The real CIFAR-10 loading path (torchvision.datasets.CIFAR10 + DataLoader) on a tiny CIFAR-format folder."""

import os
import pickle
import urllib.request

import numpy as np
import pytest
import torch
from bench.cifar_folder import write_cifar_folder
from stepscope.demo.cifar_files import CIFAR10Files, download_cifar
from stepscope.demo.config import ConfigError, DataConfig
from stepscope.demo.data import Cifar10Data, check_data
from stepscope.demo.env import Env
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


class _Poison:
    """Unpickling this calls os.system: what a crafted batches.meta could do with plain pickle.load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _one_line_exit_2(r, *needles):
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("train.py: error: ") and all(n in lines[0] for n in needles), lines[0]


def poisoned_folder(tmp_path):
    folder = write_tiny_cifar(tmp_path / "data")
    marker = tmp_path / "pwned"
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": _Poison(marker)}, f)
    return marker


def test_poisoned_meta_runs_no_code(tmp_path):
    marker = poisoned_folder(tmp_path)
    with pytest.raises(ConfigError, match="refusing to load .*batches.meta: it refers to (posix|os).system"):
        CIFAR10Files(str(tmp_path / "data"), train=False)
    assert not marker.exists()


@pytest.mark.slow  # one more trainer process: test_poisoned_meta_runs_no_code checks the refusal in-process, and
# test_offline_download_is_one_line_and_leaves_no_data_dir the command's one line, exit 2 and nothing written for
# a data set that fails to load (the same ConfigError out of the trainer's data set-up)
def test_poisoned_meta_runs_no_code_and_exits_2(tmp_path):
    marker = poisoned_folder(tmp_path)
    r = run_train([*FAST, "--data", "cifar10", "--data-dir", str(tmp_path / "data"), "--workers", "0",
                   "--batch-size", "8", "--steps", "2", "--logdir", str(tmp_path / "logs")])
    _one_line_exit_2(r, "refusing to load", "batches.meta")
    assert not marker.exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "not a dict", "wrong shape"])
def test_corrupt_batch_file_is_one_line(tmp_path, damage):
    folder = write_tiny_cifar(tmp_path)
    path = folder / "test_batch"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garbage":
        path.write_bytes(b"\x00\x01not a pickle at all" * 10)
    elif damage == "not a dict":
        path.write_bytes(pickle.dumps([1, 2, 3]))
    else:
        path.write_bytes(pickle.dumps({"data": np.zeros((4, 10), np.uint8), "labels": [0, 1, 2, 3]}))
    with pytest.raises(ConfigError, match="is not a CIFAR-10 batch file") as e:
        CIFAR10Files(str(tmp_path), train=False)
    assert "\n" not in str(e.value)


@pytest.mark.slow  # one more trainer process: test_corrupt_batch_file_is_one_line checks the message in-process,
# and test_poisoned_meta_runs_no_code_and_exits_2 the command's exit 2 with nothing written
def test_corrupt_batch_file_exits_2_and_writes_nothing(tmp_path):
    folder = write_tiny_cifar(tmp_path / "data")
    (folder / "data_batch_3").write_bytes(b"garbage")
    r = run_train([*FAST, "--data", "cifar10", "--data-dir", str(tmp_path / "data"), "--workers", "0",
                   "--batch-size", "8", "--steps", "2", "--logdir", str(tmp_path / "logs")])
    _one_line_exit_2(r, "data_batch_3 is not a CIFAR-10 batch file")
    assert not (tmp_path / "logs").exists()


OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "no_proxy": ""}


def test_offline_download_is_one_line_and_leaves_no_data_dir(tmp_path):
    """The proxy variables point at a closed loopback port: the download fails as it does offline."""
    r = run_train([*FAST, "--data", "cifar10", "--download", "--data-dir", str(tmp_path / "data"),
                   "--workers", "0", "--steps", "2", "--logdir", str(tmp_path / "logs")], env=OFFLINE)
    _one_line_exit_2(r, "could not download CIFAR-10", str(tmp_path / "data"))
    assert not (tmp_path / "data").exists() and not (tmp_path / "logs").exists()


def test_offline_download_keeps_an_existing_data_dir_as_it_was(tmp_path, monkeypatch):
    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    # urlopen's shared opener keeps the proxy it first saw: drop the one this test makes when it ends
    monkeypatch.setattr(urllib.request, "_opener", None)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="could not download CIFAR-10") as e:
        download_cifar(tmp_path / "data")
    assert "\n" not in str(e.value)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["mine.txt"]

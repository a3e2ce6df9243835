"""Every bad flag: one clear line on stderr, exit code 2, and no run directory left behind."""

import os

import pytest
import torch
from trainrun import FAST, run_train

BAD = [
    (["--steps", "0"], "--steps must be a positive number, got 0"),
    (["--steps", "-3"], "--steps must be a positive number, got -3"),
    (["--batch-size", "0"], "--batch-size must be a positive number, got 0"),
    (["--arch", "resnet9000"], "unknown --arch 'resnet9000'; valid: resnet8, resnet18, torchvision-resnet18"),
    (["--device", "tpu"], "unknown --device 'tpu'; valid: auto, cpu, cuda"),
    (["--data", "imagenet"], "unknown --data 'imagenet'; valid: synthetic, cifar10"),
    (["--ops", "triton"], "unknown --ops 'triton'; valid: native, custom"),
    (["--compile", "fastest"], "unknown --compile mode 'fastest'; valid: default, reduce-overhead, max-autotune"),
    (["--steps", "abc"], "argument --steps: invalid int value: 'abc'"),
    (["--profile", "--steps", "12"], "the profiler schedule records nothing within --steps 12"),
    (["--profile", "--steps", "5", "--skip-first", "0", "--wait", "0", "--warmup", "1", "--active", "0"],
     "--active must be a positive number, got 0"),
    (["--flamegraph"], "--flamegraph needs --profile"),
    (["--data", "cifar10", "--data-dir", "{tmp}/nothing-here"], "CIFAR-10 not found in"),
    (["--run-name", "../escape"], "--run-name '../escape' is not a plain directory name"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flag_exits_2_with_one_line_and_writes_nothing(tmp_path, args, message):
    logdir = tmp_path / "logs"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = run_train([*FAST, "--logdir", str(logdir), *args])
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert message in lines[0]
    assert not logdir.exists() or not any(logdir.iterdir())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_device_cuda_without_gpu(tmp_path):
    r = run_train(["--device", "cuda", "--logdir", str(tmp_path / "logs")])
    assert r.returncode == 2
    assert r.stderr.strip() == "train.py: error: --device cuda but no CUDA GPU is visible to torch; use --device cpu or auto"
    assert not (tmp_path / "logs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_graphs_without_gpu(tmp_path):
    r = run_train([*FAST, "--cuda-graphs", "--logdir", str(tmp_path / "logs")])
    assert r.returncode == 2
    assert "--cuda-graphs needs a CUDA GPU" in r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_logdir_non_root(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    r = run_train([*FAST, "--logdir", str(ro / "logs")])
    assert r.returncode == 2 and "is not writable" in r.stderr


@pytest.mark.skipif(os.access("/proc/sys", os.W_OK) or not os.path.isdir("/proc/sys"),
                    reason="needs a directory that even root cannot write")
def test_unwritable_logdir_root(tmp_path):
    r = run_train([*FAST, "--logdir", "/proc/sys/stepscope-logs"])
    assert r.returncode == 2
    assert r.stderr.strip() == ("train.py: error: --logdir /proc/sys/stepscope-logs is not writable "
                                "(/proc/sys denies write access); pass a writable --logdir")


def test_logdir_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = run_train([*FAST, "--logdir", str(f / "logs")])
    assert r.returncode == 2
    assert r.stderr.strip() == f"train.py: error: --logdir {f / 'logs'} is not usable: {f} is not a directory"


def test_existing_run_is_never_overwritten(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "mine").mkdir(parents=True)
    (logdir / "mine" / "keep.txt").write_text("precious")
    r = run_train([*FAST, "--steps", "2", "--logdir", str(logdir), "--run-name", "mine"])
    assert r.returncode == 2
    assert "already exists and is never overwritten" in r.stderr
    assert sorted(p.name for p in (logdir / "mine").iterdir()) == ["keep.txt"]

"""Every bad flag: one clear line on stderr, exit code 2, and no run directory left behind.

The rules are checked in-process (`parse_and_check` raises `ConfigError` with the line, or argparse exits 2);
two cases run `scripts/train.py` as a subprocess for the whole contract: exit code, one stderr line, nothing
written.
"""

import os

import pytest
from few_by_default import few_by_default
from stepscope.demo.cli import parse_and_check
from stepscope.demo.config import ConfigError
from trainrun import FAST, call_without_torch, run_train

BAD = [
    (["--steps", "0"], "--steps must be a positive number, got 0"),
    (["--steps", "-3"], "--steps must be a positive number, got -3"),
    (["--batch-size", "0"], "--batch-size must be a positive number, got 0"),
    (["--arch", "resnet9000"], "unknown --arch 'resnet9000'; valid: resnet8, resnet18, torchvision-resnet18, lenet"),
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
    (["--lr", "nan"], "--lr must be a finite positive number, got nan"),
    (["--lr", "inf"], "--lr must be a finite positive number, got inf"),
    (["--lr", "-0.1"], "--lr must be a finite positive number, got -0.1"),
    (["--seed", "-1"], "--seed must be between 0 and 4294967295 (2**32-1), got -1"),
    (["--seed", str(2**32)], f"--seed must be between 0 and 4294967295 (2**32-1), got {2**32}"),
    (["--synthetic-train-size", str(10**12)], "needs about"),
    (["--synthetic-eval-size", str(10**12)], "GiB of cpu memory to generate"),
    (["--run-name", "x" * 256], "--run-name is 256 bytes long; a directory name may have at most 255"),
    (["--run-name", "é" * 128], "--run-name is 256 bytes long"),
    (["--run-name", "two\nlines"], "--run-name 'two\\nlines' contains control characters"),
    (["--run-name", "tab\there"], "contains control characters"),
    (["--logdir", ""], "argument --logdir: must not be empty"),
    (["--data-dir", " "], "argument --data-dir: must not be empty"),
]


def refusal(argv: list[str], capsys) -> str:
    """The one line that parse_and_check refuses `argv` with (ConfigError, or argparse's exit 2)."""
    try:
        parse_and_check(argv, cuda_available=False)
    except ConfigError as e:
        assert "\n" not in str(e)
        return str(e)
    except SystemExit as e:
        assert e.code == 2
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1, lines
        return lines[0]
    raise AssertionError(f"{argv} was accepted")


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_flag_is_refused_with_one_line(tmp_path, args, message, capsys):
    logdir = tmp_path / "logs"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert message in refusal([*FAST, "--logdir", str(logdir), *args], capsys)
    assert not logdir.exists()


SUBPROCESS = [BAD[0], BAD[8], (["--lr", "nan"], "--lr must be a finite"),
              (["--synthetic-train-size", str(10**12)], "needs about")]


# "config rule" is refused before torch is imported, "huge synthetic" after it (it needs torch's memory figures):
# one case of each path runs by default; every message is checked in-process by test_bad_flag_is_refused_with_one_line
@pytest.mark.parametrize("case", few_by_default(SUBPROCESS, keep=["config rule", "huge synthetic"],
                                                ids=["config rule", "argparse", "nan lr", "huge synthetic"]))
def test_bad_flag_exits_2_with_one_line_and_writes_nothing(tmp_path, case):
    args, message = case
    logdir = tmp_path / "logs"
    r = run_train([*FAST, "--logdir", str(logdir), *args])
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("train.py: error: ") and message in lines[0]
    assert not logdir.exists()


def test_device_cuda_without_gpu(tmp_path, capsys):
    # cuda_available=False stands for a machine without a GPU: the rule is the same on any machine
    assert refusal(["--device", "cuda", "--logdir", str(tmp_path / "logs")], capsys) == (
        "--device cuda but no CUDA GPU is visible to torch; use --device cpu or auto")


def test_cuda_graphs_without_gpu(tmp_path, capsys):
    assert "--cuda-graphs needs a CUDA GPU" in refusal([*FAST, "--cuda-graphs", "--logdir", str(tmp_path)], capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_logdir_non_root(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    assert "is not writable" in refusal([*FAST, "--logdir", str(ro / "logs")], capsys)


@pytest.mark.skipif(os.access("/proc/sys", os.W_OK) or not os.path.isdir("/proc/sys"),
                    reason="needs a directory that even root cannot write")
def test_unwritable_logdir_root(capsys):
    assert refusal([*FAST, "--logdir", "/proc/sys/stepscope-logs"], capsys) == (
        "--logdir /proc/sys/stepscope-logs is not writable (/proc/sys denies write access); pass a writable --logdir")


def test_logdir_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert refusal([*FAST, "--logdir", str(f / "logs")], capsys) == (
        f"--logdir {f / 'logs'} is not usable: {f} is not a directory")


def test_existing_run_is_never_overwritten(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "mine").mkdir(parents=True)
    (logdir / "mine" / "keep.txt").write_text("precious")
    r = run_train([*FAST, "--steps", "2", "--logdir", str(logdir), "--run-name", "mine"])
    assert r.returncode == 2
    assert "already exists and is never overwritten" in r.stderr
    assert sorted(p.name for p in (logdir / "mine").iterdir()) == ["keep.txt"]


TORCH_FREE = [(["--arch", "resnet9000"], "unknown --arch 'resnet9000'"),
              (["--lr", "nan"], "--lr must be a finite positive number, got nan"),
              (["--seed", "-1"], "--seed must be between 0 and")]


# one path (check_before_torch, then the one line): a process for one flag by default, the others in the slow set
@pytest.mark.parametrize("case", few_by_default(TORCH_FREE, keep=["arch"], ids=["arch", "lr", "seed"]))
def test_a_bad_flag_is_answered_before_torch_is_imported(case):
    """Flags that are wrong on any machine are refused without the seconds torch's import takes."""
    args, message = case
    rc, torch_imported, stderr = call_without_torch("stepscope.cli.main", "train_main", args)
    assert (rc, torch_imported) == (2, False), stderr
    assert stderr.count("\n") == 1 and message in stderr, stderr


def test_a_rule_that_depends_on_the_gpu_is_left_to_the_check_with_torch():
    """--device cuda is fine on a GPU machine: the torch-free check does not refuse it."""
    from stepscope.demo.cli import check_before_torch

    check_before_torch(["--device", "cuda", "--cuda-graphs"])
    with pytest.raises(ConfigError, match="--cuda-graphs needs a CUDA GPU"):
        parse_and_check(["--cuda-graphs", "--device", "cpu"], cuda_available=False)

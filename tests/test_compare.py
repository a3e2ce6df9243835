"""scripts/compare.py on the CPU: one real train.py --profile run per variant, tabulated."""

import json
import re
import subprocess
import sys
from unittest import mock

import pytest
import torch
from trainrun import REPO, call_without_torch

COMPARE = [sys.executable, str(REPO / "scripts" / "compare.py")]


@pytest.mark.slow
def test_compare_runs_each_variant_as_its_own_tensorboard_run(tmp_path):
    r = subprocess.run([*COMPARE, "--device", "cpu", "--variants", "eager", "compile-default", "--ops", "native",
                        "--arch", "resnet8", "--batch-size", "32", "--steps", "30", "--logdir", str(tmp_path),
                        "--name", "cmp"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [(row["variant"], row["ops"]) for row in rows] == [("eager", "native"), ("compile-default", "native")]
    eager, compiled = rows
    assert eager["speedup_vs_eager"] == 1.0
    # the compiled variant is timed against the eager run of the same invocation, from the two medians
    assert compiled["speedup_vs_eager"] == pytest.approx(eager["median_ms"] / compiled["median_ms"])
    assert compiled["median_ms"] != eager["median_ms"]
    for row in rows:
        assert row["verdict"] == "cpu_bound" and row["gpu_busy_pct"] is None
        assert row["images_per_s"] == pytest.approx(32 / (row["median_ms"] / 1e3))
        name = f"{row['variant']}-native"
        assert list((tmp_path / "cmp" / name).glob("events.out.tfevents.*"))
        assert f"[{name}] started: " in r.stdout and f"[{name}] finished in " in r.stdout
    assert "| eager | native |" in r.stdout and "| compile-default | native |" in r.stdout
    assert (tmp_path / "cmp" / "compare.md").read_text() in r.stdout


BAD = [
    (["--batch-size", "0"], "compare.py: error: --batch-size must be a positive number, got 0"),
    (["--arch", "resnet9000"], "compare.py: error: unknown --arch 'resnet9000'; valid: resnet8, resnet18"),
    (["--steps", "10"], "compare.py: error: --steps 10 is too few"),
    (["--name", "../../x"], "compare.py: error: --name '../../x' is not a plain directory name"),
    (["--name", "a/b"], "compare.py: error: --name 'a/b' is not a plain directory name"),
    (["--name", "x\ny"], "compare.py: error: --name 'x\\ny' contains control characters"),
]
BAD += [
    (["--variants", "eager", "eager"], "compare.py: error: --variants: eager given more than once; name each once"),
    (["--variants", "eager", "compile", "eager"], "compare.py: error: --variants: eager given more than once"),
    (["--ops", "native", "native"], "compare.py: error: --ops: native given more than once"),
    (["--variants", "eagre"], "compare.py: error: argument --variants: invalid choice: 'eagre'"),
]
if not torch.cuda.is_available():
    BAD.append((["--variants", "cuda-graphs"], "compare.py: error: --cuda-graphs needs a CUDA GPU"))


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    """Pass-through flags are checked by the trainer's own validation before any variant runs."""
    r = subprocess.run([*COMPARE, "--device", "cpu", "--variants", "eager", "--ops", "native", *args,
                        "--logdir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (tmp_path / "logs").exists() and not list(tmp_path.rglob("compare-*"))


def test_a_bad_flag_is_answered_before_torch_is_imported():
    rc, torch_imported, stderr = call_without_torch("stepscope.demo.comparison", "main", ["--batch-size", "0"])
    assert (rc, torch_imported) == (2, False), stderr
    assert "--batch-size must be a positive number, got 0" in stderr


def test_help_is_complete():
    r = subprocess.run([*COMPARE, "--help"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    # the description is whole sentences, and the defaults of both devices are stated
    assert "each with native and custom elementwise ops." in text
    assert "on a CPU ResNet-8 at batch 32 for 40 steps" in text and "on a GPU ResNet-18 at batch 128" in text
    assert "refused up front, before anything runs or is written" in text


def test_the_defaults_fit_the_device():
    from stepscope.demo.comparison import DEFAULTS, fill_defaults, parse

    a = parse(["--device", "cpu", "--variants", "eager"], "compare", REPO / "logs")
    cpu = fill_defaults(a, "cpu")
    assert (cpu.arch, cpu.batch_size, cpu.steps, cpu.variants, cpu.ops) == ("resnet8", 32, 40, ["eager"], ["native"])
    gpu = fill_defaults(parse([], "compare", REPO / "logs"), "cuda")
    assert (gpu.arch, gpu.batch_size, gpu.steps) == ("resnet18", 128, 300)
    assert "cuda-graphs" not in DEFAULTS["cpu"].variants  # every CPU default can run on a CPU
    given = fill_defaults(parse(["--arch", "lenet", "--batch-size", "8", "--steps", "30"], "c", REPO), "cpu")
    assert (given.arch, given.batch_size, given.steps) == ("lenet", 8, 30)


def test_stepscope_compare_resolves_to_the_function_returning_rows():
    """In a fresh process, also after the module that holds it has been imported."""
    code = ("import inspect, stepscope, stepscope.demo.comparison\n"
            "f = stepscope.compare\n"
            "print(f.__module__, f.__name__, inspect.signature(f).return_annotation)\n"
            "try:\n    f(['--variants', 'eager', 'eager'])\nexcept ValueError as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["stepscope.demo.comparison compare list[dict]",
                                     "CompareError --variants: eager given more than once; name each once"]


FAKE_TRAIN = """
import json, sys, time
from pathlib import Path
from stepscope.tensorboard.tb_events import EventLog
args = sys.argv[1:]
run = Path(args[args.index("--logdir") + 1]) / args[args.index("--run-name") + 1]
run.mkdir(parents=True)
with EventLog(run) as log:
    for step in (10, 20, 30):
        time.sleep(1.0)
        log.scalars({"train/loss": 1.0}, step)
        log.flush()
(run / "run.json").write_text(json.dumps({"config": {"data": {"batch_size": 8}}, "world_size": 1,
    "final": {"median_step_ms": 5.0, "mean_step_ms": 5.5, "timed_steps": 20}}))
"""


def test_each_variant_shows_its_progress_while_it_runs(tmp_path, capsys):
    """A progress line every few seconds while each variant runs: its latest logged step."""
    from stepscope.demo.comparison import compare

    with mock.patch("stepscope.demo.comparison.PROGRESS_EVERY_S", 0.4):
        rows = compare(["--device", "cpu", "--variants", "eager", "compile-default", "--ops", "native",
                        "--steps", "30", "--logdir", str(tmp_path), "--name", "cmp"],
                       train_cmd=(sys.executable, "-c", FAKE_TRAIN))
    out = capsys.readouterr().out
    assert [(r["variant"], r["median_ms"]) for r in rows] == [("eager", 5.0), ("compile-default", 5.0)]
    assert out.splitlines()[0].startswith("stepscope compare: 2 variant(s) on cpu, resnet8 at batch 32 for 30 steps")
    for name in ("eager-native", "compile-default-native"):
        ticks = re.findall(rf"^\[{name}\] (starting|step \d+/30), [\d.]+ s$", out, re.M)
        steps = [int(t.split()[1].split("/")[0]) for t in ticks if t.startswith("step")]
        assert steps and steps == sorted(steps) and steps[-1] >= 20, out
        assert out.index(f"[{name}] started") < out.index(f"[{name}] step") < out.index(f"[{name}] finished")

"""stepscope verify: its refusals (one line, exit 2, nothing written), the remedy it picks for each verdict,
the flags it reruns the training with, and its CPU path end to end (a data-bound CIFAR-format run fixed by
--workers). Its GPU runs (launch-bound fixed by --cuda-graphs, data-bound fixed by --workers) are recorded in
BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from stepscope.bench.cifar_folder import write_cifar_folder
from stepscope.config import TrainConfig
from stepscope.verify import VerifyError, _flag_args, _with, predicted_speedup, remedy_for
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainrun import FAST, PROFILE_3_STEPS, REPO, on_cpus, run_train

VERIFY = [sys.executable, str(REPO / "scripts" / "verify.py")]


def cfg(**changes) -> dict:
    d = TrainConfig(device="cuda").to_dict()
    for key, value in changes.items():
        section, _, name = key.rpartition("__")
        (d[section] if section else d)[name] = value
    return d


@pytest.mark.parametrize("verdict,config,findings,flags", [
    ("launch_bound", cfg(), [], ("--cuda-graphs",)),
    ("launch_bound", cfg(data__name="cifar10"), [], ("--compile", "reduce-overhead")),
    ("data_bound", cfg(data__name="cifar10", data__workers=0), [], ("--workers", "4", "--pin-memory")),
    ("data_bound", cfg(data__name="cifar10", data__workers=6), [], ("--workers", "12", "--pin-memory")),
    ("transfer_bound", cfg(data__placement="host", data__pin_memory=False), [], ("--pin-memory",)),
    ("transfer_bound", cfg(data__placement="host"), [], ("--data-placement", "device")),
    ("host_bound", cfg(), [{"id": "host_sync"}], ("--log-every", "100")),
])
def test_remedy_for_each_verdict(verdict, config, findings, flags):
    assert remedy_for(verdict, config, findings).flags == flags


@pytest.mark.parametrize("verdict,config,message", [
    ("gpu_bound", cfg(), "gpu_bound: no trainer option expresses its remedy"),
    ("cpu_bound", cfg(device="cpu"), "cpu_bound: no trainer option expresses its remedy"),
    ("launch_bound", cfg(cuda_graphs=True), "--cuda-graphs already on"),
    ("data_bound", cfg(), "data_bound on synthetic data"),
    ("host_bound", cfg(), "host work outside torch ops"),
])
def test_verdicts_without_a_trainer_remedy_are_refused(verdict, config, message):
    with pytest.raises(VerifyError, match=message):
        remedy_for(verdict, config, [])


def test_rerun_flags_reproduce_the_config_and_apply_the_remedy():
    base = _flag_args(cfg(data__name="cifar10", data__workers=0, compile="default"))
    assert base[base.index("--workers") + 1] == "0" and base[base.index("--compile") + 1] == "default"
    fixed = _with(base, ("--workers", "4", "--pin-memory"))
    assert fixed[fixed.index("--workers") + 1] == "4" and fixed.count("--workers") == 1
    graphs = _with(_flag_args(cfg(compile="default")), ("--cuda-graphs",))
    assert "--cuda-graphs" in graphs and "--compile" not in graphs  # exclusive with compile
    assert _with(["--no-bf16"], ("--bf16",)) == ["--bf16"]


def verify(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*VERIFY, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_refusals_one_line_exit_2_nothing_written(tmp_path):
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "run.json").write_text(json.dumps({"some": "other tool"}))
    for path, message in ((not_a_run, "no run.json"), (foreign, "not a stepscope training run")):
        r = verify(path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
        assert not (path / "verify").exists()
    r = verify(foreign, "--steps", "3")
    assert r.returncode == 2 and "--steps 3 is too few" in r.stderr


def test_an_unprofiled_run_and_a_cpu_bound_run_are_refused(tmp_path):
    """End to end on the CPU: a real run without --profile has no diagnosis; a profiled CPU run is
    cpu_bound, whose remedy (a GPU) no trainer flag expresses. Nothing is written into either run."""
    plain = run_train([*FAST, "--steps", "3", "--logdir", str(tmp_path), "--run-name", "plain"])
    profiled = run_train([*FAST, "--steps", "3", *PROFILE_3_STEPS, "--logdir", str(tmp_path), "--run-name", "prof"])
    assert plain.returncode == profiled.returncode == 0, profiled.stderr[-2000:]
    r = verify(tmp_path / "plain")
    assert r.returncode == 2 and "no diagnosis in run.json; run stepscope train with --profile" in r.stderr
    r = verify(tmp_path / "prof")
    assert r.returncode == 2 and "no trainer option expresses its remedy" in r.stderr
    run = json.loads((tmp_path / "prof" / "run.json").read_text())
    assert "verification" not in run and not (tmp_path / "prof" / "verify").exists()


def test_predicted_speedup_of_data_bound_is_bounded_by_the_cores():
    span = {"findings": [{"id": "data_loading", "cost_ms_per_step": 90.0}]}
    assert predicted_speedup(span, "data_bound", 100.0) == pytest.approx(10.0)
    # 120 ms of CPU work per step on 2 cores: the step cannot drop below 60 ms
    assert predicted_speedup(span, "data_bound", 100.0, cpu_ms=120.0, cores=2) == pytest.approx(100 / 60)
    assert predicted_speedup(span, "data_bound", 100.0, cpu_ms=120.0, cores=16) == pytest.approx(10.0)
    assert predicted_speedup({"findings": []}, "data_bound", 100.0) == 1.0


def test_a_data_bound_cifar_run_is_confirmed_by_workers(tmp_path):
    """End to end on the CPU: LeNet on a CIFAR-format folder the test writes, heavy per-sample augmentation in
    the training process (--workers 0). The profiled run reads data_bound; verify reruns it unprofiled with and
    without --workers, and the workers' speed-up confirms the verdict, in run.json, diagnosis.md and TensorBoard.
    Everything runs on two CPUs (the machine this was measured on), so that the speed-up and verify's
    core-bounded prediction are the same on a CI machine of any size."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    write_cifar_folder(tmp_path / "cifar", 512)
    flags = ["--device", "cpu", "--arch", "lenet", "--data", "cifar10", "--data-dir", str(tmp_path / "cifar"),
             "--workers", "0", "--augment", "heavy", "--batch-size", "128", "--steps", "12", "--profile",
             "--skip-first", "3", "--wait", "1", "--warmup", "1", "--active", "2", "--no-with-stack",
             "--logdir", str(tmp_path), "--run-name", "slow"]
    with on_cpus(cpus):
        train = run_train(flags)
    assert train.returncode == 0, train.stderr[-2000:]
    run_dir = tmp_path / "slow"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["diagnosis"]["verdict"] == "data_bound", run["diagnosis"]
    assert run["final"]["telemetry"]["cpu_ms"] > 0

    # CI runs tests two at a time on two cores: a neighbour that takes a core during the remedy's run leaves the
    # workers one core, and the speed-up falls short of the 2-core prediction (inconclusive) or vanishes
    # (refuted, exit code 1: measured 1.02x with a busy loop on one of the two cores). Such a run is done again
    # (up to three in all); each is a complete verification, and the last one must confirm and exit 0.
    for _attempt in range(3):
        shutil.rmtree(run_dir / "verify", ignore_errors=True)
        with on_cpus(cpus):
            r = verify(run_dir, "--steps", "30")
        assert r.returncode in (0, 1), r.stderr  # 2 would be an error, not a measurement
        v = json.loads((run_dir / "run.json").read_text())["verification"]
        if v["result"] == "confirmed":
            break
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert v["remedy"] == ["--workers", "4"] and v["result"] == "confirmed", (v, r.stdout)
    assert v["cores"] == len(cpus)
    assert v["measured_speedup"] >= 1.3 and v["baseline_step_ms"] > v["remedy_step_ms"]
    assert "## Verification: `confirmed`" in (run_dir / "diagnosis.md").read_text()
    assert {p.name for p in (run_dir / "verify").iterdir()} == {"baseline", "remedy"}
    tb = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    tb.Reload()
    tags = tb.Tags()
    assert {"verify/baseline_step_ms", "verify/remedy_step_ms", "verify/measured_speedup"} <= set(tags["scalars"])
    assert any("verification" in t for t in tags["tensors"])
    speedup = tb.Scalars("verify/measured_speedup")[-1].value
    assert speedup == pytest.approx(v["measured_speedup"], rel=1e-5)

"""Real training runs on the CPU: determinism, learning, run.json, scalars, Ctrl-C, package shadowing."""

import os
import signal
import subprocess
import sys
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainrun import FAST, PLAIN_RUN, REPO, TRAIN, run_json, run_train, shared_run

# No test here depends on the model: LeNet's steps cost a fraction of ResNet-8's (the default architecture, which
# the session's profiled shared runs train). On the 2-core machine with its cores busy (as under pytest-xdist), a
# ResNet-8 run of 40 steps cost 50 to 65 CPU-s; LeNet's 80 steps below, on one OpenMP thread, about 10.
LENET = ["--arch", "lenet"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory) -> dict:
    """The same 8 steps of LeNet three times: seed 3 (the session's shared PLAIN_RUN), seed 3 again with packages
    named `kernels` and `trainer` that fail on import ahead of ours on PYTHONPATH, and seed 4."""
    shadow = tmp_path_factory.mktemp("shadow")
    for name in ("kernels", "trainer"):
        (shadow / name).mkdir()
        (shadow / name / "__init__.py").write_text(f"raise ImportError('the wrong {name} was imported')\n")
    run, r = shared_run(tmp_path_factory, *PLAIN_RUN)
    args = PLAIN_RUN[1]
    assert args[-6:] == [*LENET, "--steps", "8", "--seed", "3"]
    logdir = tmp_path_factory.mktemp("seeds")
    again = run_train([*args, "--logdir", str(logdir), "--run-name", "b"], env={"PYTHONPATH": str(shadow)})
    other = run_train([*args[:-1], "4", "--logdir", str(logdir), "--run-name", "c"])
    return {"a": (run, r), "b": (logdir / "b", again), "c": (logdir / "c", other)}


def test_same_seed_same_losses(seeded_runs):
    for _, r in seeded_runs.values():
        assert r.returncode == 0, r.stderr[-2000:]
    a, b, c = (run_json(run) for run, _ in seeded_runs.values())
    assert (a["config"]["seed"], b["config"]["seed"], c["config"]["seed"]) == (3, 3, 4)
    assert a["loss_history"] == b["loss_history"] and len(a["loss_history"]) == 4
    assert c["loss_history"] != a["loss_history"] and len(c["loss_history"]) == 4


def test_loss_falls_and_scalars_are_logged(tmp_path):
    # LeNet learns the synthetic classes in 80 steps: over seeds 0-3 the last logged loss was 0.25-0.40 of the
    # first, and the eval accuracy 0.66-0.86
    r = run_train([*FAST, *LENET, "--steps", "80", "--log-every", "4", "--logdir", str(tmp_path), "--run-name", "r"],
                  env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-2000:]
    d = run_json(tmp_path / "r")
    losses = [v for _, v in d["loss_history"]]
    assert losses[-1] < 0.8 * losses[0]
    assert d["final"]["eval_accuracy"] > 0.2  # 10 classes: chance is 0.1
    assert d["environment"]["torch"] and d["world_size"] == 1 and d["config"]["steps"] == 80
    assert set(d["final"]) >= {"steps", "train_loss", "eval_accuracy", "images_per_s"}
    acc = EventAccumulator(str(tmp_path / "r"))
    acc.Reload()
    tags = acc.Tags()
    assert {"train/loss", "train/lr", "perf/step_ms", "perf/images_per_s", "eval/accuracy"} <= set(tags["scalars"])
    assert len(acc.Scalars("train/loss")) == 20  # every 4th of 80 steps
    assert "config" in tags["tensors"]  # the Text tag as written, one writer for every tag
    # stderr is not a terminal here (tqdm draws nothing): plain progress lines, the last at the last step
    lines = [line for line in r.stderr.splitlines() if line.startswith("step ")]
    assert lines and lines[-1].startswith("step 80/80, loss "), r.stderr[-2000:]


def test_plain_progress_every_few_seconds(capsys):
    """Without a terminal: a line every PLAIN_EVERY_S seconds, never more often, and one at the last step."""
    from stepscope.demo.loop import PLAIN_EVERY_S, PlainProgress, Progress
    from stepscope.demo.timing import Throughput

    now = [0.0]
    plain = PlainProgress(100, on=True, clock=lambda: now[0])
    for step in range(1, 101):
        now[0] += 0.5  # a step every half second: 50 s in all
        plain.update(step, Progress(steps=step, train_loss=1.0), Throughput(32))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 50 / PLAIN_EVERY_S and lines[-1] == "step 100/100, loss 1.000"
    PlainProgress(10, on=False).update(10, Progress(), Throughput(32))  # a terminal: tqdm's bar alone
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_default_run_names_are_unique(tmp_path):
    for _ in range(2):
        assert run_train([*FAST, "--steps", "2", "--logdir", str(tmp_path)]).returncode == 0
    assert len([p for p in tmp_path.iterdir() if (p / "run.json").exists()]) == 2


@pytest.mark.slow
def test_ctrl_c_flushes_and_exits_130(tmp_path):
    # bounded: 2000 steps in one cycle, and the child's whole group is killed if it outlives the test
    args = [*FAST, "--steps", "2000", "--log-every", "5", "--profile", "--skip-first", "0", "--wait", "0",
            "--warmup", "1", "--active", "1990", "--repeat", "1", "--no-with-stack", "--no-profile-memory",
            "--logdir", str(tmp_path), "--run-name", "int"]
    p = subprocess.Popen([sys.executable, str(TRAIN), *args], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run = tmp_path / "int"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(run.glob("events.out.tfevents.*")):
            time.sleep(0.5)
        time.sleep(6)  # let it record some steps
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err[-3000:]
    d = run_json(run)
    assert d["status"] == "interrupted" and d["signal"] == "SIGINT" and 0 < d["final"]["steps"] < 2000
    assert d["traces"], out  # the recording cycle was stopped and written
    assert (run / d["traces"][0]).exists() and list((run / "raw").glob("*/*.trace.json.gz"))
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert acc.Scalars("train/loss")  # scalars were flushed


def test_scripts_import_our_packages_over_same_named_ones(seeded_runs):
    """Distributions named `kernels` (Hugging Face) or `trainer` may be installed; ours must win: the run with
    failing packages of those names ahead on PYTHONPATH (seeded_runs' "b") trains, and as the one without them."""
    run, r = seeded_runs["b"]
    assert r.returncode == 0, r.stderr[-2000:]
    assert run_json(run)["final"]["steps"] == 8


@pytest.mark.slow
def test_nvtx_ranges_do_not_change_the_run(tmp_path):
    """--nvtx adds NVTX ranges beside the record_function ones (for nsys); the run itself is the same."""
    for name, extra in (("plain", []), ("nvtx", ["--nvtx"])):
        r = run_train([*FAST, "--steps", "4", "--seed", "2", "--logdir", str(tmp_path), "--run-name", name, *extra])
        assert r.returncode == 0, r.stderr[-2000:]
    assert run_json(tmp_path / "nvtx")["config"]["run"]["nvtx"] is True
    assert run_json(tmp_path / "nvtx")["loss_history"] == run_json(tmp_path / "plain")["loss_history"]

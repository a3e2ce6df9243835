"""A profiled CPU run prints no spurious errors or warnings, a rounded summary, and a flame graph of the work.

    python -m pytest -q tests/test_cpu_noise.py
"""

from __future__ import annotations

import html
import re

import pytest
from trainrun import PROFILED_RUN, run_json, shared_run

NOISE = re.compile(r"ERROR|[Ww]arning|USDT|^\[W\d|CPUAllocator")


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory):
    """The session's shared PROFILED_RUN: one recording cycle and its flame graph."""
    run, r = shared_run(tmp_path_factory, *PROFILED_RUN)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "--flamegraph" in PROFILED_RUN[1]
    return r, run


def test_stderr_has_only_the_progress_bar(profiled_run):
    r, _ = profiled_run
    lines = [ln for ln in r.stderr.replace("\r", "\n").splitlines() if ln.strip()]
    noisy = [ln for ln in lines if NOISE.search(ln)]
    assert not noisy, noisy
    # tqdm's bar, and without a terminal (as here) the plain progress line every few seconds (the loss once one was
    # read back, images/s from the first timed step on: a slow machine may print one at step 1, or while the first
    # steps are warm-up or profiled)
    bar = re.compile(r"^\s*\d+%\|.*\| \d+/\d+ \[|^step \d+/\d+(, loss [\d.]+(, [\d.]+ images/s)?)?$")
    assert all(bar.match(ln) for ln in lines), [ln for ln in lines if not bar.match(ln)]


def test_summary_is_rounded(profiled_run):
    r, run = profiled_run
    final = run_json(run)["final"]
    summary = r.stdout.strip().splitlines()[-1]
    steps = int(PROFILED_RUN[1][PROFILED_RUN[1].index("--steps") + 1])
    assert final["steps"] == steps
    assert summary.startswith(f"completed: {steps} steps, train loss ") and "None" not in summary
    assert f"train loss {final['train_loss']:.4f}, eval accuracy {final['eval_accuracy']:.3f}" in summary


def test_flamegraph_is_the_training_thread(profiled_run):
    _, run = profiled_run
    (svg,) = run.glob("*.flamegraph.svg")
    frames = [(html.unescape(name), float(value)) for name, value in
              re.findall(r"<title>(.*?) \((\d+(?:\.\d+)?) ", svg.read_text())]
    name, value = max((f for f in frames if f[0] != "all"), key=lambda f: f[1])
    assert re.match(r"train\.py\(\d+\):_<module>", name), (name, value)
    # no idle background thread: tqdm's monitor, TensorBoard's writer thread (its run loop; the main thread's own
    # calls into the writer, when it logs a scalar, are training work and stay)
    assert not [n for n, _ in frames if "tqdm/_monitor" in n or re.search(r"event_file_writer\.py\(\d+\):_?run$", n)]
    assert "threads that ran torch code" in svg.read_text()

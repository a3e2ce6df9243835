"""`stepscope tensorboard`'s analysis has a time bound per run (tensorboard/watch.py): a run whose analysis would
take minutes is stopped at its bound and reported in one line, while a good run beside it is published
first, without waiting for it.

The slow input is real: a gzipped trace of many identical gzip members (22 MB on disk, 6 GB of events once
decompressed), whose parse takes minutes. The bound is set to 8 s through $STEPSCOPE_TB_BOUND_S, far above
what the small good run takes and far below what the slow one would."""

from __future__ import annotations

import gzip
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from stepscope.tensorboard.watch import BOUND_ENV, WatchConfig, Watcher

DATA = Path(__file__).resolve().parent / "data"
BOUND_S = 8


def slow_trace(path: Path) -> None:
    """A trace that opens like any other and goes on for 6 GB of events (400 gzip members of 16 MB)."""
    event = b'{"ph": "X", "name": "aten::add", "cat": "cpu_op", "ts": 1, "dur": 1, "pid": 1, "tid": 1},'
    member = gzip.compress(event * ((16 << 20) // len(event)), compresslevel=9)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(400):
            f.write(member)


def test_a_run_past_its_bound_is_stopped_in_one_line_and_the_good_run_is_published_first(tmp_path, monkeypatch):
    monkeypatch.setenv(BOUND_ENV, str(BOUND_S))
    src = tmp_path / "src"
    shutil.copytree(DATA / "cpu_resnet", src / "good")
    slow_trace(src / "slow" / "w.1.pt.trace.json.gz")
    watcher = Watcher(WatchConfig(src, tmp_path / "logdir", tmp_path / "staging"))
    assert watcher.poll(wait_s=0) == []  # first sight
    start = time.monotonic()
    lines = watcher.poll(wait_s=0)  # both stable: both analyses start
    while not lines and watcher.busy:
        lines = watcher.poll(wait_s=0.5)
    # the good run is published while the slow one is still analysed
    assert lines == ["+ run good: 1 trace (tensorboard_trace_handler): cpu_bound"] and watcher.busy
    assert (tmp_path / "logdir" / "good" / "diagnosis.md").is_file()
    (stopped,) = watcher.poll()  # waits until the slow run is done or stopped
    took = time.monotonic() - start
    assert stopped.startswith("! run slow (1 trace, ") and "\n" not in stopped
    assert f"the analysis took more than {BOUND_S} s and was stopped" in stopped
    assert BOUND_S <= took < BOUND_S + 10 and not watcher.busy
    assert multiprocessing.active_children() == []  # the stopped analysis is gone
    assert not (tmp_path / "logdir" / "slow").exists()
    # not tried again until the file changes
    assert watcher.poll() == [] and watcher.poll() == [] and not watcher.busy


def test_a_bad_bound_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, BOUND_ENV: "soon"}
    r = subprocess.run([sys.executable, str(Path(__file__).parent / "stepscope_here.py"), "tensorboard", "--logdir",
                        str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"{BOUND_ENV}='soon': use a number of seconds above 0" in r.stderr


def _fail(message: str) -> None:
    raise ValueError(message)


def test_apart_returns_the_value_raises_the_error_and_stops_the_child():
    from stepscope.trace.workers import Apart

    job = Apart(sum, ([1, 2, 3],))
    while not job.ready():
        time.sleep(0.01)
    # answered, and reaped: a child still exiting once its answer is in is killed (ready() never waits)
    assert job.result() == 6 and job.process.exitcode is not None and not job.process.is_alive()
    job = Apart(_fail, ("one line",))
    while not job.ready():
        time.sleep(0.01)
    try:
        job.result()
    except ValueError as e:
        assert str(e) == "one line"
    else:
        raise AssertionError("no error")
    job = Apart(time.sleep, (600,))
    assert not job.ready()
    job.stop()
    assert job.process.exitcode == -9 and job.ready()  # killed: ready, with the reason as its error
    try:
        job.result()
    except RuntimeError as e:
        assert "ended with code -9 before it answered" in str(e)
    else:
        raise AssertionError("no error")

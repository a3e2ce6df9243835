"""capture/machine_load.py: what a run shared its CPUs with, measured from /proc, with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from stepscope.capture import machine_load

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc")

# a "run" of its own: samples, spins `SPIN` s (with a child of its own spinning too, when asked), samples again
RUN = """
import json, subprocess, sys, time
from stepscope.capture import machine_load
SPIN = 1.5
cpu0 = time.process_time()
start = machine_load.sample()
CHILD = "import time\\nt = time.time()\\nwhile time.time() - t < 1.5: pass\\nprint(time.process_time())"
child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True) \\
    if sys.argv[1] == "child" else None
t = time.time()
while time.time() - t < SPIN:
    pass
child_cpu = float(child.communicate()[0]) if child is not None else 0.0
end = machine_load.sample()
c = machine_load.contention(start, end)
print(json.dumps({"others": c.others_pct, "waited": c.waited_pct, "run_ticks": end.run - start.run,
                  "cpu_s": time.process_time() - cpu0, "child_cpu_s": child_cpu}))
"""


def run(mode: str) -> dict:
    r = subprocess.run([sys.executable, "-c", RUN, mode], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def spinners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def test_a_run_among_busy_processes_records_them_and_its_wait():
    # as many busy processes outside the run as CPUs: they hold at least a third of the machine, and the
    # run's one thread waits for a CPU a good part of the time it is ready to run
    hogs = spinners(len(os.sched_getaffinity(0)))
    try:
        time.sleep(0.2)
        got = run("alone")
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert got["others"] > 30 and got["waited"] > 15, got


def test_the_runs_own_children_are_the_run_not_others():
    got = run("child")
    ticks = os.sysconf("SC_CLK_TCK")
    # the run's ticks hold its own CPU time and its child's (reaped: counted through cutime), give or take
    # a tick or two of each process's rounding
    assert got["child_cpu_s"] > 0.1
    assert got["run_ticks"] >= (got["cpu_s"] + got["child_cpu_s"]) * ticks - 4, got


def test_no_proc_means_unknown_not_zero(monkeypatch, tmp_path):
    monkeypatch.setattr(machine_load, "PROC", tmp_path / "no_proc")
    assert machine_load.sample() is None
    assert machine_load.contention(None, None) is None

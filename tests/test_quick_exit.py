"""A read-only command's process ends without the interpreter's teardown (trainer/cli/quick_exit.py), and
loses nothing by it: its output, its exit code and its atexit handlers are all there.

    python -m pytest -q tests/test_quick_exit.py      # a few seconds; no torch

Each case runs in a process of its own, since quick_exit ends the process that calls it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"

# A process that prints without a newline (left in stdout's buffer), registers an atexit handler, keeps an
# object whose __del__ writes straight to fd 1 when the interpreter tears its module down, and ends as
# {end} says.
ENDING = textwrap.dedent("""
    import atexit, os, sys, threading, time
    from stepscope.cli.quick_exit import quick_exit

    class Torn:
        def __del__(self):
            os.write(1, b" teardown")

    torn = Torn()
    atexit.register(lambda: print(" atexit", end=""))
    if {thread}:  # a thread that the normal exit waits for
        threading.Thread(target=lambda: (time.sleep(0.3), os.write(1, b" thread"))).start()
    print("output", end="")
    {end}
""")


def _ended(end: str, thread: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ENDING.format(end=end, thread=thread)], capture_output=True,
                          text=True, timeout=60)


def test_quick_exit_keeps_the_output_code_and_handlers_and_skips_the_teardown():
    quick = _ended("sys.exit(quick_exit(3))")
    assert (quick.returncode, quick.stdout, quick.stderr) == (3, "output atexit", "")
    normal = _ended("sys.exit(3)")  # the same process without it tears the object down
    assert (normal.returncode, normal.stdout) == (3, "output atexit teardown")


def test_quick_exit_leaves_a_running_thread_to_the_normal_exit():
    r = _ended("sys.exit(quick_exit(4))", thread=True)
    assert r.returncode == 4
    assert r.stdout.startswith("output") and "thread" in r.stdout and "atexit" in r.stdout
    assert "teardown" in r.stdout  # the normal exit took over


def test_a_closed_stdout_is_left_to_the_normal_exit():
    """``... | head``: the flush fails, and the normal exit reports it as it always has (exit code 120)."""
    code = "sys.stdout = open(os.devnull, 'w'); sys.stdout.close(); sys.exit(quick_exit(0))"
    r = _ended(code)
    assert "teardown" in r.stdout  # not ended early: the flush raised, and quick_exit returned
    assert r.returncode == 0


STEPSCOPE = Path(sys.executable).with_name("stepscope")  # the console script of this environment

# a witness of the interpreter's teardown in every process that imports it (Python runs sitecustomize first)
TORN = textwrap.dedent("""
    import os

    class _Torn:
        def __del__(self, write=os.write):
            write(2, b"teardown\\n")

    _torn = _Torn()
""")


@pytest.mark.parametrize("command", [
    [sys.executable, "scripts/analyze.py"],
    [sys.executable, "-m", "stepscope.cli.main", "analyze"],
    [str(STEPSCOPE), "analyze"],
], ids=["script", "module", "console-script"])
def test_the_analyze_commands_end_quickly_with_their_whole_report(command, tmp_path):
    """The doors of `analyze` end through quick_exit (no teardown: an object that sitecustomize keeps is never
    torn down), and lose nothing by it: the JSON report is whole, stderr has its summary line, and bad input
    still gets exit code 2 and one line."""
    (tmp_path / "sitecustomize.py").write_text(TORN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    normal = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
    assert normal.stderr == "teardown\n"  # the witness works: a normal exit tears it down
    r = subprocess.run([*command, str(DATA / "eager_bs128"), "--json"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spans"]
    assert "found 1 trace" in r.stderr and "teardown" not in r.stderr
    bad = subprocess.run([*command, str(DATA / "no_such_run")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "teardown" not in bad.stderr


def test_the_console_script_ends_analyze_and_diff_quickly():
    from stepscope.cli import main

    assert set(main.QUICK_EXIT) == {"analyze", "diff"} and set(main.QUICK_EXIT) <= set(main.READ_ONLY)
    assert 'stepscope = "stepscope.cli.main:run"' in (REPO / "pyproject.toml").read_text()
    assert "import run" in STEPSCOPE.read_text()  # the installed script is the one pyproject.toml names

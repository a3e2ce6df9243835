"""The `stepscope` command: every subcommand answers --help, and bad input gets one line and exit code 2.

    pytest tests/test_command.py -q

The messages are checked in this process, through the command's own `main(argv)` (what the `stepscope` script
calls); one real process per refusing subcommand proves the whole road: the one line on stderr, exit code 2.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from in_process import run_main
from stepscope.cli.main import main

REPO = Path(__file__).resolve().parents[1]
HERE = [sys.executable, str(REPO / "tests" / "stepscope_here.py")]


def stepscope_process(*args, cwd=REPO, timeout=120) -> subprocess.CompletedProcess:
    """The command as a user runs it: a process of its own."""
    return subprocess.run([*HERE, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.fixture
def stepscope(capsys):
    """The command in this process: main(argv) with its exit code (returned or raised by argparse) and output."""
    def call(*args) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(["stepscope", *map(str, args)], *run_main(main, args, capsys))
    return call


def assert_one_line_error(p: subprocess.CompletedProcess, prefix: str, *fragments: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), p.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]


def test_top_level_help_lists_every_subcommand(stepscope):
    p = stepscope("--help")
    assert p.returncode == 0, p.stderr
    usage = p.stdout.splitlines()[0]
    for name in ("train", "analyze", "compare", "tensorboard", "verify", "diff"):
        assert name in usage
    assert "bench" not in usage  # benchmarks are scripts of the checkout, not commands of the product
    assert_one_line_error(stepscope("bogus"), "stepscope: error: unknown command 'bogus'")


def test_the_command_process_answers_help_and_refuses_in_one_line():
    """The script itself: --help on stdout with exit 0, an unknown command one line on stderr with exit 2."""
    p = stepscope_process("--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: stepscope {train, analyze"), p.stderr
    assert_one_line_error(stepscope_process("bogus"), "stepscope: error: unknown command 'bogus'")


@pytest.mark.parametrize("name, expected", [
    ("train", "--profile"), ("analyze", "--export-tensorboard"), ("compare", "--variants"),
    ("tensorboard", "--shadow"), ("verify", "--steps"), ("diff", "--fail-above"),
])
def test_each_subcommand_has_help(stepscope, name, expected):
    p = stepscope(name, "--help")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: stepscope {name}") and expected in p.stdout


def test_analyze_errors_name_the_subcommand(stepscope, tmp_path):
    p = stepscope("analyze", "--bogus", tmp_path)
    assert p.stderr.splitlines() == ["stepscope analyze: error: unrecognized arguments: --bogus"]
    assert p.returncode == 2
    assert_one_line_error(stepscope("analyze", tmp_path / "missing"), "error: ", "not a directory")
    assert_one_line_error(stepscope_process("analyze", tmp_path / "missing"), "error: ", "not a directory")


def test_compare_refuses_too_few_steps(stepscope, tmp_path):
    p = stepscope("compare", "--steps", "3", "--logdir", tmp_path)
    assert_one_line_error(p, "stepscope compare: error: --steps 3 is too few")
    p = stepscope_process("compare", "--steps", "3", "--logdir", tmp_path)
    assert_one_line_error(p, "stepscope compare: error: --steps 3 is too few")
    assert not any(tmp_path.iterdir())


def test_tensorboard_bad_input(stepscope, tmp_path):
    prefix = "stepscope tensorboard: error: "
    assert_one_line_error(stepscope("tensorboard"), prefix, "--logdir")
    assert_one_line_error(stepscope("tensorboard", "--logdir", tmp_path / "nope"), prefix, "not a directory")
    assert_one_line_error(stepscope("tensorboard", "--logdir", tmp_path, "--port", "0"), prefix, "not a TCP port")
    inside = tmp_path / "shadow"
    assert_one_line_error(stepscope("tensorboard", "--logdir", tmp_path, "--shadow", inside), prefix,
                          "must be outside --logdir")
    assert not inside.exists()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_one_line_error(stepscope("tensorboard", "--logdir", tmp_path, "--port", port), prefix,
                              f"--port {port}: cannot listen there")
        # the real process: the refusal found after parsing (the port), one line and exit 2 all the same
        assert_one_line_error(stepscope_process("tensorboard", "--logdir", tmp_path, "--port", port), prefix,
                              f"--port {port}: cannot listen there")
    assert not any(tmp_path.iterdir())


def test_every_subcommand_is_a_package_function():
    from stepscope.cli.main import SUBCOMMANDS, load_function

    for place, function in SUBCOMMANDS.values():
        assert place.startswith("stepscope.") and callable(load_function(place, function)), place


BLAS_PROBE = """
import os, sys
from stepscope.cli.main import main
assert "numpy" not in sys.modules  # the entry point itself imports no numpy
code = main(sys.argv[1:])
assert "numpy" in sys.modules  # the analysis imported it, after the command set the environment
print(os.environ.get("OPENBLAS_NUM_THREADS"), code)
"""


@pytest.mark.parametrize("preset, expected", [(None, "1"), ("3", "3")])
def test_commands_that_read_traces_hold_openblas_to_one_thread(tmp_path, preset, expected):
    """numpy's OpenBLAS threads would spin beside the parse's helpers: `stepscope analyze` sets one thread
    before numpy is imported, unless the environment names a number."""
    import os

    from stepscope.trace.workers import one_blas_thread

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    trace = Path(__file__).parent / "data" / "cpu_resnet"
    p = subprocess.run([sys.executable, "-c", BLAS_PROBE, "analyze", str(trace), "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == f"{expected} 0"
    assert one_blas_thread({})["OPENBLAS_NUM_THREADS"] == "1"  # the tab's analysis child gets the same
    assert one_blas_thread({"OPENBLAS_NUM_THREADS": "4"})["OPENBLAS_NUM_THREADS"] == "4"

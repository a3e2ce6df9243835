"""Corrupt and hostile traces never crash `scripts/analyze.py`: one line on stderr naming the file and the
problem, exit code 2, no export written; and what it does print with ``--json`` is strict JSON.

    pytest tests/test_corrupt_traces.py -q

Every case starts from a real trace (tests/data/eager_bs32) and breaks one thing. The gzip bomb and the
out-of-memory case run under a limit on the process's data (``RLIMIT_DATA``: heap and private mappings), so
that they cost the test little. Not an address-space limit: a process that has used up its address space can
die of SIGSEGV the next time its stack needs a page, wherever that happens to be.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from few_by_default import few_by_default
from hypothesis import given
from hypothesis import strategies as st
from in_process import run_main
from stepscope.analysis import TraceError
from stepscope.plugin_copy import export_tensorboard
from stepscope.report.front import analyze
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace, write_trace_atomic

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SPAN = "1795259107072492233"
NAME = f"w.{SPAN}.pt.trace.json.gz"


@functools.cache
def _base() -> dict:
    (tf,) = discover(DATA / "eager_bs32").traces
    return load_trace(tf.path)


def base() -> dict:
    return copy.deepcopy(_base())


def first(trace: dict, what: str) -> dict:
    """The first event of a kind: "op" (cpu_op), "kernel" or "step" (ProfilerStep#N)."""
    test = {"op": lambda e: e.get("cat") == "cpu_op", "kernel": lambda e: e.get("cat") == "kernel",
            "step": lambda e: str(e.get("name", "")).startswith("ProfilerStep#")}[what]
    return next(e for e in trace["traceEvents"] if test(e))


def edited(what: str, **changes):
    """A trace whose first ``what`` event has ``changes`` (a value of DELETE removes the key)."""
    def build(run: Path) -> None:
        t = base()
        e = first(t, what)
        for k, v in changes.items():
            if v is DELETE:
                del e[k]
            else:
                e[k] = v
        write_trace_atomic(run / NAME, t)
    return build


def every_step(**changes):
    """A trace whose host ProfilerStep#N events all have ``changes``."""
    def build(run: Path) -> None:
        t = base()
        for e in t["traceEvents"]:
            if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
                e.update(changes)
        write_trace_atomic(run / NAME, t)
    return build


def top_level(**changes):
    def build(run: Path) -> None:
        write_trace_atomic(run / NAME, {**base(), **changes})
    return build


def raw_gz(*members: bytes, repeat_last: int = 1):
    """A .gz file of these gzip members, the last one repeated: many members of one highly compressible
    block make a file of a few MB that inflates to GB, without compressing GB here."""
    def build(run: Path) -> None:
        with open(run / NAME, "wb") as f:
            for m in members[:-1]:
                f.write(m)
            for _ in range(repeat_last):
                f.write(members[-1])
    return build


def deep_nesting(run: Path) -> None:
    raw_gz(gzip.compress(b'{"traceEvents": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"))(run)


def gzip_bomb(run: Path) -> None:  # 4 GiB of JSON whitespace from ~4 MB of gzip
    raw_gz(gzip.compress(b'{"traceEvents": ['), gzip.compress(b" " * (64 << 20), 1), repeat_last=64)(run)


def huge_trace(run: Path) -> None:
    """350,000 ops of 20 inputs each, 59 MiB of JSON: under the read ceiling of a 256 MiB process
    (64 MiB), about 1 GB once parsed (an empty list is 2 bytes of JSON and 56 of Python)."""
    op = (b'{"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 1, "dur": 1, '
          b'"args": {"Input Dims": [' + b",".join([b"[]"] * 20) + b"]}}")
    text = b'{"traceEvents": [' + b",".join([op] * 350_000) + b"]}"
    (run / NAME).write_bytes(gzip.compress(text, 1))


DELETE = object()
GIB = 1 << 30
# id: (builder, fragment of the one error line, or None where the trace must be analysed, RLIMIT_DATA or None)
CASES = {
    "args_not_object": (edited("op", args=["Input Dims"]), "has args that is an array", None),
    "distributedInfo_string": (top_level(distributedInfo="rank0"), "distributedInfo is a string", None),
    "deviceProperties_dict": (top_level(deviceProperties={"name": "H100"}), "deviceProperties is an object",
                              None),
    "step_zero_length": (edited("step", dur=0), "lasts 0 µs", None),
    "step_negative": (edited("step", dur=-250.5), "lasts -250.5 µs", None),
    "deep_nesting": (deep_nesting, "nested too deeply", None),
    "gzip_bomb": (gzip_bomb, "refused: yields more than", GIB // 4),
    "out_of_memory": (huge_trace, "too large to load into the memory", GIB // 4),
    "nan_dur": (edited("kernel", dur=float("nan")), "has dur nan", None),
    "infinite_dur": (edited("kernel", dur=float("inf")), "has dur inf", None),
    "step_without_ph": (edited("step", ph=DELETE), "has ph None", None),
    "step_without_cat": (edited("step", cat=DELETE), None, None),
    "op_without_cat": (edited("op", cat=DELETE), None, None),
    "steps_in_a_foreign_category": (every_step(cat="foreign"), "but none is a host step range", None),
    "string_ts": (edited("op", ts="1795259107072"), "has ts '1795259107072'", None),
    "int_name": (edited("op", name=123), "has a name that is a number", None),
    "nan_ts": (edited("op", ts=float("nan")), "has ts nan", None),
    "ts_1e300": (edited("op", ts=1e300), "has ts 1e+300", None),
    # past every input check: the analysis' own failure, still one line
    "device_not_a_number": (edited("kernel", args={"device": "gpu0"}), "cannot analyse this trace (ValueError:",
                            None),
}


def run_analyze(run: Path, *args, rlimit: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (rlimit, rlimit))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), str(run), *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          preexec_fn=limit if rlimit else None)


def strict_json(text: str):
    def refuse(c):
        raise ValueError(f"{c} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("case", [c for c, (_, _, rlimit) in CASES.items() if rlimit is None])
def test_corrupt_trace_is_refused_by_the_library_in_one_line(case, tmp_path):
    """In-process, every case (the memory ceilings apart, which need a process of their own)."""
    build, fragment, _ = CASES[case]
    run = tmp_path / "run"
    run.mkdir()
    build(run)
    if fragment is None:  # tolerated: analysed as if the field were there
        (span,) = analyze(run).spans
        assert span.to_dict()["metrics"]["steps"] == 2
        return
    with pytest.raises(TraceError, match=re.escape(fragment)) as e:
        analyze(run)
    assert "\n" not in str(e.value) and NAME in str(e.value)


def _check_command(case: str, tmp_path: Path, run_command) -> None:
    """``run_command(run, *args) -> (exit code, stdout, stderr)`` on the case's trace: one line and exit 2, or
    for a tolerated field strict JSON of the analysed steps; nothing written either way."""
    build, fragment, _ = CASES[case]
    run, out = tmp_path / "run", tmp_path / "exported"
    run.mkdir()
    build(run)
    if fragment is None:  # tolerated: analysed as if the field were there, strict JSON out
        code, stdout, stderr = run_command(run, "--json")
        assert code == 0, stderr
        (span,) = strict_json(stdout)["spans"]
        assert span["metrics"]["steps"] == 2
        return
    code, stdout, stderr = run_command(run, "--json", "--export-tensorboard", out)
    assert code == 2, stderr[-2000:]
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
    assert NAME in lines[0] and fragment in lines[0], lines[0]
    assert "no ProfilerStep#N" not in lines[0]
    assert not out.exists() and [f.name for f in tmp_path.iterdir()] == ["run"]  # nothing written


# Each case starts the command (about 3 CPU-seconds). By default: the analysis' own failure and both memory
# ceilings (which need a process of their own); an input check and a tolerated field go through the same
# main() in-process by default (the test below), and the other input checks reach the same one-line exit
# through the same door (the library test above checks each one's line), and run in the slow set.
@pytest.mark.parametrize("case", few_by_default(CASES, keep=["device_not_a_number", "gzip_bomb", "out_of_memory"]))
def test_corrupt_trace_gets_one_line_and_exit_2(case, tmp_path):
    def command(run, *args):
        p = run_analyze(run, *args, rlimit=CASES[case][2])
        return p.returncode, p.stdout, p.stderr
    _check_command(case, tmp_path, command)


@pytest.mark.parametrize("case", ["args_not_object", "step_without_cat"])
def test_corrupt_trace_gets_one_line_and_exit_2_from_main_in_process(case, tmp_path, capsys):
    """The command's main() in this process: an input check's one line and exit 2, a tolerated field's strict
    JSON (the subprocess test above holds the same path in a process of its own)."""
    from stepscope.cli.analyze import main
    _check_command(case, tmp_path, lambda run, *args: run_main(main, [run, *args], capsys, prog="analyze.py"))


@pytest.mark.parametrize("change", [{"ts": "1795259107072"}, {"name": 123}, {"ts": float("nan")},
                                    {"ts": 1e300}], ids=["string_ts", "int_name", "nan_ts", "ts_1e300"])
def test_export_checks_the_copy_with_the_plugins_own_loader(change, tmp_path):
    """Called directly (the analysis would refuse these first): the plugin cannot load such a copy, so the
    export fails and leaves nothing behind."""
    run, out = tmp_path / "run", tmp_path / "exported"
    run.mkdir()
    edited("op", **change)(run)
    with pytest.raises(ValueError, match=f"{NAME}: torch-tb-profiler 0.4.3 cannot load the exported copy"):
        export_tensorboard(run, out)
    assert not out.exists()


def test_json_output_has_null_where_a_number_is_not_finite():
    from stepscope.analysis.json_out import dumps

    text = dumps({"a": float("nan"), "b": [1.5, float("inf"), {"c": -float("inf")}], "d": (2, "x")})
    assert strict_json(text) == {"a": None, "b": [1.5, None, {"c": None}], "d": [2, "x"]}


_JSON_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text())
_JSON_VALUES = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=30)


@given(_JSON_VALUES, st.booleans())
def test_json_output_is_jsons_own_text(value, sort_keys):
    """What every report prints and writes: json.dumps's text of the value with null for each non-finite
    number, byte for byte (escapes, floats' exponents, empty containers), indented or not."""
    from stepscope.analysis.json_out import dumps, finite

    for indent in (None, 1, 2):
        assert dumps(value, indent=indent, sort_keys=sort_keys) == json.dumps(finite(value), indent=indent,
                                                                              sort_keys=sort_keys)


def test_export_without_the_plugin_says_so_in_one_line(tmp_path):
    """An export that cannot be checked is not called a success."""
    shadow = tmp_path / "shadow" / "torch_tb_profiler"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    out = tmp_path / "exported"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), str(DATA / "cuda_graph"),
                        "--export-tensorboard", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(shadow.parent)})
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert "torch_tb_profiler failed to import (ImportError: hidden by the test)" in line
    assert not out.exists()


# runs a script as __main__ and writes, as it exits, its peak resident memory (VmHWM: of this process since
# its exec; ru_maxrss would carry over the forking parent's, pytest's own)
PEAK_RSS = """
import atexit, runpy, sys
peak, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]

def write_peak():
    kb = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
    with open(peak, "w") as f:
        f.write(str(kb * 1024))

atexit.register(write_peak)  # run by the normal exit and by the script's quick_exit (trainer/cli) alike
runpy.run_path(script, run_name="__main__")
"""


def nul_tail(run: Path) -> None:
    """2 GiB, sparse (no disk): the header of a trace, then NUL bytes, as a writer that crashed or preallocated
    the file leaves it."""
    with open(run / "w.1.pt.trace.json", "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(2 * GIB)


def all_nul(run: Path) -> None:
    with open(run / "w.1.pt.trace.json", "wb") as f:
        f.truncate(2 * GIB)


NUL_FILES = {"nul_tail": (nul_tail, 17), "all_nul": (all_nul, 0)}


@pytest.mark.parametrize("case", NUL_FILES)
def test_a_file_of_nul_bytes_fails_at_the_first_one(case, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    build, offset = NUL_FILES[case]
    build(run)
    with pytest.raises(TraceError, match=f"a NUL byte at offset {offset}"):
        analyze(run)


# Each case starts the command; all_nul takes nul_tail's path (the first block read holds a NUL byte; the
# library test above checks both offsets), so it runs in the slow set.
@pytest.mark.parametrize("case", few_by_default(NUL_FILES, keep=["nul_tail"]))
def test_a_file_of_nul_bytes_fails_at_the_first_one_in_bounded_memory(case, tmp_path):
    """Bounded work on any input: the error comes from the first block read, in time and memory that do not
    grow with the file (the whole file was read before, in memory several times its size, and the cost grew
    faster than the size). The bound asserted is the memory (peak RSS of the analysing process); the time is
    only held to the subprocess timeout, far below what reading 2 GiB cost."""
    run = tmp_path / "run"
    run.mkdir()
    build, offset = NUL_FILES[case]
    build(run)
    out, err, peak = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "peak"
    with open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen([sys.executable, "-c", PEAK_RSS, str(peak), str(ROOT / "scripts" / "analyze.py"),
                              str(run)], stdout=o, stderr=e, cwd=ROOT)
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
    assert p.returncode == 2
    (line,) = err.read_text().splitlines()
    assert line.startswith("error: ") and "w.1.pt.trace.json" in line and f"NUL byte at offset {offset}" in line
    assert int(peak.read_text()) < 300 << 20, peak.read_text()
    assert out.read_text() == ""


def test_stepscope_tensorboard_shows_the_good_run_beside_a_nul_file(tmp_path):
    """One bad file never blocks the others: with the 2 GiB NUL-tailed trace beside a good run,
    `stepscope tensorboard` publishes the good run, rejects the bad file in one line, and serves within
    30 s (it served nothing for minutes when the bad file was read whole)."""
    from stepscope.tensorboard.tbserver import free_port, loopback_get

    src = tmp_path / "src"
    shutil.copytree(DATA / "eager_bs32", src / "good")
    (src / "bad").mkdir()
    nul_tail(src / "bad")
    log = tmp_path / "server.log"
    port = free_port()
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "stepscope_here.py"), "tensorboard",
                                   "--logdir", str(src), "--port", str(port), "--poll", "0.2"], stdout=out,
                                  stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp_path)},
                                  start_new_session=True)
    try:
        t0 = time.monotonic()
        runs = None
        while time.monotonic() - t0 < 30:
            assert server.poll() is None, log.read_text()
            try:
                runs = json.loads(loopback_get(f"http://127.0.0.1:{port}/data/plugin/stepscope/runs", 5))
                break
            except OSError:
                time.sleep(0.5)
        assert runs is not None, log.read_text()
        assert [r["name"] for r in runs["runs"]] == ["good"], runs
        text = log.read_text()
        assert "+ run good:" in text and re.search(r"^! .*bad.*NUL byte at offset 17", text, re.M), text
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)

"""Large-trace machinery: the streamed parse gives the in-memory result, ranks in parallel processes too,
step windows and time ranges select what they say, bad windows are one-line errors, and a ~50 MB trace
stays in its memory budget.

    python -m pytest -q tests/test_analysis_scale.py            # builds its traces in a temporary folder

The traces are replicas of a real one (scripts/bench_analysis.py build); timings are in BENCHMARKS.md,
not here.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench import analysis_speed, memory
from few_by_default import few_by_default
from in_process import run_main
from reference.dict_parse import parse_trace
from stepscope.analysis import (
    StepSelection,
    TraceError,
    analyze_parsed,
)
from stepscope.analysis.select import select
from stepscope.analysis.stream_collect import decode
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.analysis.stream_ranges import collect_ranges, first_base
from stepscope.report.front import analyze
from stepscope.trace import workers as parallel
from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace
from stepscope.trace.jsonstream import BLOCK, split_near, split_points
from stepscope.trace.workers import Workers

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# Peak RSS of `analyze.py --json` on the ~50 MB replica, all processes together. The streamed parse keeps
# only the event objects (181 MiB on the 100 MB replica, see BENCHMARKS.md); an in-memory json.load of the
# 50 MB file takes ~330 MiB.
RSS_BUDGET_MIB = 300


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> Path:
    """eager_bs128 (ProfilerStep#3, #4) replicated to 16 MiB: 5 copies, steps #3..#12, uncompressed."""
    out = tmp_path_factory.mktemp("replica") / "run"
    analysis_speed.build(DATA / "eager_bs128", 16 << 20, out, gz=False)
    return out


@pytest.fixture(scope="module")
def replica_parsed(replica):
    """The replica's trace parsed whole in one range (a frozen ParsedTrace), once for the tests that compare
    against it or select from it."""
    (tf,) = discover(replica).traces
    return parse_trace_file(tf.path, tf.worker, tf.span)


def _dict(report) -> str:
    return json.dumps(report.to_dict(), sort_keys=True)


def test_replica_has_the_sources_per_step_metrics(replica):
    want = analyze(DATA / "eager_bs128").spans[0].metrics
    got = analyze(replica).spans[0].metrics
    assert got.steps == 5 * want.steps
    assert got.kernels_per_step == want.kernels_per_step
    assert got.step_ms == pytest.approx(want.step_ms, rel=0.02)


def test_streamed_parse_equals_the_in_memory_one(replica, replica_parsed):
    (tf,) = discover(replica).traces
    in_memory = parse_trace(load_trace(tf.path), tf.worker, tf.span)
    streamed = replica_parsed
    assert streamed == in_memory
    assert _dict(analyze_parsed(streamed)) == _dict(analyze_parsed(in_memory))


@pytest.mark.parametrize("parts", [2, 3])
def test_a_trace_parsed_in_byte_ranges_by_several_processes_is_the_same(replica, replica_parsed, parts):
    (tf,) = discover(replica).traces
    near = split_near(tf.path, parts, decode)
    assert near is not None and len(near.ranges) == parts  # the file really is cut
    c, _ = collect_ranges(tf.path, near, first_base(tf.path), BLOCK)  # by the ranges: raises if they fail
    assert len(c.ops) == len(replica_parsed.ops)
    assert parse_trace_file(tf.path, tf.worker, tf.span, parts=parts) == replica_parsed


def test_a_gzipped_trace_is_parsed_in_byte_ranges_too(replica, replica_parsed, tmp_path):
    (tf,) = discover(replica).traces
    gz = tmp_path / (tf.path.name + ".gz")
    gz.write_bytes(gzip.compress(tf.path.read_bytes(), compresslevel=1))
    ranges = split_points(gz, 2, decode)
    assert ranges is not None and ranges == split_points(tf.path, 2, decode)  # decompressed offsets
    near = split_near(gz, 2, decode)
    assert near is not None and near == split_near(tf.path, 2, decode)  # the trailer's size: the same cut
    c, _ = collect_ranges(gz, near, first_base(gz), BLOCK)
    assert len(c.device) == len(replica_parsed.device)
    assert parse_trace_file(gz, tf.worker, tf.span, parts=2) == replica_parsed


def test_the_analysis_cuts_only_large_traces(replica, tmp_path):
    (tf,) = discover(replica).traces
    plan = parallel.plan_processes([tf.path], budget_bytes=1 << 30, cpus=2)
    assert plan == parallel.Plan(per_file=1, parts=2)
    assert parallel.parts_for(tf.path, plan) == 1  # 16 MiB: under SPLIT_FROM, one range
    for name, parts in (("w.1.pt.trace.json", 2), ("w.2.pt.trace.json.gz", 2)):
        big = tmp_path / name
        with open(big, "wb") as f:
            f.truncate(parallel.SPLIT_FROM)  # a sparse file: only its size (and gzip trailer) is read
        assert parallel.parts_for(big, plan) == parts
    small = tmp_path / "w.3.pt.trace.json.gz"
    small.write_bytes(gzip.compress(b" " * (1 << 20)))  # its trailer: 1 MiB of JSON
    assert parallel.parts_for(small, plan) == 1


def test_step_window_analyses_exactly_those_steps(replica_parsed):
    parsed = replica_parsed
    part = select(parsed, StepSelection(steps=(5, 7)))
    assert [s.number for s in part.steps] == [5, 6]
    assert len(part.ops) < len(parsed.ops) / 2
    whole = analyze_parsed(parsed)
    one_copy = analyze_parsed(part)  # steps 5, 6 are the source's steps 3, 4 in the second copy
    assert one_copy.metrics.kernels_per_step == whole.metrics.kernels_per_step
    assert one_copy.metrics.step_ms == pytest.approx(whole.metrics.step_ms, rel=0.05)
    assert one_copy.verdict == whole.verdict


def test_time_range_selects_steps_by_start(replica_parsed):
    parsed = replica_parsed
    t = [s.start / 1e3 for s in parsed.steps]
    part = select(parsed, StepSelection(time_ms=(t[2], t[4])))
    assert [s.number for s in part.steps] == [parsed.steps[2].number, parsed.steps[3].number]
    with pytest.raises(TraceError, match="no ProfilerStep#N in time"):
        select(parsed, StepSelection(time_ms=(t[-1] + 1e6, None)))


def analyze_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def analyze_main(capsys, *args) -> tuple[int, str, str]:
    """The command's main() in this process: exit code, stdout, stderr."""
    from stepscope.cli.analyze import main
    return run_main(main, args, capsys, prog="analyze.py")


BAD_WINDOWS = {
    "steps_empty": (["--steps", "8:3"], "empty window"),
    "steps_not_a_window": (["--steps", "x"], "is not START:END"),
    "steps_absent": (["--steps", "50:60"], "no ProfilerStep#N in steps 50:60"),
    "time_negative": (["--time-range=-5:2"], "cannot be negative"),
    "memory_not_a_size": (["--max-memory", "lots"], "is not a memory size"),
}


@pytest.mark.parametrize("case", BAD_WINDOWS)
def test_bad_windows_are_one_line_errors(replica, case, capsys):
    args, fragment = BAD_WINDOWS[case]
    code, out, err = analyze_main(capsys, replica, "--json", *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and fragment in err


# The command in a process of its own: an option refused by the parser and a window refused by the analysis;
# the others' lines are checked through the same main() above (slow here).
@pytest.mark.parametrize("case", few_by_default(BAD_WINDOWS, keep=["steps_not_a_window", "steps_absent"]))
def test_bad_windows_are_one_line_errors_of_the_command(replica, case):
    args, fragment = BAD_WINDOWS[case]
    p = analyze_cli(replica, "--json", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and fragment in p.stderr


def test_steps_option_in_the_report(replica, capsys):
    code, out, err = analyze_main(capsys, replica, "--json", "--steps", "5:7")
    assert code == 0, err
    assert json.loads(out)["spans"][0]["metrics"]["steps"] == 2


def test_ranks_in_parallel_equal_ranks_in_sequence(monkeypatch):
    one = analyze(DATA / "nccl_ddp", workers=Workers.inline())
    monkeypatch.setattr(parallel, "SPLIT_FROM", 0)  # these small traces would otherwise stay in-process
    assert parallel.plan_processes([tf.path for tf in discover(DATA / "nccl_ddp").traces], 1 << 30, 2).per_file == 2
    two = analyze(DATA / "nccl_ddp", workers=Workers.local(cpus=2))
    assert _dict(one) == _dict(two)


def test_peak_rss_of_a_50mb_trace(tmp_path):
    run = tmp_path / "run"
    analysis_speed.build(DATA / "eager_bs128", 50 << 20, run, gz=False)
    wall, cpu, largest_mib, tree_mib, held_mib = memory.measure_command(
        [sys.executable, str(ROOT / "scripts" / "analyze.py"), str(run), "--json"])
    assert largest_mib <= held_mib <= tree_mib  # the tree held at least its largest process, at most the sum
    assert largest_mib < RSS_BUDGET_MIB and tree_mib < RSS_BUDGET_MIB, (largest_mib, tree_mib, wall, cpu)


def test_command_loader_parses_ranks_in_parallel(monkeypatch):
    one = analyze(DATA / "nccl_ddp")
    monkeypatch.setattr(parallel, "SPLIT_FROM", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    both = analyze(DATA / "nccl_ddp", workers=Workers.local(max_memory=1 << 30))
    assert len(both.traces) == len(discover(DATA / "nccl_ddp").traces) == 2
    assert _dict(both) == _dict(one)


def test_a_large_copy_is_checked_through_an_excerpt_of_its_first_steps(replica, tmp_path, monkeypatch):
    """The plugin needs ~7 bytes per byte of trace to load one, so a copy over WHOLE_UP_TO is checked through
    its first EXCERPT_STEPS steps, byte for byte: a defect there is found, one later on is not (the price)."""
    from stepscope.plugin_copy import plugin_check
    from stepscope.plugin_copy.excerpt import excerpt
    from stepscope.plugin_copy.export import export_file

    (tf,) = discover(replica).traces
    adapted, _ = export_file(tmp_path / "out", tf.worker, tf.span, tf.path)
    doc = load_trace(adapted)
    steps = sorted(e["ts"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    part = excerpt(adapted, tmp_path / "x.pt.trace.json", 3)
    small = load_trace(part)
    kept = small["traceEvents"]
    assert {k: v for k, v in small.items() if k != "traceEvents"} == {k: v for k, v in doc.items()
                                                                        if k != "traceEvents"}
    assert len([e for e in kept if e.get("name", "").startswith("ProfilerStep#")]) == 3
    assert kept == [e for e in doc["traceEvents"] if not isinstance(e.get("ts"), (int, float)) or e["ts"] < steps[3]]
    assert excerpt(adapted, tmp_path / "y.pt.trace.json", len(steps)) is None  # no shorter than the file

    def broken(at_ts: float, name: str):
        bad = dict(doc, traceEvents=[*doc["traceEvents"], {"ph": "X", "cat": "kernel", "name": "k", "pid": 0,
                                                           "tid": 7, "ts": at_ts, "dur": "oops", "args": {}}])
        path = tmp_path / name
        path.write_text(json.dumps(bad))
        return path

    monkeypatch.setattr(plugin_check, "WHOLE_UP_TO", 0)
    assert plugin_check.plugin_problem(adapted) is None
    assert "TypeError" in plugin_check.plugin_problem(broken(steps[0] + 1, "early.pt.trace.json"))
    assert plugin_check.plugin_problem(broken(steps[-1] + 1, "late.pt.trace.json")) is None


def test_the_targets_measure_alternates_the_two_checkouts(replica, tmp_path, capsys, monkeypatch):
    """``bench_analysis.py targets``, this checkout against itself: each command's runs alternate the baseline
    and this checkout, a round at a time, and each export is written and removed (a run never starts beside
    the last one's files); its rows are the medians of what it printed run by run. The checkout is compiled
    to bytecode first, even where the environment says not to write it (no timed run compiles a module)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cached = Path(importlib.util.cache_from_source(str(ROOT / "trainer" / "cli" / "analyze.py")))
    cached.unlink(missing_ok=True)
    (tf,) = discover(replica).traces
    gz_run = tmp_path / "gz"
    gz_run.mkdir()
    with open(tf.path, "rb") as f, gzip.open(gz_run / (tf.path.name + ".gz"), "wb", compresslevel=1) as out:
        out.write(f.read())
    before = set(Path(analysis_speed.tempfile.gettempdir()).glob("bench-export-*"))
    rows = analysis_speed.targets(ROOT, replica, gz_run, repeat=2)
    printed = capsys.readouterr().out
    runs = [line.split(" | ") for line in printed.splitlines() if line.startswith("| --json") and "round" not in line
            and len(line.split(" | ")) == 7]
    assert [(r[0].lstrip("| "), r[1], r[2]) for r in runs] == [
        (label, str(i), k) for label in analysis_speed.TARGETS for i in (1, 2) for k in ("base", "this")]
    assert [r[0] for r in rows] == list(analysis_speed.TARGETS)
    for label, this, base, ratio in rows:
        walls = {k: sorted(float(r[3]) for r in runs if r[0].lstrip("| ") == label and r[2] == k)
                 for k in ("base", "this")}
        # the median of two runs, each printed to 0.01 s
        assert (this, base) == pytest.approx((sum(walls["this"]) / 2, sum(walls["base"]) / 2), abs=0.011)
        assert 0 < ratio < 10
    assert set(Path(analysis_speed.tempfile.gettempdir()).glob("bench-export-*")) == before  # nothing left behind
    assert cached.is_file()


def test_a_timed_command_may_say_more_than_a_pipe_holds():
    """Both timers (the targets' and the sampling one) wait for the command before they read what it said:
    said into a pipe, 300 KB would block the command (a pipe holds 64 KiB) and the wait would never end (so
    the timers run in a process of their own here, with a time limit). A failure keeps its last words."""
    chatty = [sys.executable, "-c", "import sys; sys.stderr.write('x' * 300_000)"]
    timer = ("import json, sys; from bench.memory import measure_command, timed; cmd = json.loads(sys.argv[1]); "
             "print(json.dumps([timed(cmd), measure_command(cmd)]))")
    done = subprocess.run([sys.executable, "-c", timer, json.dumps(chatty)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT / "scripts", check=True)
    (wall, cpu, rss), sampled = json.loads(done.stdout)
    assert wall > 0 and cpu > 0 and rss > 1
    assert sampled[0] > 0 and sampled[1] > 0
    for measure in (memory.timed, memory.measure_command):
        with pytest.raises(SystemExit, match="exited 3: .*boom$"):
            measure([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])

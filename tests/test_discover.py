"""Traces from any tool, found by name or by a cheap sniff; `analyze` on them; the watcher's completeness rule.

    pytest tests/test_discover.py -q       # about 20 s on 2 idle cores; no TensorBoard, no torch

Inputs are the committed real traces, renamed and re-encoded as each tool writes them.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from stepscope.tensorboard.watch import WatchConfig, Watcher
from stepscope.trace.discover import discover

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
(LIGHTNING_TRACE,) = (DATA / "lightning_cpu").glob("*.pt.trace.json")


def trace_bytes(scenario: str) -> bytes:
    """A committed trace as plain JSON bytes."""
    return gzip.decompress(next((DATA / scenario).glob("*.pt.trace.json.gz")).read_bytes())


def analyze(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "analyze.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_each_tool_is_recognised(tmp_path):
    (tmp_path / "tb").mkdir()
    shutil.copy(next((DATA / "eager_bs128").glob("*.gz")), tmp_path / "tb")
    (tmp_path / "lightning").mkdir()
    shutil.copy(LIGHTNING_TRACE, tmp_path / "lightning")
    (tmp_path / "lightning" / "fit-profile.txt").write_text("the summary Lightning writes beside its trace")
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "profile_0.json").write_bytes(trace_bytes("cpu_resnet"))
    (tmp_path / "chrome").mkdir()
    (tmp_path / "chrome" / "trace.json.gz").write_bytes(gzip.compress(trace_bytes("cpu_resnet")))
    shutil.copytree(DATA / "ddp_gloo", tmp_path / "ddp")
    (tmp_path / "notes.json").write_text('{"lr": 0.1}')
    found = discover(tmp_path)
    assert [(t.run, t.kind) for t in found.traces] == [
        ("accelerate", "accelerate"), ("chrome", "export_chrome_trace"),
        ("ddp", "tensorboard_trace_handler"), ("ddp", "tensorboard_trace_handler"),
        ("lightning", "Lightning"), ("tb", "tensorboard_trace_handler")]
    lightning = next(t for t in found.traces if t.kind == "Lightning")
    assert lightning.worker == "fit-profile-[Strategy]SingleDeviceStrategy.training_step" and lightning.span.isdigit()
    assert [(s.path.name, s.reason) for s in found.skipped] == [("notes.json", "not a profiler trace")]
    assert found.summary() == ("found 6 traces (3 tensorboard_trace_handler, 1 Lightning, 1 accelerate, "
                               "1 export_chrome_trace); skipped 1 file: notes.json (not a profiler trace)")


def test_a_stepscope_run_counts_its_originals_once(tmp_path):
    run = tmp_path / "run"
    p = analyze(DATA / "slow_dataset", "--export-tensorboard", run)
    assert p.returncode == 0, p.stderr
    found = discover(tmp_path)
    assert [(t.kind, t.path.parent.parent.name) for t in found.traces] == [("stepscope", "raw")]
    assert not found.skipped


def test_sniffing_reads_only_the_head_of_a_json_file(tmp_path):
    # Valid-looking for 64 KiB, then garbage: parsing it whole would fail; the sniff skips it without trying.
    big = tmp_path / "metrics.json"
    big.write_bytes(b'{"values": [' + b"1, " * 40000 + b"this is not JSON")
    (tmp_path / "no_steps.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}]}))
    (tmp_path / "trace.json").write_bytes(trace_bytes("cpu_resnet"))
    p = analyze(tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["found 1 trace (1 export_chrome_trace); skipped 2 files: metrics.json (not a "
                                     "profiler trace), no_steps.json (no ProfilerStep#, Optimizer.step# or torch "
                                     "operator events; profile with schedule=torch.profiler.schedule(...) and "
                                     "call prof.step() once per training step)"]
    assert p.stdout.startswith("stepscope diagnosis: cpu_bound")


def test_analyze_takes_one_file_and_says_what_it_found():
    p = analyze(LIGHTNING_TRACE, "--json")
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["found 1 trace (1 Lightning)"]
    (span,) = json.loads(p.stdout)["spans"]
    assert span["worker"] == "fit-profile-[Strategy]SingleDeviceStrategy.training_step"
    assert span["metrics"]["steps"] == 3


def test_spanless_ranks_of_one_folder_share_a_span(tmp_path):
    for rank, f in enumerate(sorted((DATA / "ddp_gloo").glob("*.gz"))):
        (tmp_path / f"profile_{rank}.json").write_bytes(gzip.decompress(f.read_bytes()))
        os.utime(tmp_path / f"profile_{rank}.json", ns=(10**18 + rank, 10**18 + rank))
    p = analyze(tmp_path, "--json")
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["found 2 traces (2 accelerate)"]
    d = json.loads(p.stdout)
    assert {s["span"] for s in d["spans"]} == {str(10**18)}
    assert d["distributed"][0]["world_size"] == 2


def test_no_traces_says_what_was_skipped(tmp_path):
    (tmp_path / "notes.json").write_text("{}")
    p = analyze(tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert line.startswith("error: ") and "no traces" in line and "notes.json (not a profiler trace)" in line


def test_watcher_publishes_only_complete_traces_and_later_ones_as_a_new_run(tmp_path):
    src, shadow = tmp_path / "src", tmp_path / "shadow"
    (src / "exp").mkdir(parents=True)
    watcher = Watcher(WatchConfig(src, shadow / "logdir", shadow / ".staging"))
    data = gzip.compress(trace_bytes("cpu_resnet"))
    trace = src / "exp" / "w.1795000000000000000.pt.trace.json.gz"
    events = src / "exp" / "events.out.tfevents.1.host.1.0"  # the loop's own Scalars, growing
    events.write_bytes(b"first records")
    trace.write_bytes(data[: len(data) // 2])  # still being written
    assert watcher.poll() == []  # first sight
    mirrored = shadow / "logdir" / "exp" / events.name
    assert mirrored.read_bytes() == b"first records"
    with open(events, "ab") as f:
        f.write(b", then more")
    (rejected,) = watcher.poll()  # the same size and mtime twice, but not a whole gzip file
    assert rejected.startswith("! ") and "unreadable trace" in rejected
    assert watcher.poll() == [] and not list((shadow / "logdir" / "exp").glob("*.pt.trace.json*"))
    assert mirrored.read_bytes() == b"first records, then more"
    trace.write_bytes(data)  # finished: it changed, so it is looked at again
    assert watcher.poll() == []
    assert watcher.poll() == ["+ run exp: 1 trace (tensorboard_trace_handler): cpu_bound"]
    run = shadow / "logdir" / "exp"
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith("events.out")) == [
        "diagnosis.md", "raw", "report.json", "w.1795000000000000000.pt.trace.json.gz"]
    assert len(list(run.glob("events.out.tfevents.*"))) == 2  # the mirrored one and the diagnosis
    assert watcher.poll() == []  # published once
    second = src / "exp" / "w.1795000000000000001.pt.trace.json.gz"
    second.write_bytes(data)
    watcher.poll()
    assert watcher.poll() == ["+ run exp@2: 1 trace (tensorboard_trace_handler): cpu_bound"]
    assert [p.name for p in (shadow / "logdir" / "exp@2").glob("*.pt.trace.json.gz")] == [second.name]
    assert not any((shadow / ".staging").iterdir())


def test_an_unreadable_entry_is_skipped_with_its_reason_and_the_rest_analysed(tmp_path):
    """A looping symbolic link, a dangling one and a FIFO with a trace's name (tests run as root, which reads
    any file whatever its permissions, so a FIFO stands in for a file nobody can read: opening it would
    block) are each skipped with a note on the one summary line; the good trace beside them is analysed.
    The stepscope run's raw/ originals get the same rule."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(next((DATA / "eager_bs32").glob("*.gz")), run)
    (run / "loop.1.pt.trace.json").symlink_to("loop.1.pt.trace.json")
    (run / "a.json").symlink_to("b.json")
    (run / "b.json").symlink_to("a.json")
    (run / "gone.2.pt.trace.json").symlink_to("nowhere.json")
    os.mkfifo(run / "fifo.3.pt.trace.json")
    p = analyze(run)
    assert p.returncode == 0, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("found ")]
    assert line == ("found 1 trace (1 tensorboard_trace_handler); skipped 5 files: "
                    "a.json (unreadable: Too many levels of symbolic links), "
                    "b.json (unreadable: Too many levels of symbolic links), "
                    "fifo.3.pt.trace.json (not a regular file), "
                    "gone.2.pt.trace.json (unreadable: No such file or directory), "
                    "loop.1.pt.trace.json (unreadable: Too many levels of symbolic links)")
    assert p.stdout.startswith("stepscope diagnosis: ")

    stepscope_run = tmp_path / "exported"
    assert analyze(DATA / "slow_dataset", "--export-tensorboard", stepscope_run).returncode == 0
    (span,) = (stepscope_run / "raw").iterdir()
    (span / "ghost.trace.json").symlink_to("ghost.trace.json")
    found = discover(stepscope_run)
    assert [t.path.name for t in found.traces] != [] and "ghost.trace.json" not in [t.path.name for t in found.traces]
    assert [(s.path.name, s.reason) for s in found.skipped] == [
        ("ghost.trace.json", "unreadable: Too many levels of symbolic links")]

"""scripts/analyze.py as a user runs it: console text, --json, --export-tensorboard, and exit code 2 with one
line on stderr (and nothing written) on bad input.

    pytest tests/test_analyze_cli.py -q
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def assert_usage_error(p: subprocess.CompletedProcess, *fragments: str) -> None:
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for frag in fragments:
        assert frag in lines[0]


def test_console_output():
    p = run(DATA / "eager_bs32")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "stepscope diagnosis: launch_bound"
    assert re.search(r"launch_bound: step \d+\.\d\d ms without the profiler \(13\.21 as profiled\), GPU busy \d+%",
                     lines[1]), lines[1]
    assert any("the profiler's own host cost is about" in line for line in lines)
    assert any(line.strip().startswith("- 360 kernels per step") for line in lines)


def test_json_output():
    p = run(DATA / "item_per_layer", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    # 3.65 of 6.83 ms on the GPU unprofiled (53%): the GPU is the busier side, near the line
    assert "gpu_bound" in d["spans"][0]["uncertainty"]["verdicts"]
    (s,) = d["spans"]
    assert s["metrics"]["syncs_per_step"] == 20
    (sync,) = [f for f in s["findings"] if f["id"] == "host_sync"]
    assert sync["text"].startswith("20 host syncs per step")


def test_json_multi_rank():
    d = json.loads(run(DATA / "ddp_gloo", "--json").stdout)
    assert d["distributed"][0]["stragglers"] == [1]


def test_missing_dir():
    assert_usage_error(run(DATA / "no_such_run"), "no_such_run", "not a directory")


def test_dir_without_traces(tmp_path):
    assert_usage_error(run(tmp_path), "no traces", ".pt.trace.json")


def test_unreadable_trace(tmp_path):
    (tmp_path / "w.1.pt.trace.json.gz").write_bytes(b"\x1f\x8b garbage")
    assert_usage_error(run(tmp_path, "--json"), "w.1.pt.trace.json.gz", "unreadable trace")


def test_trace_without_steps(tmp_path):
    (tmp_path / "w.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert_usage_error(run(tmp_path), "no ProfilerStep#N events", "prof.step()")


def test_export_refuses_non_empty_or_file_out_dir(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_usage_error(run(DATA / "cuda_graph", "--export-tensorboard", out), str(out), "not empty")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert_usage_error(run(DATA / "cuda_graph", "--export-tensorboard", afile), "not a directory")
    assert afile.read_text() == "x"


def test_export_writes_nothing_when_the_input_is_bad(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "w.1.pt.trace.json.gz").write_bytes(b"not gzip")
    assert_usage_error(run(tmp_path / "run", "--export-tensorboard", tmp_path / "out"), "unreadable trace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_export_tensorboard(tmp_path):
    src = tmp_path / "plain"  # what plain tensorboard_trace_handler writes
    shutil.copytree(DATA / "slow_dataset", src)
    out = tmp_path / "logs" / "fixed"
    p = run(src, "--export-tensorboard", out)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("stepscope diagnosis: data_bound")
    listed = [Path(line.strip()) for line in p.stdout.splitlines() if line.startswith("  /")]
    assert listed and all(path.is_file() and path.parent == out for path in listed)
    assert f"exported {len(listed)} trace(s) to {out}" in p.stdout
    assert not [q for q in out.parent.iterdir() if q.name != "fixed"], "staging folder left behind"
    # The exported run (adapted copy plus raw/ original) diagnoses the same.
    again = json.loads(run(out, "--json").stdout)
    assert again["verdict"] == "data_bound"
    only_adapted = tmp_path / "only_adapted"
    only_adapted.mkdir()
    shutil.copy(listed[0], only_adapted / listed[0].name)
    assert json.loads(run(only_adapted, "--json").stdout)["verdict"] == "data_bound"


def test_export_with_json_keeps_stdout_one_document(tmp_path):
    out = tmp_path / "out"
    out.mkdir()  # an existing empty directory is fine
    p = run(DATA / "cuda_graph", "--json", "--export-tensorboard", out)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verdict"] == "gpu_bound"
    assert "exported 1 trace(s)" in p.stderr
    assert len(list(out.glob("*.pt.trace.json.gz"))) == 1


def test_bad_flags_get_one_line_and_exit_2():
    for args, fragment in (((), "the following arguments are required: RUN_DIR"),
                           ((DATA / "eager_bs128", "--bogus"), "unrecognized arguments: --bogus")):
        p = run(*args)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.splitlines() == [f"analyze.py: error: {fragment}"]

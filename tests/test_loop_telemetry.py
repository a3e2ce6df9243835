"""A trace handler's folder analysed later gets the figures the handler diagnosed each cycle with.

    pytest tests/test_loop_telemetry.py -q      # about 10 s on 2 busy cores

A real (CPU) loop under stepscope.schedule and stepscope.trace_handler writes its cycles; `stepscope.analyze` of
the folder or of one of its trace files, `stepscope analyze` (text and --json), the tab's measure and the
TensorBoard shadow then read each trace with its own cycle's telemetry from cycles.jsonl (telemetry.py), matched
by worker and span: the same verdict, step and GPU busy as the handler's own summary. Without cycles.jsonl, or
with a row that holds no usable telemetry, the trace is read as anyone's (the overhead model).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import stepscope
import torch
from stepscope.capture.cycle_summary import merged_report
from stepscope.cli.main import main
from stepscope.report.loaded import assign_spans
from stepscope.report.measure import measure_path
from stepscope.report.telemetry import cycle_telemetry
from stepscope.tensorboard.shadow import publish_run
from stepscope.tensorboard.tab.runs import find_runs
from stepscope.trace import files as trace_files
from stepscope.trace.discover import discover
from torch import nn

CYCLES = 2


def loop(run: Path, worker: str | None = None):
    """A tiny model's loop: 2 cycles of 2 recorded steps, timed unprofiled steps around each."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    sched = stepscope.schedule(wait=12, warmup=1, active=2, repeat=CYCLES, skip_first=2)
    handler = stepscope.trace_handler(run, worker_name=worker)
    with torch.profiler.profile(schedule=sched, on_trace_ready=handler) as prof:
        for x, y in stepscope.loader((x, y) for _ in range(50)):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    assert handler.close(timeout=120)
    return handler


@pytest.fixture(scope="module")
def handled(tmp_path_factory):
    """(the run folder, the handler's own summaries by span)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's ops on a busy 2-core machine
    try:
        run = tmp_path_factory.mktemp("loop") / "run"
        handler = loop(run)
    finally:
        torch.set_num_threads(n)
    summaries = {s.span: s for s in handler.summaries}
    assert len(summaries) == CYCLES and all(s.report is not None for s in summaries.values())
    assert all(s.report.basis == "telemetry" for s in summaries.values())
    return run, summaries


def copy_of(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    return out


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / trace_files.CYCLES).read_text().splitlines()]


def test_analyze_gives_each_cycle_the_handlers_own_figures(handled):
    run, summaries = handled
    report = stepscope.analyze(run)
    assert len(report.spans) == CYCLES
    for span in report.spans:
        own = summaries[span.span].report
        assert span.basis == "telemetry"
        assert span.verdict == own.verdict
        assert span.metrics.step_ms == own.metrics.step_ms
        assert span.metrics.gpu_busy_pct == own.metrics.gpu_busy_pct
        assert span == own  # the whole report: breakdown, findings, evidence
    assert report.verdict == merged_report("", list(summaries.values())).verdict
    # the rows say which worker each cycle is of, and the figures they hold are the same (rounded)
    for row in rows(run):
        span = next(s for s in report.spans if s.span == row["span"])
        assert row["worker"] == span.worker
        assert row["step_ms"] == pytest.approx(span.metrics.step_ms, abs=1e-3)


def test_one_trace_file_of_the_folder_gets_its_cycle_too(handled):
    run, summaries = handled
    for trace in [*trace_files.find_raw_traces(run), *trace_files.find_plugin_traces(run)]:
        (span,) = stepscope.analyze(trace.path).spans
        assert span.basis == "telemetry" and span.metrics.step_ms == summaries[trace.span].report.metrics.step_ms


def test_without_cycles_jsonl_the_traces_are_read_as_anyones(handled, tmp_path):
    run, summaries = handled
    bare = copy_of(run, tmp_path)
    (bare / trace_files.CYCLES).unlink()
    for span in stepscope.analyze(bare).spans:
        assert span.basis == "overhead_model"
        assert span.metrics.step_ms != summaries[span.span].report.metrics.step_ms


def test_rows_without_a_worker_still_match_by_span(handled, tmp_path):
    run, summaries = handled
    old = copy_of(run, tmp_path)
    (old / trace_files.CYCLES).write_text("".join(
        json.dumps({k: v for k, v in row.items() if k != "worker"}) + "\n" for row in rows(run)))
    for span in stepscope.analyze(old).spans:
        assert span.basis == "telemetry"
        assert span.metrics.step_ms == summaries[span.span].report.metrics.step_ms


def test_a_caller_s_telemetry_still_wins(handled):
    run, _ = handled
    report = stepscope.analyze(run, telemetry={"steps": 5, "step_ms": 0.123})  # under any profiled step
    assert {s.metrics.step_ms for s in report.spans} == {0.123}
    # an empty one (the trainer's "no telemetry") means none: the model, not the rows
    assert {s.basis for s in stepscope.analyze(run, telemetry={}).spans} == {"overhead_model"}


def test_the_cli_text_and_json_use_the_cycles(handled, capsys):
    run, summaries = handled
    assert main(["analyze", str(run), "--json"]) == 0
    out, err = capsys.readouterr()
    assert f"unprofiled figures from {run / trace_files.CYCLES}: each profiling cycle's own timed steps, " \
           f"for {CYCLES} of {CYCLES} trace(s)" in err
    spans = json.loads(out)["spans"]
    assert len(spans) == CYCLES
    for span in spans:
        own = summaries[span["span"]].report
        assert span["basis"] == "telemetry" and span["verdict"] == own.verdict
        assert span["metrics"]["step_ms"] == pytest.approx(own.metrics.step_ms, abs=1e-3)
    assert main(["analyze", str(run)]) == 0
    out, _ = capsys.readouterr()
    for s in summaries.values():
        assert f"step {s.report.metrics.step_ms:.2f} ms" in out


def test_a_corrupt_cycles_jsonl_costs_only_the_spans_it_spoils(handled, tmp_path):
    run, summaries = handled
    broken = copy_of(run, tmp_path)
    good, bad = rows(run)
    bad["telemetry"] = {"steps": 3, "step_ms": float("nan")}
    lines = ["{not json", json.dumps([1, 2]), json.dumps({"span": bad["span"], "telemetry": "fast"}),
             json.dumps(bad), json.dumps(good), json.dumps(good)[:40]]
    (broken / trace_files.CYCLES).write_text("\n".join(lines) + "\n")
    by_span = {s.span: s for s in stepscope.analyze(broken).spans}
    assert by_span[good["span"]].basis == "telemetry"
    assert by_span[good["span"]].metrics.step_ms == summaries[good["span"]].report.metrics.step_ms
    assert by_span[bad["span"]].basis == "overhead_model"
    # a cycles.jsonl that cannot be read at all: every trace is read as anyone's, no error
    (broken / trace_files.CYCLES).unlink()
    (broken / trace_files.CYCLES).mkdir()
    assert {s.basis for s in stepscope.analyze(broken).spans} == {"overhead_model"}


def test_two_workers_sharing_a_span_each_get_their_own_row(handled, tmp_path):
    run, summaries = handled
    job = copy_of(run, tmp_path)
    first = rows(run)[0]
    (raw,) = (job / trace_files.RAW_DIR / first["span"]).iterdir()
    shutil.copyfile(raw, raw.with_name(raw.name.replace(first["worker"], "rank1", 1)))
    other = {**first, "worker": "rank1", "telemetry": {"steps": 9, "step_ms": 0.5 * first["telemetry"]["step_ms"]}}
    with open(job / trace_files.CYCLES, "a") as f:
        f.write(json.dumps(other) + "\n")
    spans = [s for s in stepscope.analyze(job).spans if s.span == first["span"]]
    by_worker = {s.worker: s.metrics.step_ms for s in spans}
    assert by_worker == {first["worker"]: summaries[first["span"]].report.metrics.step_ms,
                         "rank1": pytest.approx(0.5 * first["telemetry"]["step_ms"])}


def test_two_handlers_sharing_a_folder_each_get_their_own_cycles(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        own = {}
        for worker in ("rank0", "rank1"):  # as two ranks of a job, each with its own handler, one folder
            own.update({(worker, s.span): s.report for s in loop(tmp_path / "job", worker).summaries})
    finally:
        torch.set_num_threads(n)
    assert {r["worker"] for r in rows(tmp_path / "job")} == {"rank0", "rank1"}
    spans = stepscope.analyze(tmp_path / "job").spans
    assert sorted((s.worker, s.span) for s in spans) == sorted(own)
    for span in spans:
        assert span.basis == "telemetry" and span == own[(span.worker, span.span)]


def test_cycle_telemetry_reads_only_usable_rows(tmp_path):
    (tmp_path / trace_files.CYCLES).write_text("\n".join(json.dumps(r) for r in [
        {"span": "1", "worker": "a", "telemetry": {"steps": 4, "step_ms": 2.0, "data_ms": 0.5}},
        {"span": "2", "telemetry": {"steps": 4, "step_ms": 3.0, "data_ms": -1, "note": "x"}},
        {"span": "3", "telemetry": {"step_ms": 0}},
        {"span": "4", "telemetry": {"step_ms": True}},
        {"span": "5", "telemetry": None},
        {"span": "6", "telemetry": {"step_ms": 1.0}}, {"span": "6", "telemetry": {"step_ms": 2.0}},
        {"span": "", "telemetry": {"step_ms": 1.0}},
    ]) + "\n")
    assert cycle_telemetry(tmp_path) == {("a", "1"): {"steps": 4.0, "step_ms": 2.0, "data_ms": 0.5},
                                         "2": {"steps": 4.0, "step_ms": 3.0}}
    assert cycle_telemetry(tmp_path / "missing") == {}


def test_the_tab_and_the_shadow_run_read_the_cycles_too(handled, tmp_path):
    run, summaries = handled
    measured = measure_path(run)  # what the tab's cache holds for a run, until cycles.jsonl changes
    assert trace_files.CYCLES in [part[0] for part in find_runs(run.parent)["run"].fingerprint()]
    for span in measured.report["spans"]:
        assert span["basis"] == "telemetry"
        assert span["metrics"]["step_ms"] == pytest.approx(summaries[span["span"]].report.metrics.step_ms, abs=1e-3)
    found = discover(run).traces
    spans = assign_spans(list(found))
    target, verdict = publish_run([(f, spans[f.path]) for f in found], stepscope.analyze(run, tables=True),
                                  tmp_path / "logdir", tmp_path / "staging", "run", source=run)
    assert (target / trace_files.CYCLES).read_text() == (run / trace_files.CYCLES).read_text()
    assert verdict == stepscope.analyze(run).verdict
    assert {s["basis"] for s in measure_path(target).report["spans"]} == {"telemetry"}

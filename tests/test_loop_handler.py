"""stepscope.trace_handler with stepscope.schedule in a real (CPU) torch.profiler loop, and stepscope.profile.

    pytest tests/test_loop_handler.py -q      # about a minute on 2 busy cores

What is asserted: each cycle is diagnosed once, in the background, from the unprofiled steps' telemetry; the
loop's time in prof.step() at the end of a cycle stays flat over 100 cycles and is about what exporting the
raw trace costs; a loader stall outside any fixed window is captured and diagnosed data_bound; the exit waits
for the diagnosis with a bound and says so when it stops early.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import stepscope
import torch
from stepscope.capture import cycle_worker
from stepscope.capture.handler import StepscopeTraceHandler
from stepscope.capture.triggers import SlowdownRule
from stepscope.trace import files as trace_files
from torch import nn


@pytest.fixture(autouse=True)
def one_thread():
    # a tiny model's ops on a busy 2-core machine: intra-op threads cost 100x what the ops do
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model, opt, x, y) -> None:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def batches(n: int, stall=range(0), stall_s: float = 0.0):
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    for i in range(n):
        if i in stall:
            time.sleep(stall_s)
        yield x, y


def cycle_end_times(sched, on_trace_ready, steps: int) -> list[float]:
    """The loop's time in each prof.step() that ended a cycle (the one that calls on_trace_ready)."""
    model, opt = tiny()
    out = []
    with torch.profiler.profile(schedule=sched, on_trace_ready=on_trace_ready) as prof:
        for x, y in stepscope.loader(batches(steps), schedule=sched if hasattr(sched, "cycles") else None):
            train_step(model, opt, x, y)
            saving = prof.current_action == torch.profiler.ProfilerAction.RECORD_AND_SAVE
            t0 = time.perf_counter()
            prof.step()
            if saving:
                out.append(time.perf_counter() - t0)
    return out


def test_the_loop_waits_only_for_the_raw_trace_over_100_cycles(tmp_path, monkeypatch):
    analysed_paths = []
    analyze_cycle = cycle_worker.analyze_cycle
    monkeypatch.setattr(cycle_worker, "analyze_cycle", lambda path, *a: analysed_paths.append(path) or
                        analyze_cycle(path, *a))
    bare_dir = tmp_path / "bare"
    bare_dir.mkdir()
    # what any handler must do inside prof.step(): export the trace
    bare = cycle_end_times(torch.profiler.schedule(wait=2, warmup=1, active=1),
                           lambda p: p.export_chrome_trace(str(bare_dir / "t.json")), 80)
    # a cycle every 4 steps of a 1 ms step is far more than the thread can analyse: it keeps up by leaving
    # the cycles over max_pending with their raw trace and a row that says so
    handler = StepscopeTraceHandler(tmp_path / "run", max_pending=4)
    ours = cycle_end_times(stepscope.schedule(wait=2, warmup=1, active=1), handler, 400)
    assert handler.close(timeout=120)
    assert len(ours) == 100 and handler.cycles == 100
    # what the handler does inside prof.step() (its export_s: the raw trace's export, a rename, a queue entry)
    # stays flat over the cycles, and costs about what the bare export does
    sync = handler.export_s
    assert statistics.median(sync[-20:]) < 3 * statistics.median(sync[:20]) + 0.002, sync
    assert statistics.median(sync) < 1.5 * statistics.median(bare) + 0.005, (sync, bare)
    # the whole prof.step() too, with room for a machine whose other tenants come and go
    first, last = statistics.median(ours[:20]), statistics.median(ours[-20:])
    assert last < 4 * first + 0.020, (first, last)
    assert statistics.median(ours) < 3 * statistics.median(bare) + 0.020, (ours, bare)
    # each cycle analysed once, into one row; analysed cycles were diagnosed from the measured steps
    rows = [json.loads(line) for line in (tmp_path / "run" / "cycles.jsonl").read_text().splitlines()]
    assert sorted(r["cycle"] for r in rows) == list(range(100))
    analysed = [r for r in rows if "verdict" in r]
    assert len(analysed) >= 5 and all(r["basis"] == "telemetry" for r in analysed)
    assert len(analysed) == len(analysed_paths) == len(set(analysed_paths))  # once each, never again
    assert (tmp_path / "run" / "diagnosis.md").read_text().startswith("# stepscope diagnosis: `")


def test_a_loader_stall_outside_the_fixed_window_is_captured_and_diagnosed_data_bound(tmp_path):
    run = tmp_path / "run"
    # 5 slow steps in a row, and no hourly limit: a shared machine's own hiccups may set off captures too
    sched = stepscope.schedule(wait=10_000, warmup=1, active=3, repeat=1, skip_first=5, capture_on_slowdown=True,
                               slowdown=SlowdownRule(patience=5, max_per_hour=100))
    handler = stepscope.trace_handler(run)
    model, opt = tiny()
    with torch.profiler.profile(schedule=sched, on_trace_ready=handler) as prof:
        for x, y in stepscope.loader(batches(400, stall=range(200, 231), stall_s=0.02)):
            train_step(model, opt, x, y)
            prof.step()
    assert handler.close(timeout=120)
    stall = [s for s in handler.summaries if s.steps and 205 <= s.steps[0] <= 231]
    assert stall, [(s.steps, s.trigger) for s in handler.summaries]
    s = stall[0]
    assert s.trigger.startswith("loader wait:") and s.report.verdict == "data_bound", (s.trigger, s.report.verdict)
    # the stall's 20 ms waits are in the steps it is diagnosed from (beside them, a batch waits ~0 ms); on a
    # loaded machine the steps timed after the capture may run past the stall's end and dilute the mean
    assert s.report.basis == "telemetry" and s.telemetry["data_ms"] > 5
    md = (run / "diagnosis.md").read_text()
    assert "loader wait:" in md and "`data_bound`" in md


def test_the_exit_waits_with_a_bound_and_says_when_it_stops(tmp_path, monkeypatch, capsys):
    def slow(self, index, job, waited):
        time.sleep(2)

    monkeypatch.setattr(cycle_worker.CycleWorker, "_work", slow)
    handler = stepscope.trace_handler(tmp_path / "run")
    cycle_end_times(stepscope.schedule(wait=1, warmup=1, active=1, repeat=1), handler, 8)
    assert handler.close(timeout=0.2) is False
    err = capsys.readouterr().err
    assert "stopped waiting for the trace handler after 0.2 s: 1 of 1 profiling cycle(s) not yet diagnosed" in err
    assert trace_files.find_raw_traces(tmp_path / "run")  # the raw trace is there all the same


@pytest.mark.parametrize("world_size", ["1", "2"])
def test_a_rank_of_several_writes_its_diagnosis_and_no_report_json(tmp_path, monkeypatch, world_size):
    """report.json is the job's report: a loop that is one rank of two (torchrun's $WORLD_SIZE, no process
    group) keeps its per-cycle diagnosis and rows, and leaves report.json to the job; a loop alone writes it."""
    monkeypatch.setenv("WORLD_SIZE", world_size)
    run = tmp_path / "run"
    handler = stepscope.trace_handler(run)
    cycle_end_times(stepscope.schedule(wait=4, warmup=1, active=2, repeat=1), handler, 12)
    assert handler.close(timeout=120)
    assert (run / "diagnosis.md").read_text().startswith("# stepscope diagnosis: `")
    assert [json.loads(line)["verdict"] for line in (run / trace_files.CYCLES).read_text().splitlines()]
    assert (run / "report.json").exists() == (world_size == "1")


@pytest.mark.parametrize("gz", [True, False])
def test_profile_sets_up_schedule_and_handler_in_one_line(tmp_path, gz):
    run = tmp_path / "run"
    model, opt = tiny()
    with stepscope.profile(run, wait=20, warmup=1, active=2, skip_first=0, use_gzip=gz) as prof:
        for x, y in stepscope.loader(batches(60)):
            train_step(model, opt, x, y)
            prof.step()
    assert isinstance(prof.schedule, stepscope.capture.schedule.StepscopeSchedule)
    (adapted,) = trace_files.find_plugin_traces(run)
    (raw,) = trace_files.find_raw_traces(run)
    assert adapted.path.name.endswith(".pt.trace.json" + ".gz" * gz)
    assert raw.path.name.endswith(".trace.json" + ".gz" * gz)
    rows = [json.loads(line) for line in (run / "cycles.jsonl").read_text().splitlines()]
    assert [r["trigger"] for r in rows] == ["schedule"] and rows[0]["basis"] == "telemetry"
    assert rows[0]["telemetry"]["steps"] > 20 and "data_ms" in rows[0]["telemetry"]
    # the same figures as the front door gives for the raw trace with that telemetry
    report = stepscope.analyze(raw.path, telemetry=rows[0]["telemetry"])
    assert report.spans[0].metrics.step_ms == pytest.approx(rows[0]["step_ms"], abs=1e-3)


def test_export_raw_is_atomic_and_names_a_full_disk(tmp_path, monkeypatch):
    import errno
    import shutil
    from types import SimpleNamespace

    from stepscope.capture import handler as handler_module

    class Prof:
        def __init__(self, writes: bool) -> None:
            self.writes = writes

        def export_chrome_trace(self, path: str) -> None:
            if self.writes:
                Path(path).write_text('{"traceEvents": []}')

    raw = handler_module.export_raw(Prof(True), tmp_path, "w", "1795000000000000000")
    assert raw == tmp_path / "raw" / "1795000000000000000" / "w.trace.json" and raw.read_text()
    monkeypatch.setattr(shutil, "disk_usage", lambda p: SimpleNamespace(free=0))
    with pytest.raises(OSError) as e:
        handler_module.export_raw(Prof(False), tmp_path, "w", "1795000000000000001")
    assert e.value.errno == errno.ENOSPC
    assert not [p for p in tmp_path.rglob("*") if ".partial" in p.name or p.name.startswith(".tmp-")]

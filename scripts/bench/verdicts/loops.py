"""The verdict suite's scenarios as plain user loops: stepscope.schedule + stepscope.trace_handler, no trainer.

    python scripts/verdict_loops.py --out /tmp/vl                          # every GPU scenario of the suite
    python scripts/verdict_loops.py --out /tmp/vlh --set holdout           # the held-out families
    python scripts/verdict_loops.py --out /tmp/vl --only gpt_tiny loader_two_workers

For each scenario (gpu.py, holdout.py): the truth measured unprofiled (truth.py, as bench.py does), then the
workload's step run in the loop a user writes, then the truth's step timed again; the truth's step is the mean
of the two timings, which bracket the loop in time (the host's speed drifts over seconds):

    sched = stepscope.schedule(skip_first=5, wait=30, warmup=1, active=3, repeat=1, window=30)
    handler = stepscope.trace_handler(out / "traces" / name)
    with torch.profiler.profile(activities=[CPU, CUDA], schedule=sched, on_trace_ready=handler,
                                record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(STEPS):
            w.step(LoaderClock(sched))    # the wait for each batch, reported as stepscope.loader does
            prof.step()
    handler.close()

and scored (score.py) two ways: the handler's own diagnosis, from the schedule's telemetry
("diagnosis_run"), and the same raw trace read as a stranger's, without it ("diagnosis"). Writes OUT/results.json
and OUT/results.md and prints the Markdown. Done when every verdict is right and GPU busy is within 5 points.
Bad flags: one line on stderr, exit code 2.

The main set also runs the main-process loader (loader_in_process: a DataLoader with num_workers=0 and
per-sample host work, its next() inside the step) as a user half-adopting the drop-in would
(VARIANTS): `loader_in_process:unwrapped`, the schedule and the handler but no stepscope.loader or input_copy
(the schedule times the step, not the wait), and `loader_in_process:torch`, torch's own schedule and
tensorboard_trace_handler (the trace alone). The table "drop-in vs trace alone" gives each scenario's verdict
and GPU busy both ways against the same truth.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from pathlib import Path

from stepscope import input_copy, schedule, trace_handler
from stepscope.capture.cycle import telemetry_of
from stepscope.report.telemetry import as_dict
from stepscope.trace.errors import TraceError

from bench.verdicts.bench import GPU_ORDER, HOLDOUT_ORDER, diagnose
from bench.verdicts.score import BUSY_TOLERANCE_PP, score_rows, to_markdown
from bench.workloads import NoClock

SCHEDULE = dict(skip_first=5, wait=30, warmup=1, active=3, repeat=1, window=30)
STEPS = 5 + 30 + 4 + 1 + 30 + 2  # to the end of the window after the cycle
# scenario:variant -> how the loop is profiled (loop_scenario): the drop-in without stepscope.loader, torch's own
VARIANTS = ("loader_in_process:unwrapped", "loader_in_process:torch")


class LoaderClock(NoClock):
    """What Workload.step() calls around fetching and copying its batch, turned into what stepscope.loader and
    stepscope.input_copy report."""

    def __init__(self, sched) -> None:
        self.sched, self.t0 = sched, 0

    def begin(self) -> None:
        self.t0 = time.perf_counter_ns()

    def batch_ready(self) -> None:
        self.sched.add_data_wait(time.perf_counter_ns() - self.t0)

    def dispatched(self) -> None:
        pass

    def copy(self, fn):
        with input_copy(self.sched):
            return fn()


class Unwrapped(LoaderClock):
    """A loop that times nothing but its steps: no stepscope.loader, no stepscope.input_copy."""

    def batch_ready(self) -> None:
        pass

    def copy(self, fn):
        return fn()


def loop_scenario(name: str, out: Path, device) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from bench.nvml_busy import driver_busy_pct
    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.truth import compute_ms, copy_ms, expected_verdict, measure, step_times

    base, _, variant = name.partition(":")
    if base not in WORKLOADS:
        from bench.verdicts.holdout import HOLDOUT as WORKLOADS
    torch.manual_seed(0)
    w = WORKLOADS[base](device)
    t0 = time.perf_counter()
    truth = measure(w, device)
    expected, confirmed = expected_verdict(w, truth)
    truth.update(expected=expected, confirmed=confirmed, cause=w.cause, family=w.family,
                 gpu_busy_pct=None if truth["gpu_ms"] is None else min(100.0, 100 * truth["gpu_ms"] / truth["step_ms"]))
    run_dir = out / "traces" / name.replace(":", "_")
    if variant == "torch":
        import torch.profiler as tp

        sched = tp.schedule(**{k: v for k, v in SCHEDULE.items() if k != "window"})
        handler = tp.tensorboard_trace_handler(str(run_dir), worker_name=name.replace(":", "_"))
    else:
        sched = schedule(**SCHEDULE)
        handler = trace_handler(run_dir, worker_name=name.replace(":", "_"))
    clock = Unwrapped(sched) if variant else LoaderClock(sched)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, on_trace_ready=handler,
                 record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(STEPS):
            w.step(clock)
            prof.step()
    if variant != "torch":
        handler.close(timeout=300)
    # the truth timed again, now that the loop is over: the mean of the two brackets the loop in time, so that
    # the drift of the host's speed (the step), of a pageable copy's (the input copy) and of the device's (the
    # graph replay of a GPU-bound step) over the scenario weighs on the truth as on the loop's own timing
    after = statistics.fmean(step_times(w.step, device))
    truth["step_ms_before_loop"], truth["step_ms_after_loop"] = truth["step_ms"], after
    truth["step_ms"] = (truth["step_ms"] + after) / 2
    if truth["copy_ms"]:
        copy_after = copy_ms(w)
        truth["copy_ms_before_loop"], truth["copy_ms_after_loop"] = truth["copy_ms"], copy_after
        truth["copy_ms"] = (truth["copy_ms"] + copy_after) / 2
    if truth["compute_ms"] is not None:
        compute_after = compute_ms(w, device)  # None where a loader's thread now refuses the capture
        if compute_after is not None:
            truth["compute_ms_before_loop"], truth["compute_ms_after_loop"] = truth["compute_ms"], compute_after
            truth["compute_ms"] = (truth["compute_ms"] + compute_after) / 2
        truth["gpu_ms"] = truth["compute_ms"] + truth["copy_ms"] + truth["readback_ms"]
        truth["gpu_busy_pct"] = min(100.0, 100 * truth["gpu_ms"] / truth["step_ms"])
    truth["nvml_busy_pct"] = driver_busy_pct(w.step, device)
    truth["expected"], truth["confirmed"] = expected_verdict(w, truth)
    if variant == "torch":  # the trace alone is all there is
        (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        alone = diagnose(run_dir)
        del w
        torch.cuda.empty_cache()
        return {"scenario": name, "truth": truth, "telemetry": None, "diagnosis": alone,
                "seconds": time.perf_counter() - t0}
    (summary,) = handler.summaries
    if summary.report is None:
        raise ValueError(f"{name}: no diagnosis: {summary.error}")
    d = summary.report.to_dict()
    (run_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    row = {"scenario": name, "truth": truth, "telemetry": as_dict(summary.telemetry),
           "diagnosis_run": {"verdict": d["verdict"], "gpu_busy_pct": d["metrics"]["gpu_busy_pct"],
                             "profiled_gpu_busy_pct": d["metrics"]["profiled"]["gpu_busy_pct"],
                             "step_ms": d["metrics"]["step_ms"], "profiled_step_ms": d["metrics"]["profiled"]["step_ms"],
                             "findings": [f["id"] for f in d["findings"]]},
           "seconds": time.perf_counter() - t0}
    # the kept steps before the cycle and after it, apart: where they differ, the profiler left a cost in the
    # steps after it (bench/after_profiling.py), or the host's speed drifted
    cycle = sched.cycles[0]
    row["telemetry_before"] = as_dict(telemetry_of(cycle.before, cycle.with_data))
    row["telemetry_after"] = as_dict(telemetry_of(cycle.after, cycle.with_data))
    try:  # the same trace as a stranger's, for comparison; its failure leaves the loop's own result standing
        row["diagnosis"] = diagnose(run_dir)
    except TraceError as e:
        row["diagnosis_error"] = str(e)
    del w
    torch.cuda.empty_cache()
    return row


def dropin_table(rows: list[dict]) -> str:
    """Per scenario, the drop-in's diagnosis (the schedule's telemetry) against the trace alone's: verdict
    right, and GPU busy within 5 points of the truth; the totals, and the scenarios where either is off."""
    def judged(r, key):
        d = r.get(key)
        if d is None:
            return None, None, "–"
        t = r["truth"]
        right = d["verdict"] == t["expected"]
        busy = (None if t.get("gpu_busy_pct") is None or d.get("gpu_busy_pct") is None
                else abs(d["gpu_busy_pct"] - t["gpu_busy_pct"]))
        ok = None if busy is None else busy <= BUSY_TOLERANCE_PP
        return right, ok, f"{d['verdict']}{'' if right else ' ✗'}, {'–' if busy is None else f'{busy:.1f}'}"

    out = ["Drop-in (stepscope.schedule + trace_handler) vs trace alone: verdict, |GPU busy - truth| in points", "",
           "| scenario | truth | drop-in | trace alone |", "|---|---|---|---|"]
    totals = {"diagnosis_run": [0, 0, 0, 0], "diagnosis": [0, 0, 0, 0]}
    for r in rows:
        if "error" in r or r["truth"].get("confirmed") is False:
            continue
        cells = []
        for key in ("diagnosis_run", "diagnosis"):
            right, ok, text = judged(r, key)
            cells.append(text)
            if right is not None:
                totals[key][0] += right
                totals[key][1] += 1
            if ok is not None:
                totals[key][2] += ok
                totals[key][3] += 1
        out.append(f"| {r['scenario']} | {r['truth']['expected']} | {cells[0]} | {cells[1]} |")
    run, alone = totals["diagnosis_run"], totals["diagnosis"]
    out += ["", f"Drop-in: verdicts right {run[0]} of {run[1]}, busy within {BUSY_TOLERANCE_PP:g} points {run[2]} of "
            f"{run[3]}. Trace alone: verdicts right {alone[0]} of {alone[1]}, busy within {BUSY_TOLERANCE_PP:g} "
            f"points {alone[2]} of {alone[3]}."]
    return "\n".join(out) + "\n"


def driver_table(rows: list[dict]) -> str:
    """GPU busy three ways per scenario: the truth's graph replay over the step, the driver's samples over the
    unprofiled loop (bench/nvml_busy.py), and the handler's diagnosis."""
    def f(v):
        return "–" if v is None else f"{v:.1f}"

    out = ["GPU busy %: graph replay / step (the truth) | the driver's samples, unprofiled | diagnosed", "",
           "| scenario | graph replay / step | driver (NVML) | diagnosed |", "|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r or "diagnosis_run" not in r:
            continue
        t = r["truth"]
        out.append(f"| {r['scenario']} | {f(t.get('gpu_busy_pct'))} | {f(t.get('nvml_busy_pct'))} | "
                   f"{f(r['diagnosis_run']['gpu_busy_pct'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="verdict_loops.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="where results and traces go (created)")
    p.add_argument("--set", dest="scenario_set", default="main", choices=["main", "holdout"])
    p.add_argument("--only", nargs="+", metavar="SCENARIO")
    a = p.parse_args(argv)
    names = GPU_ORDER if a.scenario_set == "main" else HOLDOUT_ORDER
    names = tuple(n for n in names if n != "cold_start")  # a window over the first steps is the trainer's case
    if a.scenario_set == "main":
        names += VARIANTS
    unknown = [n for n in (a.only or []) if n not in names]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; valid: {', '.join(names)}")
    import torch

    if not torch.cuda.is_available():
        p.error("no CUDA GPU is visible: the suite's loops are GPU scenarios")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [n for n in names if not a.only or n in a.only]:
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
        try:
            row = loop_scenario(name, a.out, torch.device("cuda"))
        except (RuntimeError, OSError, ValueError) as e:
            traceback.print_exc()
            row = {"scenario": name, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        (a.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    scored, scored_run = score_rows(rows), score_rows(rows, "diagnosis_run")
    (a.out / "results.json").write_text(json.dumps({"rows": rows, "score": scored, "score_run": scored_run},
                                                   indent=1) + "\n")
    md = ("Plain loops, stepscope.schedule + stepscope.trace_handler (the schedule's telemetry)\n\n"
          + to_markdown(rows, scored_run, "diagnosis_run")
          + "\nThe same traces as strangers' (no telemetry: the profiler-overhead model)\n\n" + to_markdown(rows, scored))
    md += "\n" + dropin_table(rows) + "\n" + driver_table(rows)
    (a.out / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

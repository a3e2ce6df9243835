"""The end of a run, completed or interrupted: run.json, and for profiled runs the top-ops table, the
TensorBoard command and the diagnosis (console, `diagnosis.md`, TensorBoard Text and Scalars).

Under torchrun only rank 0 writes run.json and the diagnosis, whose report.json is the folder's only one: the
job's report on every rank's traces, with the cross-rank section (the ranks' trace handlers write none). After
a completed run every rank first meets at a barrier, so rank 0 sees all ranks' traces; after a stop signal nobody waits for anybody (a peer may be
gone), and run.json lists the traces that exist at that moment. A signal during the top-ops table or the
diagnosis ends it: run.json then says "interrupted", and diagnosis.md stays the one the trace handler wrote for
the profiling cycles. A trace that cannot be analysed (one line on stderr) leaves no run diagnosis either, never
an unwritten run.json. Once the diagnosis is over, a signal is only recorded: run.json is written as the run
stands.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from stepscope.demo.run_dir import PAGE, no_space, release_space
from stepscope.demo.run_record import RunRecord, finite_or_none
from stepscope.report.telemetry import Telemetry, as_dict
from stepscope.tensorboard.diagnose import diagnose_run
from stepscope.trace.errors import TraceError, print_error
from stepscope.trace.files import find_plugin_traces
from stepscope.trace.workers import Workers

# the widest a number is written in run.json (a float's repr is at most 24 characters)
WIDEST = -2.2250738585072014e-308


def final_numbers(progress, thr) -> dict:
    return {
        "steps": progress.steps,
        "train_loss": finite_or_none(progress.train_loss),
        "eval_accuracy": finite_or_none(progress.eval_accuracy),
        "images_per_s": finite_or_none(thr.images_per_s),
        "mean_step_ms": finite_or_none(thr.mean_ms),
        "median_step_ms": finite_or_none(thr.median_ms),
        "timed_steps": thr.steps,  # profiled steps and the trace export are excluded
        # each timed step's wall time, in order: what `stepscope diff` draws its confidence interval from
        "step_times_ms": [round(ms, 4) for ms in thr.all_ms],
        # means of the timed steps: the step and its phases as the run runs without the profiler
        "telemetry": as_dict(thr.telemetry()),
        # what the run shared its CPUs with: whether its step times can be compared with another run's
        **cpu_sharing(thr.contention()),
    }


def cpu_sharing(c) -> dict:
    """run.json's ``others_cpu_pct`` (other processes' share of all CPUs) and ``waited_cpu_pct`` (the share of
    its threads' runnable time they waited for a CPU) from a machine_load.Contention; None each if unknown."""
    return {"others_cpu_pct": c.others_pct if c else None, "waited_cpu_pct": c.waited_pct if c else None}


def widest_final() -> dict:
    """final_numbers' keys, each with the widest value it can hold: the most room the final numbers take."""
    return {k: WIDEST for k in ("steps", "train_loss", "eval_accuracy", "images_per_s", "mean_step_ms",
                                "median_step_ms", "timed_steps", "others_cpu_pct", "waited_cpu_pct")} | {
        "telemetry": {f.name: WIDEST for f in fields(Telemetry)}}


def reserve_bytes(record: RunRecord) -> int:
    """The room to set aside at the start (run_dir.reserve_space): the smallest record the run can end with,
    measured with the widest final numbers and signal, in whole pages, plus a page for the file system's own
    bookkeeping of the temporary file."""
    end = replace(record, status="interrupted", signal="SIGVTALRM", final=widest_final()).smallest()
    return PAGE * (2 + len(end.text().encode("utf-8")) // PAGE)


def write_last(done: RunRecord, run_dir: Path) -> None:
    """Write the run's last record however full the disk is: the whole record; else, with the reserve
    given back, the whole record again; else the smallest record (RunRecord.smallest); else that record
    over run.json in place (not atomic, but the old record's room is then the new one's)."""
    try:
        done.write(run_dir)
        return
    except OSError as e:
        if not no_space(e):
            raise
    release_space(run_dir)
    for record in (done, done.smallest()):
        try:
            record.write(run_dir)
            return
        except OSError as e:
            if not no_space(e):
                raise
    with open(Path(run_dir) / "run.json", "r+b") as f:  # truncating frees the old record's pages first
        f.truncate(0)
        f.write(done.smallest().text().encode("utf-8"))


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


@dataclass(frozen=True)
class RunParts:
    """The live objects of a run that its end needs: the process (env, group), the stop-signal handler,
    the TensorBoard event writer, and the profiler's trace handler, closed by now (None when not profiling)."""

    env: object
    group: object
    stop: object
    log: object
    handler: object | None


def finish_run(status: str, progress, thr, record: RunRecord, parts: RunParts) -> int:
    """Write run.json (and on a profiled run the diagnosis); return the process's exit code."""
    env, group, stop, log, handler = parts.env, parts.group, parts.stop, parts.log, parts.handler
    final = final_numbers(progress, thr)
    memo = handler.memo if handler is not None else None
    if status == "completed":
        try:
            # every rank has written its traces before rank 0 analyses them, and hands rank 0 what its trace
            # handler's cycles took from them: rank 0 reports every rank's cycles again with the whole run's
            # telemetry, reading none of their traces again (engine.Memo)
            ranks = group.gather(memo.entries() if memo is not None else [])
            if memo is not None and ranks is not None and env.is_main:
                for entries in ranks[1:]:
                    memo.add(entries)
        except BaseException as e:
            if not stop.explains(e):
                raise
            status = "interrupted"
    if not env.is_main:
        return 0 if status == "completed" else stop.exit_code()
    run_dir = Path(record.run_dir)
    diagnosis = None
    try:
        if handler is not None and handler.cycles and status != "failed":
            print("stepscope: analysing the profiled steps ...", flush=True)
            # rank 0 of a training job: its threads, CUDA context and process group must never be forked
            diagnosis = diagnose_run(run_dir, log, progress.steps, telemetry=final["telemetry"],
                                     workers=Workers.inline(), memo=memo)
    except KeyboardInterrupt:  # the first signal of a completed run (StopSignal ignores repeats)
        status = "interrupted"
        print(f"\n{stop.signal_name} during the diagnosis: skipped (run scripts/analyze.py "
              f"{shlex.quote(str(run_dir))} later)", file=sys.stderr)
    except TraceError as e:  # e.g. a peer rank stopped by the same signal mid-cycle: run.json is still written
        print_error(f"stepscope: no diagnosis: {e}")
    # what follows records the run as it now stands: a signal from here on changes nothing
    stop.hold()
    traces = [tf.path.name for tf in find_plugin_traces(run_dir)] if handler is not None else []  # every rank's
    if handler is not None:
        if not handler.cycles:
            print("the profiler recorded no complete cycle before the run stopped; no trace was written")
        print(f"open it with:  stepscope tensorboard --logdir {shlex.quote(str(run_dir.parent))}   (run: {run_dir.name})")
    done = replace(record, status=status, final=final, traces=traces,
                   signal=stop.signal_name if status == "interrupted" else None,
                   loss_history=[[s, finite_or_none(v)] for s, v in progress.history])
    if diagnosis is not None:
        done = replace(done, diagnosis={
            "verdict": diagnosis["verdict"], "file": "diagnosis.md",
            "spans": [{**{k: sp[k] for k in ("worker", "span", "verdict", "basis", "metrics")},
                       "findings": [{k: f[k] for k in ("id", "cost_ms_per_step")} for f in sp["findings"]]}
                      for sp in diagnosis["spans"]]})
    try:
        write_last(done, run_dir)  # run.json says how the run ended, however full the disk is
        log.close()
    except OSError:
        if status != "failed":  # the disk is full: the caller reports the first failure, not this one
            raise
    finally:
        release_space(run_dir)
    speed = "no timed steps" if final["images_per_s"] is None else f"{final['images_per_s']:.0f} images/s"
    print(f"{status}: {progress.steps} steps, train loss {_fmt(final['train_loss'], '.4f')}, eval accuracy "
          f"{_fmt(final['eval_accuracy'], '.3f')}, {speed} -> {run_dir}")
    return 0 if status == "completed" else stop.exit_code()


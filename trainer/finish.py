"""The end of a run, completed or interrupted: run.json, and for profiled runs the top-ops table, the
TensorBoard command and the diagnosis (console, `diagnosis.md`, TensorBoard Text and Scalars).

Under torchrun only rank 0 writes run.json and the diagnosis. After a completed run every rank first meets
at a barrier, so rank 0 sees all ranks' traces; after Ctrl-C nobody waits for anybody (a peer may be gone),
and run.json lists the traces that exist at that moment.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from trainer.atomic import write_text_atomic
from trainer.profiling import top_ops_table
from trainer.run_dir import write_json_atomic
from trainer.trace_files import find_plugin_traces


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def diagnose(run_dir: Path, log, step: int) -> dict:
    """Analyse the run's traces; print the verdict and evidence; write diagnosis.md, Text and Scalars."""
    from trainer.analysis import analyze_run, render_console, render_markdown, summary_scalars

    report = analyze_run(run_dir)
    print(render_console(report))
    md = render_markdown(report)
    write_text_atomic(run_dir / "diagnosis.md", md)
    log.text("diagnosis", md, step)
    log.scalars(summary_scalars(report), step)
    return report.to_dict()


def finish_run(status: str, progress, thr, meta: dict, run_dir: Path, log, prof, writer, env, group) -> int:
    final = {
        "steps": progress.steps,
        "train_loss": _num(progress.train_loss),
        "eval_accuracy": _num(progress.eval_accuracy),
        "images_per_s": _num(thr.images_per_s),
        "mean_step_ms": _num(thr.mean_ms),
        "median_step_ms": _num(thr.median_ms),
        "timed_steps": thr.steps,  # profiled steps and the trace export are excluded
    }
    if status == "completed":
        group.barrier()  # every rank has written its traces before rank 0 analyses them
    if not env.is_main:
        return 0 if status == "completed" else 130
    traces = [tf.path.name for tf in find_plugin_traces(run_dir)] if writer is not None else []  # every rank's
    diagnosis = None
    if writer is not None:
        if writer.cycles:
            print(top_ops_table(prof, env.is_cuda))
            diagnosis = diagnose(run_dir, log, progress.steps)
        else:
            print("the profiler recorded no complete cycle before the run stopped; no trace was written")
        logdir = run_dir.parent
        print(f"open it with:  tensorboard --logdir {shlex.quote(str(logdir))}   (run: {run_dir.name})")
    record = {**meta, "status": status, "final": final, "traces": traces,
              "loss_history": [[s, _num(v)] for s, v in progress.history]}
    if diagnosis is not None:
        record["diagnosis"] = {
            "verdict": diagnosis["verdict"], "file": "diagnosis.md",
            "spans": [{k: sp[k] for k in ("worker", "span", "verdict", "metrics")} for sp in diagnosis["spans"]]}
    write_json_atomic(run_dir / "run.json", record)
    log.close()
    speed = "no timed steps" if final["images_per_s"] is None else f"{final['images_per_s']:.0f} images/s"
    print(f"{status}: {progress.steps} steps, train loss {final['train_loss']}, eval accuracy "
          f"{final['eval_accuracy']}, {speed} -> {run_dir}")
    return 0 if status == "completed" else 130

"""Prove the memory diagnosis: re-run a trainer run at the batch its headroom predicts, and with expandable
segments, and compare what the device measured (``stepscope verify --memory RUN``).

    stepscope verify logs/<run> --memory [--steps 60]

From the run's memory section (analysis/memory.py: at each moment of the step that can be its peak, the fixed
bytes stay and what grows with the batch scales), the largest batch that fits is the run's batch times
``batch_scale``, and the peak at a batch B is the largest of fixed + scaled × B / batch over those moments
(``peak_at``). Three unprofiled runs of the same config, under RUN/verify/:

- ``baseline``: as it was;
- ``headroom``: at the predicted batch. **confirmed** when it completes (no out-of-memory error) and its
  measured peak allocated (the allocator's largest window peak, capture/memory_stats.py) is within 10% of the
  predicted peak at that batch; **refuted** otherwise. Its images/s (with a 95% interval from its step times)
  beside the baseline's says what the larger batch bought;
- ``expandable_segments``: the baseline with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, reported as a
  trade: GiB of peak reserved saved, ms per step paid;
- ``checkpointing`` (resnet8/resnet18): the baseline with ``--checkpoint-activations``, a trade too: GiB of peak
  allocated saved, ms per step paid.

Writes ``memory_verification`` into run.json, a section of diagnosis.md and TensorBoard scalars
``verify/memory_*``. Bad input (a CPU run, no memory section, no prediction): one line, exit 2, nothing written.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
from pathlib import Path

from stepscope.analysis.memory import GIB, MIB, peak_at, peak_line, room_at
from stepscope.demo.config import CHECKPOINTED_ARCHS
from stepscope.demo.launch import INSTALLED_TRAIN, TrainFailed, run_train
from stepscope.report.diff import t_quantile
from stepscope.report.front import analyze
from stepscope.tensorboard.tb_events import EventLog
from stepscope.trace.atomic import write_text_atomic

PEAK_TOLERANCE = 0.10
EXPANDABLE = "expandable_segments:True"


class HeadroomError(ValueError):
    """Bad input; the message is the one line printed."""


@contextlib.contextmanager
def _env(name: str, value: str | None):
    """``name`` set to ``value`` (None: left alone) for the runs started inside."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = f"{old},{value}" if old else value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _run(args: list[str], logdir: Path, name: str, train_cmd: tuple[str, ...], alloc_conf: str | None = None) -> dict:
    """The run's figures: {"ok", "error", "peak_allocated", "peak_reserved", "images_per_s": [mid, low, high],
    "step_ms"}; an out-of-memory run is ok=False with its last line."""
    with _env("PYTORCH_CUDA_ALLOC_CONF", alloc_conf):
        try:
            run = run_train([*args, "--logdir", str(logdir), "--run-name", name], train_cmd)
        except TrainFailed as e:
            print(f"{name}: failed: {e}", flush=True)
            return {"ok": False, "error": str(e)}
    final = run["final"]
    tel = final.get("telemetry") or {}
    batch = run.get("global_batch_size") or 0
    out = {"ok": True, "step_ms": final.get("median_step_ms"),
           "peak_allocated": tel.get("mem_peak_allocated_mib", 0.0) * MIB,
           "peak_reserved": tel.get("mem_peak_reserved_mib", 0.0) * MIB,
           "images_per_s": images_interval(final.get("step_times_ms") or [], batch)}
    print(f"{name}: peak {out['peak_allocated'] / GIB:.2f} GiB allocated, {out['peak_reserved'] / GIB:.2f} GiB "
          f"reserved, {_ips(out['images_per_s'])}", flush=True)
    return out


def _ips(v: list) -> str:
    return "images/s unknown" if v[0] is None else f"{v[0]:.0f} images/s ({v[1]:.0f}-{v[2]:.0f})"


def images_interval(step_ms: list[float], batch: int) -> list[float]:
    """Images per second from the mean step, with the 95% t interval of that mean: [mid, low, high] (None
    each without two steps)."""
    if len(step_ms) < 2 or not batch:
        return [None] * 3
    mean, sd = statistics.fmean(step_ms), statistics.stdev(step_ms)
    half = t_quantile(0.975, len(step_ms) - 1) * sd / math.sqrt(len(step_ms))
    return [batch * 1e3 / mean, batch * 1e3 / (mean + half), batch * 1e3 / max(mean - half, 1e-9)]


def prediction(run_dir: Path, batch: int) -> dict:
    """The run's memory section's prediction: the largest batch and the peak at it."""
    try:
        spans = analyze(run_dir).spans
    except (ValueError, OSError) as e:
        raise HeadroomError(f"{run_dir}: its traces cannot be analysed ({e})") from None
    dev = next((d for s in spans if s.memory is not None for d in s.memory.devices if d.capacity is not None), None)
    if dev is None:
        raise HeadroomError(f"{run_dir}: no GPU memory in its traces (record with --profile and profile_memory on, "
                            "the default)")
    if dev.batch_scale is None:
        raise HeadroomError(f"{run_dir}: its step adds too little above its persistent memory to predict a batch")
    largest = max(int(batch * dev.batch_scale), batch)
    scale = largest / batch
    fixed, scaled = peak_line(dev, scale)  # the moment that binds (a batch_scale implies a scaling)
    return {"device": dev.device, "capacity": dev.capacity, "batch": batch, "batch_scale": dev.batch_scale,
            "predicted_batch": largest, "persistent": fixed, "per_sample": scaled / batch,
            "predicted_peak": peak_at(dev, scale), "traced_peak": dev.peak.peak_allocated,
            "room_needed": room_at(dev, scale)}


def verify_headroom(run_dir: Path, steps: int, base_args: list[str], batch: int, device: str,
                    train_cmd: tuple[str, ...] = INSTALLED_TRAIN, arch: str = "") -> dict:
    """The three runs (module docstring) and the result. ``base_args``: the run's train.py flags, unprofiled."""
    if device != "cuda":
        raise HeadroomError(f"{run_dir}: a {device} run; the memory headroom is verified on a CUDA run")
    pred = prediction(run_dir, batch)
    out_dir = run_dir / "verify"
    if (out_dir / "headroom").exists():
        raise HeadroomError(f"{out_dir / 'headroom'} exists: this run's memory was verified already (remove it "
                            "to verify again)")
    base = [*base_args, "--steps", str(steps)]
    bigger = _with_batch(base, pred["predicted_batch"])
    grown = _enough_data(bigger, pred["predicted_batch"])
    if grown:  # synthetic data on the device: the larger data set is persistent memory too
        bigger = grown[0]
        pred["predicted_peak"] += grown[1]
        pred["data_bytes_added"] = grown[1]
    baseline = _run(base, out_dir, "baseline_memory", train_cmd)
    headroom = _run(bigger, out_dir, "headroom", train_cmd)
    expandable = _run(base, out_dir, "expandable_segments", train_cmd, EXPANDABLE)
    checkpointed = None
    if arch in CHECKPOINTED_ARCHS and "--checkpoint-activations" not in base:
        checkpointed = _run([*base, "--checkpoint-activations"], out_dir, "checkpointing", train_cmd)
    if headroom["ok"] and headroom["peak_allocated"] > 0:
        error = headroom["peak_allocated"] / pred["predicted_peak"] - 1
        result = "confirmed" if abs(error) <= PEAK_TOLERANCE else "refuted"
    else:
        error, result = None, "refuted"
    trade = None
    if baseline["ok"] and expandable["ok"]:
        trade = {"reserved_saved_gib": (baseline["peak_reserved"] - expandable["peak_reserved"]) / GIB,
                 "ms_per_step_paid": (expandable["step_ms"] or 0) - (baseline["step_ms"] or 0)}
    ckpt_trade = None
    if checkpointed is not None and baseline["ok"] and checkpointed["ok"]:
        ckpt_trade = {"allocated_saved_gib": (baseline["peak_allocated"] - checkpointed["peak_allocated"]) / GIB,
                      "ms_per_step_paid": (checkpointed["step_ms"] or 0) - (baseline["step_ms"] or 0)}
    return {"result": result, "prediction": pred, "peak_error": error, "tolerance": PEAK_TOLERANCE,
            "baseline": baseline, "headroom": headroom, "expandable_segments": expandable,
            "expandable_trade": trade, "checkpointing": checkpointed, "checkpointing_trade": ckpt_trade,
            "steps": steps}


SYNTHETIC_SAMPLE_BYTES = 3 * 32 * 32 * 4 + 8  # a synthetic image (float32) and its label (int64)


def _enough_data(args: list[str], batch: int) -> tuple[list[str], int] | None:
    """For synthetic data smaller than two batches: the flags with twice the batch of samples, and the bytes that
    adds on the device (0 when the data stays on the host); None when the data set is large enough."""
    if args[args.index("--data") + 1] != "synthetic":
        return None
    i = args.index("--synthetic-train-size")
    size = int(args[i + 1])
    if size >= 2 * batch:
        return None
    out = list(args)
    out[i + 1] = str(2 * batch)
    on_device = args[args.index("--data-placement") + 1] == "device"
    return out, (2 * batch - size) * SYNTHETIC_SAMPLE_BYTES if on_device else 0


def _with_batch(args: list[str], batch: int) -> list[str]:
    out = list(args)
    i = out.index("--batch-size")
    out[i + 1] = str(batch)
    return out


def record(run_dir: Path, v: dict) -> str:
    p = v["prediction"]
    h = v["headroom"]
    if h["ok"]:
        got = (f"ran with a peak of {h['peak_allocated'] / GIB:.2f} GiB allocated against {p['predicted_peak'] / GIB:.2f} "
               f"GiB predicted ({100 * v['peak_error']:+.1f}%; within {100 * v['tolerance']:.0f}% confirms), "
               f"{_ips(h['images_per_s'])} against the baseline's "
               f"{_ips(v['baseline']['images_per_s']) if v['baseline']['ok'] else 'failed run'}")
    else:
        got = f"failed: {h['error']}"
    md = (f"## Memory verification: `{v['result']}`\n\nThe batch could grow from {p['batch']} to about "
          f"{p['predicted_batch']} (persistent {p['persistent'] / GIB:.2f} GiB stays, {p['per_sample'] / MIB:.1f} MiB a "
          f"sample scales); the re-run at {p['predicted_batch']} {got}.\n")
    t = v["expandable_trade"]
    if t is not None:
        md += (f"\nExpandable segments ({EXPANDABLE}) at the run's batch: {t['reserved_saved_gib']:+.2f} GiB of peak "
               f"reserved saved, {t['ms_per_step_paid']:+.3f} ms a step paid.\n")
    c = v.get("checkpointing_trade")
    if c is not None:
        md += (f"\nActivation checkpointing (--checkpoint-activations) at the run's batch: "
               f"{c['allocated_saved_gib']:+.2f} GiB of peak allocated saved, {c['ms_per_step_paid']:+.3f} ms a step "
               "paid.\n")
    run = json.loads((run_dir / "run.json").read_text())
    run["memory_verification"] = v
    write_text_atomic(run_dir / "run.json", json.dumps(run, indent=2, default=str) + "\n")
    diag = run_dir / "diagnosis.md"
    write_text_atomic(diag, (diag.read_text() if diag.is_file() else "") + "\n" + md)
    with EventLog(run_dir) as tb:
        tb.text("memory_verification", md, 0)
        scalars = {"verify/memory_predicted_batch": float(p["predicted_batch"]),
                   "verify/memory_predicted_peak_gib": p["predicted_peak"] / GIB}
        if h["ok"]:
            scalars["verify/memory_measured_peak_gib"] = h["peak_allocated"] / GIB
        tb.scalars(scalars, 0)
    return md

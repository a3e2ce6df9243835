"""Ground truth for one workload, measured without the profiler, and its profiled trace.

    truth = measure(workload, device)           # step time, GPU time, the intervention's step time
    telemetry = run_telemetry(workload, device) # what stepscope's trainer records on unprofiled steps
    record_trace(workload, out_dir, cold=False) # 3 profiled steps, record_shapes + profile_memory + with_stack

Step time: CUDA events at step boundaries (perf_counter on a CPU), the mean of the timed steps after a
warm-up (the run's time per step: a loader whose workers deliver in bursts makes alternate steps long, and
a median would pick one kind).
GPU time: the step's device work replayed as a CUDA graph (no launch gaps, no host), plus the input copy
timed alone where the step copies its batch, plus the copy of its output to the host timed alone where the
step reads it back (a graph cannot hold a copy to pageable memory); where the device work cannot be
captured, None. The
intervention removes the injected cause: the workload's `fixed()` variant, or for launch-bound workloads
the CUDA-graph replay itself. The expected verdict follows from these numbers alone (`expected_verdict`),
never from what the analysis says. Used by scripts/verdict_bench.py.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from stepscope.analysis.verdicts import GPU_BOUND, GPU_BOUND_PCT, LAUNCH_BOUND, TRANSFER_BOUND
from stepscope.demo.step import capture_graph
from stepscope.demo.timing import StepClock, Throughput
from stepscope.report.telemetry import as_dict
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

GPU_BOUND_SHARE = GPU_BOUND_PCT / 100  # the analysis's own threshold: the GPU busy for at least half of the step
CONFIRM_SPEEDUP = 1.15  # removing a cause that bounds the step must speed it up at least this much


def step_times(step, device: torch.device, warmup: int = 5, steps: int = 30, budget_s: float = 8.0) -> list[float]:
    """ms of each step: boundary to boundary, as a training loop sees it."""
    for _ in range(warmup):
        step()
    cuda = device.type == "cuda"
    marks = []
    t_end = time.perf_counter() + budget_s
    for _ in range(steps + 1):
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            marks.append(ev)
        else:
            marks.append(time.perf_counter())
        if len(marks) > steps or (len(marks) > 6 and time.perf_counter() > t_end):
            break
        step()
    if cuda:
        marks[-1].synchronize()  # sync point: once, after the timed steps
        return [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
    return [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]


def events_ms(fn, reps: int, skip: int = 0) -> float:
    """Median ms of ``fn``'s device work, each call alone between two CUDA events (the device idle before
    it), over ``reps`` calls less the first ``skip``."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()  # sync point: each call alone, outside any timed training step
        times.append(a.elapsed_time(b))
    return statistics.median(times[skip:])


def capture(fn) -> torch.cuda.CUDAGraph | None:
    """``fn``'s device work as a CUDA graph, the benchmarks' way; None if it cannot be captured."""
    try:
        # thread-local: a DataLoader's pin-memory thread may use CUDA while the step is captured
        return capture_graph(fn, warmup=3, capture_error_mode="thread_local")
    except Exception:  # noqa: BLE001 - not capturable (host syncs, dynamic shapes): no graph time
        torch.cuda.synchronize()
        return None


def graph_ms(fn, reps: int = 20) -> float | None:
    """Median ms of `fn`'s device work replayed as a CUDA graph; None if it cannot be captured."""
    g = capture(fn)
    return None if g is None else events_ms(g.replay, reps)


def copy_ms(w) -> float:
    """The step's host->device input copy alone, as the step does it."""
    if not getattr(w, "copy_bytes", 0):
        return 0.0

    def copy() -> None:
        w.x.copy_(w.host_x, non_blocking=w.pinned)
        w.y.copy_(w.host_y, non_blocking=w.pinned)

    return events_ms(copy, 10, skip=2)


def readback_ms(w) -> float:
    """The step's copy of its output to the host alone (``sync_host_work``'s ``.float().cpu()``), as the step
    does it: a conversion kernel and a device-to-host copy into pageable memory."""
    if not getattr(w, "host_work", 0):
        return 0.0
    with torch.no_grad():
        _, out = w._forward()
    return events_ms(lambda: out.detach().float().cpu(), 10, skip=2)  # sync point: the copy, as the step makes it


def compute_ms(w, device: torch.device) -> float | None:
    """The step's device work (no input copy, no readback) replayed as a CUDA graph, or its twin's where the
    step itself cannot be captured; None on a CPU or where neither can."""
    compute = graph_ms(w.gpu_part) if device.type == "cuda" and w.capturable() else None
    twin = getattr(w, "gpu_twin", None)
    if compute is None and device.type == "cuda" and twin is not None:
        t = twin()  # the same device work in a form a CUDA graph can hold (workloads.py)
        compute = graph_ms(t.gpu_part) if t.capturable() else None
        del t
    return compute


def measure(w, device: torch.device, with_telemetry: bool = False) -> dict:
    """The truth (module docstring); `with_telemetry`: also the run's telemetry (`run_telemetry`), timed
    straight after the truth's own steps so that the two see the host alike (out["telemetry"])."""
    # the graph first: a DataLoader's pin-memory thread, once started, may not allocate during a capture
    compute = compute_ms(w, device)
    times = step_times(w.step, device)
    out = {"step_ms": statistics.fmean(times), "step_ms_median": statistics.median(times), "gpu_ms": None,
           "compute_ms": compute, "copy_ms": 0.0, "readback_ms": 0.0, "fixed_step_ms": None, "intervention": None}
    if with_telemetry:
        out["telemetry"] = run_telemetry(w, device)
    if device.type == "cuda":
        out["copy_ms"], out["readback_ms"] = copy_ms(w), readback_ms(w)
        if compute is not None:
            out["gpu_ms"] = compute + out["copy_ms"] + out["readback_ms"]
    fixed = w.fixed()
    if fixed is not None:
        out["fixed_step_ms"] = statistics.fmean(step_times(fixed.step, device))
        out["intervention"] = f"{fixed.name}"
        del fixed
    elif w.cause == LAUNCH_BOUND.name and out["gpu_ms"] is not None:
        out["fixed_step_ms"], out["intervention"] = out["gpu_ms"], "whole step as a CUDA graph"
    return out


def expected_verdict(w, truth: dict) -> tuple[str, bool | None]:
    """(the verdict the unprofiled numbers imply, whether removing the cause confirmed it)."""
    gpu, step = truth["gpu_ms"], truth["step_ms"]
    if gpu is not None and gpu / step >= GPU_BOUND_SHARE:
        # the device verdicts: the larger share, ties to gpu_bound (as the analysis)
        copy = truth["copy_ms"] + truth.get("readback_ms", 0.0)
        return (TRANSFER_BOUND.name if copy > gpu - copy else GPU_BOUND.name), True
    # a workload meant to be GPU-bound whose GPU is idle most of the step waits for its launches
    cause = LAUNCH_BOUND.name if w.cause == GPU_BOUND.name else w.cause
    if gpu is None and w.cause in (GPU_BOUND.name, TRANSFER_BOUND.name):
        return w.cause, None
    fixed = truth["fixed_step_ms"]
    confirmed = None if fixed is None else step / fixed >= CONFIRM_SPEEDUP
    return cause, confirmed


def run_telemetry(w, device: torch.device, steps: int = 30, warmup: int = 2, budget_s: float = 8.0) -> dict | None:
    """The unprofiled steps' telemetry exactly as stepscope's trainer records it (trainer/demo/loop.py): the
    product's StepClock around each step, the means of Throughput.telemetry(). Not the truth: the truth
    (`measure`) is timed apart, and this is what a stepscope run would hand its diagnosis."""
    clock, thr = StepClock(device), Throughput(1)
    t_end = time.perf_counter() + budget_s
    clock.mark(excluded=True)
    for i in range(steps):
        w.step(clock)
        clock.mark(excluded=i + 1 < warmup)
        if i > warmup + 5 and time.perf_counter() > t_end:
            break
    thr.add(clock.drain())  # sync point: once, after the timed steps
    return as_dict(thr.telemetry())


def record_trace(w, out_dir: Path, device: torch.device, cold: bool = False) -> Path:
    """Profile 3 steps the way most users do; returns the run directory with the trace."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sched = schedule(wait=0, warmup=0, active=3, repeat=1) if cold else schedule(wait=1, warmup=1, active=3, repeat=1)
    run_dir = out_dir / w.name
    with profile(activities=acts, schedule=sched, record_shapes=True, profile_memory=True, with_stack=True,
                 on_trace_ready=tensorboard_trace_handler(str(run_dir), worker_name=w.name, use_gzip=True)) as prof:
        for _ in range(3 if cold else 5):
            w.step()
            prof.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return run_dir

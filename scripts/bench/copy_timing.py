"""A pageable host-to-device copy timed three ways, in one process (on a CUDA machine):

    python scripts/bench_copy_timing.py [--scenario pageable_copy] [--reps 3]

  ``alone``      CUDA events around the copy after a synchronize, as the verdict benchmarks' truth times it
                 (verdicts/truth.py ``copy_ms``), median of 8;
  ``in_step``    CUDA events around the same copy inside unprofiled training steps (the step's device work
                 queued after it), median of 20;
  ``traced``     the copy's device record in a torch.profiler trace of 5 steps (what the analysis reads as
                 transfer), median per step, and its runtime call's host time.
Each repeated ``--reps`` times, alternating, since a pageable copy's speed drifts with the host's. Prints JSON.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from stepscope.cli.oneline import OneLineParser


def in_step_ms(w, steps: int = 20) -> float:
    import torch

    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        w.x.copy_(w.host_x, non_blocking=w.pinned)
        w.y.copy_(w.host_y, non_blocking=w.pinned)
        b.record()
        w.gpu_part()
        times.append((a, b))
    torch.cuda.synchronize()  # sync point: once, after the timed steps
    return statistics.median(a.elapsed_time(b) for a, b in times)


def traced_ms(w, steps: int = 5) -> tuple[float, float]:
    """(the copies' device time per step, their runtime calls' host time per step), medians over the steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                w.step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")]
    corr = {e["args"].get("correlation") for e in copies}
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in corr]
    return sum(e["dur"] for e in copies) / 1e3 / steps, sum(e["dur"] for e in calls) / 1e3 / steps


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench_copy_timing.py", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="pageable_copy")
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args(argv)
    import torch

    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.holdout import HOLDOUT
    from bench.verdicts.truth import copy_ms

    if a.scenario not in WORKLOADS and a.scenario not in HOLDOUT:
        p.error(f"--scenario {a.scenario}: no such scenario (one of {', '.join([*WORKLOADS, *HOLDOUT])})")
    if a.reps < 1:
        p.error(f"--reps {a.reps}: need at least 1")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")

    w = (WORKLOADS.get(a.scenario) or HOLDOUT[a.scenario])(torch.device("cuda"))
    for _ in range(5):
        w.step()
    rows = []
    for _ in range(a.reps):
        alone = copy_ms(w)
        step = in_step_ms(w)
        device, host = traced_ms(w)
        rows.append({"alone_ms": alone, "in_step_ms": step, "traced_device_ms": device, "traced_call_ms": host})
        print(json.dumps(rows[-1]), flush=True)
    return 0

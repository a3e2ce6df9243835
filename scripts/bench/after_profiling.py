"""Does a loop run slower after torch.profiler has recorded a cycle, and what brings its speed back?

    python scripts/bench_after_profiling.py --out OUT                                  # GPU scenarios
    python scripts/bench_after_profiling.py --out OUT --only resnet18_bs32 --modes default teardown
    python scripts/bench_after_profiling.py --out OUT --device cpu --only tiny_ops     # a smoke run

For each scenario of the verdict suite (verdicts/gpu.py) and each mode, a fresh process: the step warmed up,
``BEFORE`` steps timed, one profiling cycle recorded the way the suite's loops record it (CPU and CUDA
activities, shapes, memory, stacks; warmup 1, active 3, written by torch's tensorboard_trace_handler), then
``AFTER`` steps timed. Steps are timed boundary to boundary with CUDA events (verdicts/truth.py step_times).
The modes, each set before torch starts:

  default      the environment as it comes;
  teardown     TEARDOWN_CUPTI=1: Kineto finalizes CUPTI when the cycle ends (its default depends on the
               torch build; without it CUPTI stays attached to every later kernel launch);
  cpu_only     the cycle records CPU activity alone (CUPTI is never started): the host side's own residue.

A step that is slower after the cycle than before it, in the default mode and not with teardown, means the
profiler leaves a cost behind in the loop; a measurement of "the loop without the profiler" taken after a
cycle then describes the loop with that cost. Writes OUT/after_profiling.json (rewritten after each run) and
prints a Markdown table. Bad flags: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BEFORE = AFTER = 60
WARM = 20
MODES = {"default": {}, "teardown": {"TEARDOWN_CUPTI": "1"}, "cpu_only": {}}
SCENARIOS = ("resnet18_bs32", "host_python", "tiny_ops", "gpt_large")


def one(name: str, mode: str, device_name: str) -> dict:
    """This process's run of ``name`` in ``mode`` (the environment was set by the caller)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.truth import step_times

    device = torch.device(device_name)
    torch.manual_seed(0)
    w = WORKLOADS[name](device)
    before = step_times(w.step, device, warmup=WARM, steps=BEFORE, budget_s=30.0)
    acts = [ProfilerActivity.CPU]
    if device.type == "cuda" and mode != "cpu_only":
        acts.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as tmp:
        with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(tmp), record_shapes=True, profile_memory=True,
                     with_stack=True) as prof:
            for _ in range(5):
                w.step()
                prof.step()
    after = step_times(w.step, device, warmup=2, steps=AFTER, budget_s=30.0)
    return {"scenario": name, "mode": mode, "env": {k: os.environ.get(k) for k in ("TEARDOWN_CUPTI",)},
            "before_ms": statistics.fmean(before), "after_ms": statistics.fmean(after),
            "before_median_ms": statistics.median(before), "after_median_ms": statistics.median(after),
            "after_over_before": statistics.fmean(after) / statistics.fmean(before), "torch": torch.__version__}


def table(rows: list[dict]) -> str:
    out = ["| scenario | mode | before ms | after ms | after / before |", "|---|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['scenario']} | {r['mode']} | – | – | {r['error']} |")
        else:
            out.append(f"| {r['scenario']} | {r['mode']} | {r['before_ms']:.2f} | {r['after_ms']:.2f} | "
                       f"{r['after_over_before']:.3f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="bench_after_profiling.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", nargs="+", metavar="SCENARIO", default=list(SCENARIOS))
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for each run's process")
    p.add_argument("--one", nargs=2, metavar=("SCENARIO", "MODE"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], a.device)))
        return 0
    from bench.verdicts.gpu import WORKLOADS

    unknown = [n for n in a.only if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; valid: {', '.join(WORKLOADS)}")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.only:
        for mode in a.modes:
            env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"} | MODES[mode]
            cmd = [sys.executable, "-m", "bench.after_profiling", "--out", str(a.out), "--device",
                   a.device, "--one", name, mode]
            print(f"[{time.strftime('%H:%M:%S')}] {name} {mode} ...", file=sys.stderr, flush=True)
            try:
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
                lines = r.stdout.strip().splitlines()
                row = json.loads(lines[-1]) if r.returncode == 0 and lines else {
                    "scenario": name, "mode": mode, "error": f"exit {r.returncode}: {r.stderr.strip()[-300:]}"}
            except subprocess.TimeoutExpired:
                row = {"scenario": name, "mode": mode, "error": f"over {a.timeout:g} s"}
            rows.append(row)
            (a.out / "after_profiling.json").write_text(json.dumps(rows, indent=1) + "\n")
    md = table(rows)
    (a.out / "after_profiling.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

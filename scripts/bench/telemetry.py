"""The cost of the trainer's per-step telemetry (trainer/demo/timing.py) on the host, without a model.

    python scripts/bench_telemetry.py [--steps 20000] [--repeat 5]

Times a loop of bare step boundaries (`StepClock.mark`, what throughput needs) against the same loop with
every phase recorded (begin, batch_ready, copy, dispatched: perf_counter and process_time reads), on the CPU,
and prints the median µs per step of each and their difference, the telemetry's own cost.
"""

from __future__ import annotations

import statistics
import time

import torch
from stepscope.cli.oneline import OneLineParser
from stepscope.demo.timing import StepClock


def per_step_us(steps: int, phases: bool) -> float:
    clock = StepClock(torch.device("cpu"))
    clock.mark()
    t0 = time.perf_counter()
    for _ in range(steps):
        if phases:
            clock.begin()
            clock.batch_ready()
            clock.copy(lambda: None)
            clock.dispatched()
        clock.mark()
    elapsed = time.perf_counter() - t0
    clock.drain()
    return elapsed / steps * 1e6


def main() -> None:
    p = OneLineParser(prog="bench_telemetry.py", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    if a.steps < 1 or a.repeat < 1:
        p.error(f"--steps and --repeat must be at least 1; got {a.steps} and {a.repeat}")
    bare, full = [], []
    for _ in range(a.repeat):  # alternated, so that drift in the host's speed hits both alike
        bare.append(per_step_us(a.steps, False))
        full.append(per_step_us(a.steps, True))
    b, f = statistics.median(bare), statistics.median(full)
    print(f"step boundaries only: {b:.2f} us/step; with every phase: {f:.2f} us/step; telemetry: {f - b:.2f} us/step "
          f"(median of {a.repeat} x {a.steps} steps)")


if __name__ == "__main__":
    main()

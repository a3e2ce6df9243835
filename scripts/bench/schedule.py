"""What stepscope.schedule and stepscope.loader cost a loop per step, against torch.profiler.schedule.

    python scripts/bench_schedule.py                 # ns per call, median of interleaved rounds
    python scripts/bench_schedule.py --json

Each variant is called for `--steps` consecutive steps of the wait phase (what the profiler calls between
cycles), in `--rounds` rounds interleaved across variants so that host drift hits all alike; the table gives
the median round's ns per call, less an empty Python call's (the loop and the call itself). Variants: torch's
own schedule (what any schedule costs), stepscope.schedule (timing every step), with capture_on_slowdown, with
a capture file, and stepscope.loader's cost per batch over a plain iterator.

Called back to back, the schedule's steps are its own sub-microsecond calls, whose jitter is often more than
1.5x their median: capture_on_slowdown then sees slowdowns all the time (hundreds a round, most of them over
the hourly limit) and judges and captures them. The "1 ms steps" rows give the schedule a clock that advances
1 ms a call, as a loop's steady steps would (a C iterator, some 15 ns a call cheaper than perf_counter_ns, in
both rows alike): what the detector costs a loop that is not slowing down is the difference of the two.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from stepscope import loader, schedule
from stepscope.capture import schedule as schedule_module


def per_call_ns(fn, steps: int) -> float:
    t0 = time.perf_counter_ns()
    for k in range(1, steps + 1):
        fn(k)
    return (time.perf_counter_ns() - t0) / steps


def steady_ns(make, steps: int) -> float:
    """per_call_ns of the schedule `make()` returns, with a clock that advances 1 ms a call."""
    real = schedule_module._clock
    schedule_module._clock = itertools.count(0, 1_000_000).__next__
    try:
        return per_call_ns(make(), steps)
    finally:
        schedule_module._clock = real


def loader_ns(steps: int) -> float:
    sched = schedule(wait=10**9, warmup=1, active=1)
    items = range(steps)
    t0 = time.perf_counter_ns()
    for _ in loader(items, schedule=sched):
        pass
    wrapped = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    for _ in items:
        pass
    return (wrapped - (time.perf_counter_ns() - t0)) / steps


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="bench_schedule.py", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.steps < 1000 or a.rounds < 1:
        p.error("--steps must be at least 1000 and --rounds at least 1")
    import torch  # after the flags: a bad flag is answered at once

    flag = Path(tempfile.mkdtemp()) / ".capture"

    def empty(k):
        return None

    def plain():
        return schedule(wait=10**9, warmup=1, active=1)

    def slowdown():
        return schedule(wait=10**9, warmup=1, active=1, capture_on_slowdown=True)

    variants = {
        "empty call": lambda: empty,
        "torch.profiler.schedule": lambda: torch.profiler.schedule(wait=10**9, warmup=1, active=1),
        "stepscope.schedule": plain,
        "  capture_on_slowdown": slowdown,
        "  capture_file": lambda: schedule(wait=10**9, warmup=1, active=1, capture_file=flag),
    }
    steady = {"stepscope.schedule, 1 ms steps": plain, "  capture_on_slowdown, 1 ms steps": slowdown}
    rounds: dict[str, list[float]] = {name: [] for name in [*variants, *steady, "stepscope.loader (per batch)"]}
    for _ in range(a.rounds):
        for name, make in variants.items():
            rounds[name].append(per_call_ns(make(), a.steps))
        for name, make in steady.items():
            rounds[name].append(steady_ns(make, a.steps))
        rounds["stepscope.loader (per batch)"].append(loader_ns(a.steps))
    base = statistics.median(rounds["empty call"])
    out = {name: statistics.median(v) - (base if name != "empty call" and name in {*variants, *steady} else 0.0)
           for name, v in rounds.items()}
    if a.json:
        print(json.dumps({"ns_per_call": out, "steps": a.steps, "rounds": a.rounds}))
        return 0
    print(f"{'variant':<32} {'ns/call':>9}   (median of {a.rounds} rounds of {a.steps} calls; "
          "less an empty call's, which is the first row)")
    for name, ns in out.items():
        print(f"{name:<32} {ns:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare two runs, aware of run-to-run noise: did the step get slower or faster, and where?

    stepscope diff logs/before logs/after                     # step time, busy, breakdown, operators
    stepscope diff logs/main logs/pr --fail-above 5%          # a CI gate: exit 1 on a regression beyond 5%
    stepscope diff logs/a logs/b --json                       # the comparison as one JSON document
    stepscope diff logs/a logs/b --confidence 99%             # a wider interval: fewer false alarms
    stepscope diff logs/a logs/b --run-noise 3%               # a quiet machine: runs drift less
    stepscope diff logs/main_1 logs/main_2 logs/main_3 --vs logs/pr_1 logs/pr_2 logs/pr_3   # repeated runs

RUN_A and RUN_B are what `stepscope analyze` takes (a run folder, any folder of traces, a trace file), or a
run of `stepscope train` made without --profile (its run.json's timed steps). With ``--vs``, every run before
it is side A and every run after it side B: repeated runs of each side (alternated on one machine), whose
spread measures the drift between runs instead of ``--run-noise``; on a machine whose runs drift by 10%, one run
a side cannot tell a 20% change from that drift, and four a side can (BENCHMARKS.md). The verdict line is the
step-time ratio B/A with its 95% (``--confidence``) confidence interval (report/diff.py: Welch on blocks of
each run's steps, widened by the drift between runs, ``--run-noise``), on the trainer's unprofiled timed steps
from run.json when both runs have them, else the traced steps; "no significant change" when the interval holds
1.0. Beside it: the differences between the two runs' configurations (run.json), e.g. data.batch_size 64 -> 128.
``--fail-above P%`` exits 1 when B is slower than A beyond P% for certain, that is when the interval's low
end is above 1 + P/100; otherwise 0. Where a run records that other processes on the machine slowed it
(run.json's record of its CPUs), the interval is first widened by as much as they could have (report/diff.py).
Bad input (no such run, no traces, a malformed --fail-above): one line on stderr, exit code 2. Torch-free.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.report.diff import RUN_NOISE, compare_sides
from stepscope.trace.errors import TraceError, print_error
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.workers import Workers


def percent(text: str) -> float:
    """'5%' or '5' -> 0.05."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError(f"{text!r} is not a percentage such as 5%") from None
    if not 0 <= value < 1000:
        raise ValueError(f"{text!r}: use 0% to 1000%")
    return value / 100


def _ms(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def _value(x) -> str:
    return "none" if x is None else str(x)


def render(d: dict) -> str:
    a, b = d["a"], d["b"]
    width = max(len(a["run"]), len(b["run"]), 8)
    lines = [d["summary"]]
    if d.get("config_changes"):
        lines.append("  config differs: " + ", ".join(f"{c['key']} {_value(c['a'])} -> {_value(c['b'])}"
                                                     for c in d["config_changes"]))
    lines += ["", f"  {'run':<{width}}  {'verdict':<20} {'step ms':>9} {'profiled':>9} {'GPU busy':>9} {'steps':>6}"]
    for side in (a, b):
        step = side["step_ms"] if side["step_ms"] is not None else side["mean_step_ms"]
        lines.append(f"  {side['run']:<{width}}  {side['verdict'] or '-':<20} {_ms(step):>9} "
                     f"{_ms(side['profiled_step_ms']):>9} {_pct(side['gpu_busy_pct']):>9} {side['steps']:>6}")
    for side in (a, b):
        if len(side["runs"]) > 1:
            lines.append(f"  {side['run']}: {', '.join(side['runs'])}")
    lines += ["", f"  per-step time source: {d['source']}"]
    if not d["breakdown"]:
        lines.append("  breakdown and operators: only where both runs were profiled")
    else:
        lines += ["", "  breakdown, ms per step:"]
    for row in d["breakdown"]:
        lines.append(f"    {row['bucket']:<16} {row['a_ms']:>9.2f} -> {row['b_ms']:>9.2f}  "
                     f"({row['b_ms'] - row['a_ms']:+.2f})")
    if d["ops"]:
        lines += ["", "  operators and kernels that changed most, ms per step (0.00: not run at all):"]
        for row in d["ops"]:
            name = row["name"] if len(row["name"]) <= 60 else row["name"][:57] + "..."
            lines.append(f"    {name:<60} {_ms(row['a_ms']):>9} -> {_ms(row['b_ms']):>9}  ({row['delta_ms']:+.2f})")
    m = d.get("memory")
    if m is not None:
        head = "" if m["headroom_delta_pct"] is None else (
            f", headroom {m['a']['headroom_pct']:.1f}% -> {m['b']['headroom_pct']:.1f}%")
        lines += ["", f"  memory: peak allocated {m['a']['peak_allocated_gib']:.2f} -> {m['b']['peak_allocated_gib']:.2f} "
                  f"GiB ({m['peak_allocated_delta_gib']:+.2f}; steps vary by {m['noise_gib']:.2f}: "
                  f"{'a change' if m['significant'] else 'within the noise'}), reserved "
                  f"{m['a']['peak_reserved_gib']:.2f} -> {m['b']['peak_reserved_gib']:.2f} GiB{head}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "stepscope diff") -> int:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                   help="RUN_A RUN_B: the baseline run and the run compared with it; with --vs, the baseline's runs")
    p.add_argument("--vs", type=Path, nargs="+", metavar="RUN_B", default=None,
                   help="the compared side's runs, each against all the RUNs before --vs (repeated runs of each "
                        "side: their spread is the noise)")
    p.add_argument("--fail-above", metavar="P%", default=None,
                   help="exit 1 when RUN_B's step is slower than RUN_A's by more than P%% beyond the noise")
    p.add_argument("--confidence", metavar="C%", default="95%",
                   help="the confidence interval's level (default 95%%; a 95%% interval misses 1.0 for about "
                        "one pair of identical runs in twenty)")
    p.add_argument("--run-noise", metavar="P%", default=f"{RUN_NOISE:.0%}",
                   help="the drift of one run's mean step between runs of one configuration, as a standard "
                        f"deviation (default {RUN_NOISE * 100:.0f}%%, measured on a shared 2-core machine; 0%% "
                        "trusts the steps' own spread alone; unused with several runs a side)")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    a = p.parse_args(argv)
    if a.vs is None and len(a.runs) != 2:
        p.error(f"give RUN_A RUN_B, or the runs of each side as RUN_A1 RUN_A2 ... --vs RUN_B1 RUN_B2 ... "
                f"({len(a.runs)} runs and no --vs)")
    side_a, side_b = (a.runs, a.vs) if a.vs is not None else ([a.runs[0]], [a.runs[1]])
    try:
        limit = None if a.fail_above is None else percent(a.fail_above)
    except ValueError as e:
        p.error(f"--fail-above: {e}")
    try:
        confidence = percent(a.confidence)
        if not 0.5 <= confidence < 1:
            raise ValueError(f"{a.confidence!r}: use 50% to 99.9%")
    except ValueError as e:
        p.error(f"--confidence: {e}")
    try:
        run_noise = percent(a.run_noise)
        if run_noise >= 1:
            raise ValueError(f"{a.run_noise!r}: use 0% to 99%")
    except ValueError as e:
        p.error(f"--run-noise: {e}")
    try:
        with gc_paused():  # two paths through the door; a command may fork
            d = compare_sides(side_a, side_b, [str(r) for r in side_a], [str(r) for r in side_b], confidence,
                              run_noise, Workers.local())
    except TraceError as e:
        print_error(f"{prog}: error: {e}")
        return 2
    regression = limit is not None and d["significant"] and d["low"] > 1 + limit
    d["fail_above"] = limit
    d["regression"] = regression
    print(json.dumps(d, indent=1) if a.json else render(d))
    if regression:
        print(f"{prog}: regression: {d['b']['run']} is slower than {d['a']['run']} by more than {limit:.0%} "
              f"(step ratio at least {d['low']:.3f}x)", file=sys.stderr)
        return 1
    return 0

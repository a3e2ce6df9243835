"""Native vs custom elementwise ops as users run them: one unprofiled `train.py` process per op set, many
alternating pairs, so that the difference between op sets can be told from the drift between processes.

    python scripts/bench_ops_processes.py --pairs 16 [--steps 250] [--arch resnet18] [--batch-size 128]
                                          [--compile MODE] [--logdir /tmp/opp] [--out pairs.json]

Pair i runs native then custom when i is even, custom then native when it is odd. Each run is
`scripts/train.py --ops {native,custom} --steps N` without --profile; its figures are run.json's
`final.median_step_ms` and the telemetry of its timed steps (host dispatch, data wait and input copy, each a
median per step). Writes one JSON line per run to --logdir/runs.jsonl as it goes, then prints one row per
pair (native ms, custom ms, ratio) and the summary: the median of the per-pair ratios, how many pairs had
custom slower, and the two-sided sign-test p-value of that count (the chance of a split at least that uneven
if neither op set were faster). --out writes the summary as JSON. An interrupted run keeps runs.jsonl.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.demo.config import ARCHS, COMPILE_MODES
from stepscope.demo.launch import TrainFailed, checkout_train, run_train

from bench import REPO
from bench.out_file import writable_file_error

OPS = ("native", "custom")
PHASES = ("step_ms", "dispatch_ms", "data_ms", "copy_host_ms", "cpu_ms")


def sign_test_p(slower: int, pairs: int) -> float:
    """Two-sided binomial sign test: P(a split at least as uneven as ``slower`` of ``pairs``) at p = 1/2."""
    k = max(slower, pairs - slower)
    tail = sum(math.comb(pairs, j) for j in range(k, pairs + 1)) / 2 ** pairs
    return min(1.0, 2 * tail)


def summarize(runs: list[dict]) -> dict:
    """Pairs from the runs (each with "pair", "ops", "median_step_ms" and "telemetry")."""
    by_pair: dict[int, dict] = {}
    for r in runs:
        by_pair.setdefault(r["pair"], {})[r["ops"]] = r
    rows = []
    for i in sorted(by_pair):
        p = by_pair[i]
        if set(p) != set(OPS):
            continue
        n, c = p["native"], p["custom"]
        rows.append({"pair": i, "first": OPS[i % 2], "native_ms": n["median_step_ms"],
                     "custom_ms": c["median_step_ms"], "ratio": c["median_step_ms"] / n["median_step_ms"],
                     "dispatch_ratio": c["telemetry"]["dispatch_ms"] / n["telemetry"]["dispatch_ms"]})
    slower = sum(r["ratio"] > 1 for r in rows)
    return {"pairs": rows, "complete_pairs": len(rows), "custom_slower": slower,
            "median_ratio": statistics.median(r["ratio"] for r in rows) if rows else None,
            "median_dispatch_ratio": statistics.median(r["dispatch_ratio"] for r in rows) if rows else None,
            "sign_test_p": sign_test_p(slower, len(rows)) if rows else None,
            "median_phases": {ops: {ph: statistics.median(r["telemetry"][ph] for r in runs if r["ops"] == ops)
                                    for ph in PHASES} for ops in OPS if any(r["ops"] == ops for r in runs)}}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench_ops_processes.py", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--arch", default="resnet18", choices=ARCHS)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--compile", dest="compile_mode", default=None, choices=COMPILE_MODES)
    p.add_argument("--logdir", type=Path, default=Path("/tmp/stepscope-ops-processes"))
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.pairs < 1 or a.steps < 30 or a.batch_size < 1:
        p.error(f"need --pairs >= 1, --steps >= 30 and --batch-size >= 1; got {a.pairs}, {a.steps}, {a.batch_size}")
    if a.out is not None and (problem := writable_file_error(a.out, "--out")):
        p.error(problem)
    a.logdir.mkdir(parents=True, exist_ok=True)
    journal = a.logdir / "runs.jsonl"
    journal.write_text("")
    train = checkout_train(REPO)
    runs = []
    try:
        for i in range(a.pairs):
            for ops in (OPS if i % 2 == 0 else OPS[::-1]):
                name = f"p{i}-{ops}"
                args = ["--arch", a.arch, "--batch-size", str(a.batch_size), "--steps", str(a.steps),
                        "--ops", ops, "--logdir", str(a.logdir), "--run-name", name, "--log-every", "50"]
                if a.compile_mode:
                    args += ["--compile", a.compile_mode]
                t0 = time.perf_counter()
                final = run_train(args, train)["final"]
                run = {"pair": i, "ops": ops, "median_step_ms": final["median_step_ms"],
                       "telemetry": final["telemetry"], "wall_s": round(time.perf_counter() - t0, 1)}
                runs.append(run)
                with journal.open("a") as f:
                    f.write(json.dumps(run) + "\n")
                print(f"pair {i} {ops}: {run['median_step_ms']:.3f} ms/step, dispatch "
                      f"{final['telemetry']['dispatch_ms']:.3f} ms ({run['wall_s']} s)", flush=True)
    except TrainFailed as e:
        print(f"bench_ops_processes.py: a run failed: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("bench_ops_processes.py: interrupted; summarising the pairs so far", file=sys.stderr)
    s = summarize(runs)
    for r in s["pairs"]:
        print(f"| {r['pair']} | {r['first']} | {r['native_ms']:.3f} | {r['custom_ms']:.3f} | {r['ratio']:.3f} | "
              f"{r['dispatch_ratio']:.3f} |")
    if s["complete_pairs"]:
        print(f"{a.arch} batch {a.batch_size} {a.compile_mode or 'eager'}: {s['complete_pairs']} pairs, custom slower "
              f"in {s['custom_slower']}, median custom/native {s['median_ratio']:.3f}, median dispatch ratio "
              f"{s['median_dispatch_ratio']:.3f}, sign test p = {s['sign_test_p']:.3g}")
    if a.out:
        a.out.write_text(json.dumps(s, indent=2) + "\n")
    return 0 if s["complete_pairs"] == a.pairs else 1


if __name__ == "__main__":
    sys.exit(main())

"""How often `stepscope diff` calls two runs of one configuration different, and how often it misses a real change.

    python scripts/diff_noise.py /tmp/diffnoise                  # 20 same-config pairs, 10 changed pairs, scored
    python scripts/diff_noise.py /tmp/diffnoise --score-only     # score the runs already in the folder again
    python scripts/diff_noise.py /tmp/diffnoise --pairs 4 --changes 2 --steps 30   # a quick look
    python scripts/diff_noise.py /tmp/diffnoise4 --runs 4 --steps 200   # four runs a side (diff A1.. --vs B1..)

Results: BENCHMARKS.md, "`stepscope diff`: false and true alarms".

One chain of runs, one after the other: ``--pairs + 1`` runs of a baseline, and after each of the first
``--changes`` baselines one run with one change that matters on a CPU (batch size, or the model). Each two
consecutive baselines are a same-config pair (B ran after A, with at most one changed run between them); each
changed run is scored against the baseline just before it, so both kinds of pair meet the machine's drift
alike. Every pair goes through the real command, ``stepscope diff A B --json --fail-above 5%``. A same-config
pair is a false alarm when diff calls it significant, and a gate failure when the command exits 1; a changed
pair is detected when diff calls it significant in the right direction (slower for a bigger batch or model,
faster for a smaller batch).

With ``--runs N`` (N > 1) each pair has N runs a side, compared by ``stepscope diff A1 .. AN --vs B1 .. BN``.
The chain is one segment a pair: 2N runs of the baseline, alternately side A and side B of that same-config
pair, and, in the first ``--changes`` segments, N runs with the change, each after one of the first N
baselines; those N baselines are the change's side A. Every side's runs are thus interleaved with the other's.

The runs are small CPU runs (LeNet on synthetic data, no profiler: diff reads run.json's timed steps). The
machine's load average is recorded at each run's start, and each run's own record of what it shared its CPUs with
is shown (where a run was slowed by other processes, diff widens its interval by as much): on a shared machine the load is the noise being
measured. Prints a Markdown summary and writes ``results.json`` in the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BASE = ["--arch", "lenet", "--batch-size", "64"]
# (name, train arguments replacing BASE's, expected direction of B over A: +1 slower, -1 faster)
CHANGES = [
    ("batch 128", ["--arch", "lenet", "--batch-size", "128"], +1),
    ("batch 32", ["--arch", "lenet", "--batch-size", "32"], -1),
    ("batch 96", ["--arch", "lenet", "--batch-size", "96"], +1),
    ("batch 16", ["--arch", "lenet", "--batch-size", "16"], -1),
    ("resnet8", ["--arch", "resnet8", "--batch-size", "64"], +1),
    ("batch 192", ["--arch", "lenet", "--batch-size", "192"], +1),
    ("batch 24", ["--arch", "lenet", "--batch-size", "24"], -1),
    ("batch 256", ["--arch", "lenet", "--batch-size", "256"], +1),
    ("batch 40", ["--arch", "lenet", "--batch-size", "40"], -1),
    ("batch 160", ["--arch", "lenet", "--batch-size", "160"], +1),
]


def train(out: Path, name: str, args: list[str], steps: int) -> dict:
    run = out / name
    if (run / "run.json").is_file():
        return json.loads((run / "meta.json").read_text()) if (run / "meta.json").is_file() else {}
    load = os.getloadavg()[0]
    t0 = time.time()
    cmd = ["stepscope", "train", *args, "--steps", str(steps), "--synthetic-eval-size", "256",
           "--logdir", str(out), "--run-name", name]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    meta = {"cmd": " ".join(cmd), "load_at_start": load, "wall_s": time.time() - t0,
            "started": time.strftime("%H:%M:%S", time.gmtime(t0))}
    (run / "meta.json").write_text(json.dumps(meta))
    print(f"{name}: {meta['wall_s']:.0f} s, load {load:.1f}", file=sys.stderr, flush=True)
    return meta


def _name(runs: list[Path]) -> str:
    return runs[0].name if len(runs) == 1 else f"{runs[0].name}..{runs[-1].name}"


def diff(a: list[Path], b: list[Path], extra: list[str]) -> dict:
    sides = [*map(str, a), *map(str, b)] if len(a) == len(b) == 1 else [*map(str, a), "--vs", *map(str, b)]
    p = subprocess.run(["stepscope", "diff", *sides, "--json", "--fail-above", "5%", *extra],
                       capture_output=True, text=True, timeout=600)
    if p.returncode not in (0, 1):
        raise SystemExit(f"stepscope diff {' '.join(sides)}: exit {p.returncode}: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    sharing = d.get("cpu_sharing") or {}
    return {"a": _name(a), "b": _name(b), "ratio": d["ratio"], "low": d["low"], "high": d["high"],
            "significant": d["significant"], "exit": p.returncode, "slowed": bool(d.get("slowed_by_others")),
            "others_cpu_pct": [sharing.get(k, {}).get("others_cpu_pct") for k in ("a", "b")],
            "waited_cpu_pct": [sharing.get(k, {}).get("waited_cpu_pct") for k in ("a", "b")]}


def layout(pairs: int, changes: int, runs: int) -> tuple[list[str], list[tuple], list[tuple]]:
    """The runs in the order they are made (name, and the index of its change in CHANGES or None for the
    baseline), the same-config pairs and the changed pairs (each a pair of lists of run names, side A and side
    B), as the module docstring lays them out."""
    if runs == 1:
        order = [(f"base{i:02d}", None) for i in range(pairs + 1)]
        for i in reversed(range(min(changes, pairs + 1))):
            order.insert(i + 1, (f"change{i:02d}", i))
        return (order, [([f"base{i:02d}"], [f"base{i + 1:02d}"]) for i in range(pairs)],
                [([f"base{i:02d}"], [f"change{i:02d}"]) for i in range(changes)])
    order, same, changed = [], [], []
    for i in range(pairs):
        base = [f"base{i:02d}_{j}" for j in range(2 * runs)]
        change = [f"change{i:02d}_{j}" for j in range(runs)] if i < changes else []
        for j, name in enumerate(base):
            order += [(name, None), (change[j], i)] if j < len(change) else [(name, None)]
        same.append((base[0::2], base[1::2]))
        if change:
            changed.append((base[:runs], change))
    return order, same, changed


def _paths(out: Path, names: list[str]) -> list[Path]:
    return [out / n for n in names]


def _done(out: Path, names: list[str]) -> bool:
    return all((out / n / "run.json").is_file() for n in names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--pairs", type=int, default=20, help="same-config pairs (default 20)")
    ap.add_argument("--changes", type=int, default=10, help="changed pairs (default 10, at most 10)")
    ap.add_argument("--steps", type=int, default=40, help="training steps a run (default 40)")
    ap.add_argument("--runs", type=int, default=1, help="runs a side (default 1: each pair is two runs)")
    ap.add_argument("--score-only", action="store_true", help="score the runs in OUT, train nothing")
    ap.add_argument("--diff-args", default="", help="extra arguments to stepscope diff, e.g. '--confidence 99%%'")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    changes = CHANGES[:a.changes]
    order, same_pairs, change_pairs = layout(a.pairs, len(changes), a.runs)
    if not a.score_only:
        for name, change in order:
            train(a.out, name, BASE if change is None else changes[change][1], a.steps)
    extra = a.diff_args.split()
    same = [diff(_paths(a.out, x), _paths(a.out, y), extra) for x, y in same_pairs if _done(a.out, x + y)]
    changed = []
    for i, (x, y) in enumerate(change_pairs):
        if _done(a.out, x + y):
            label, _, way = changes[i]
            d = diff(_paths(a.out, x), _paths(a.out, y), extra)
            d.update(change=label, detected=bool(d["significant"] and (d["ratio"] > 1) == (way > 0)))
            changed.append(d)
    loads = [json.loads(m.read_text())["load_at_start"] for m in sorted(a.out.glob("*/meta.json"))]
    result = {"same": same, "changed": changed, "load_at_start": loads, "diff_args": extra,
              "runs_a_side": a.runs, "steps": a.steps}
    (a.out / "results.json").write_text(json.dumps(result, indent=1))
    print("| pair | B/A | interval | significant | --fail-above 5% exit | others' CPU % (A, B) | "
          "waited for a CPU % (A, B) |\n|---|---|---|---|---|---|---|")

    def pct(values: list) -> str:
        return ", ".join("?" if v is None else f"{v:.0f}" for v in values)

    for d in same + changed:
        label = d.get("change", "same config")
        verdict = ("yes" if d["significant"] else "no") + (" (widened for load)" if d["slowed"] else "")
        print(f"| {d['a']} vs {d['b']} ({label}) | {d['ratio']:.3f}x | {d['low']:.3f}x-{d['high']:.3f}x | "
              f"{verdict} | {d['exit']} | {pct(d['others_cpu_pct'])} | {pct(d['waited_cpu_pct'])} |")
    print(f"\nsame-config pairs: {sum(d['significant'] for d in same)} of {len(same)} significant, "
          f"{sum(d['exit'] == 1 for d in same)} failed --fail-above 5%, "
          f"{sum(d['slowed'] for d in same)} widened for other processes' load")
    print(f"changed pairs: {sum(d['detected'] for d in changed)} of {len(changed)} detected, "
          f"{sum(d['slowed'] for d in changed)} widened")
    if loads:
        print(f"load average at the runs' starts: {min(loads):.1f} to {max(loads):.1f} (2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Profiler overhead: the same training run with and without `--profile`, in pairs, as separate processes.

    python scripts/profiler_overhead.py --arch resnet18 --batch-size 128 --steps 600 --pairs 6   # one GPU
    python scripts/profiler_overhead.py --concurrent --pairs 4 ...     # 2 GPUs: each pair runs side by side
    python scripts/profiler_overhead.py --device cpu --arch resnet8 --batch-size 32 --steps 60 --pairs 1

Each run is `scripts/train.py [--profile] ...` with the default profiler schedule; its number is run.json's
`final.mean_step_ms`, the mean over the steps that count towards throughput (warm-up, profiled and
trace-export steps excluded, as docs/training.md says). Pairs alternate which run goes first, so a slow drift of the
machine does not favour one side. With `--concurrent` the two runs of a pair start together, one per GPU
(swapping GPUs from pair to pair), so that host noise hits both at once.

Prints one row per pair (plain ms, profiled ms, ratio; a ratio more than 50% from 1 is marked "noise?") and the
summary: the median and the mean of the pair ratios, and the overhead they give, with a warning line when the
pairs' spread exceeds the median overhead. Writes overhead.json and overhead.md next to the runs.
Both sides' train.py flags go through the trainer's own checks first: a bad value (or a step kind this machine
cannot run) is one line on stderr, exit code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.demo.config import ConfigError, plain_name
from stepscope.demo.launch import checkout_train, last_line, read_run
from stepscope.demo.run_dir import create_result_dir

from bench import REPO

STEP_KINDS = {"eager": [], "compile": ["--compile", "reduce-overhead"], "cuda-graphs": ["--cuda-graphs"]}
SIDES = ("plain", "profiled")
NOISY_PAIR = 0.5  # a pair whose runs are more than 50% apart measures the machine, not the profiler


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="profiler_overhead.py", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--step-kind", default="eager", choices=list(STEP_KINDS))
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--concurrent", action="store_true", help="run each pair side by side on 2 GPUs")
    p.add_argument("--logdir", type=Path, default=REPO / "logs")
    p.add_argument("--name", default=None, help="folder under --logdir (default overhead-<timestamp>)")
    a = p.parse_args(argv)
    if a.pairs < 1:
        p.error(f"--pairs {a.pairs} must be at least 1")
    if a.steps < 30:
        p.error(f"--steps {a.steps} is too few: the default profiler schedule needs 20 and timing needs more; use >= 30")
    return a


def check_possible(a: argparse.Namespace) -> None:
    """--name and --concurrent here; both sides' train.py flags by the trainer's own validation (what needs no
    torch first, so that a typo is answered at once)."""
    from stepscope.demo.cli import check_before_torch, parse_and_check

    plain_name("--name", a.name)
    root = a.logdir / a.name
    for profiled in (False, True):
        check_before_torch(train_cmd(a, root, "check", profiled)[2:], prog="profiler_overhead.py")
    import torch

    gpus = torch.cuda.device_count()
    if a.concurrent and (a.device == "cpu" or gpus < 2):
        raise ConfigError(f"--concurrent needs 2 GPUs, {gpus} visible; drop --concurrent")
    root = a.logdir / a.name  # not created yet: the checks only need its nearest existing parent to be writable
    for profiled in (False, True):
        parse_and_check(train_cmd(a, root, "check", profiled)[2:], torch.cuda.is_available(),
                        prog="profiler_overhead.py")


def train_cmd(a: argparse.Namespace, root: Path, name: str, profiled: bool) -> list[str]:
    return [*checkout_train(REPO), *(["--profile"] if profiled else []),
            "--arch", a.arch, "--batch-size", str(a.batch_size), "--steps", str(a.steps), "--device", a.device,
            "--log-every", "50", "--logdir", str(root), "--run-name", name, *STEP_KINDS[a.step_kind]]


def start(cmd: list[str], gpu: int | None) -> subprocess.Popen:
    env = dict(os.environ) if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def result(root: Path, name: str, proc: subprocess.Popen) -> dict:
    _, err = proc.communicate()
    if proc.returncode != 0:
        return {"run": name, "error": last_line(err, proc.returncode)}
    final = read_run(["--logdir", str(root), "--run-name", name])["final"]
    return {"run": name, "mean_ms": final["mean_step_ms"], "median_ms": final["median_step_ms"],
            "timed_steps": final["timed_steps"]}


def run_pair(a: argparse.Namespace, root: Path, i: int) -> dict:
    order = SIDES if i % 2 == 0 else SIDES[::-1]  # alternate which side runs (or sits on GPU 0) first
    names = {side: f"{side}-{i}" for side in SIDES}
    out = {"pair": i, "order": list(order)}
    if a.concurrent:
        procs = {side: start(train_cmd(a, root, names[side], side == "profiled"), gpu) for gpu, side in enumerate(order)}
        out.update({side: result(root, names[side], procs[side]) for side in order})
        out["gpus"] = {side: gpu for gpu, side in enumerate(order)}
    else:
        for side in order:
            out[side] = result(root, names[side], start(train_cmd(a, root, names[side], side == "profiled"), None))
    if "error" not in out["plain"] and "error" not in out["profiled"]:
        out["ratio"] = out["profiled"]["mean_ms"] / out["plain"]["mean_ms"]
    return out


def summarize(pairs: list[dict]) -> dict:
    ratios = [p["ratio"] for p in pairs if "ratio" in p]
    if not ratios:
        return {"pairs": 0}
    spread_pct = 100 * (max(ratios) - min(ratios))  # in percentage points of overhead
    return {"pairs": len(ratios), "median_ratio": statistics.median(ratios), "mean_ratio": statistics.fmean(ratios),
            "min_ratio": min(ratios), "max_ratio": max(ratios),
            "overhead_pct_median": 100 * (statistics.median(ratios) - 1),
            "overhead_pct_mean": 100 * (statistics.fmean(ratios) - 1),
            "spread_pct": spread_pct, "noisy": spread_pct > abs(100 * (statistics.median(ratios) - 1))}


def render(pairs: list[dict], summary: dict) -> str:
    lines = ["| pair | order | plain mean ms | profiled mean ms | ratio |", "|---|---|---:|---:|---:|"]
    for p in pairs:
        cells = [p[s].get("error", "") or f"{p[s]['mean_ms']:.3f}" for s in SIDES]
        ratio = f"{p['ratio']:.3f}" if "ratio" in p else "failed"
        if "ratio" in p and abs(p["ratio"] - 1) > NOISY_PAIR:
            ratio += f" (noise? over {NOISY_PAIR:.0%} apart)"
        lines.append(f"| {p['pair']} | {' then '.join(p['order'])} | {cells[0]} | {cells[1]} | {ratio} |")
    if summary["pairs"]:
        lines.append(f"\noverhead over {summary['pairs']} pairs: median {summary['overhead_pct_median']:+.1f}%, mean "
                     f"{summary['overhead_pct_mean']:+.1f}% (pair ratios {summary['min_ratio']:.3f} to "
                     f"{summary['max_ratio']:.3f})")
        if summary["noisy"]:
            lines.append(f"warning: the pairs disagree by {summary['spread_pct']:.1f} points, more than the median "
                         f"overhead ({abs(summary['overhead_pct_median']):.1f}%): the machine is too noisy for this "
                         "number; run more --pairs, longer --steps, or on an idle machine")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    a.name = a.name or time.strftime("overhead-%Y%m%d-%H%M%S")
    try:
        check_possible(a)
        root = create_result_dir(a.logdir, a.name, "overhead")
    except ConfigError as e:
        print(f"profiler_overhead.py: error: {e}", file=sys.stderr)
        return 2
    pairs = []
    for i in range(a.pairs):
        pairs.append(run_pair(a, root, i))
        print(render(pairs[-1:], {"pairs": 0}).splitlines()[-1], flush=True)
    summary = summarize(pairs)
    table = render(pairs, summary)
    (root / "overhead.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                                    "pairs": pairs, "summary": summary}, indent=2) + "\n")
    (root / "overhead.md").write_text(table)
    print(table)
    return 1 if summary["pairs"] < a.pairs else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare step variants side by side: eager, torch.compile and whole-step CUDA graphs, each with native and
custom elementwise ops. Each variant is one `stepscope train --profile` run (its own process and its own
TensorBoard run under one logdir), so TensorBoard's Scalars compare them directly.

    stepscope compare --arch resnet18 --batch-size 128 --steps 300          # on a GPU
    stepscope compare --device cpu --variants eager compile --ops native --steps 40
    python scripts/compare.py ...                                           # the same, from a checkout
    tensorboard --logdir logs/compare-<timestamp>

Prints one row per variant: median ms/step, images/s (batch / median step), speedup vs eager (same ops, same
invocation), GPU busy % and the verdict from the run's trace; writes compare.json and compare.md next to the
runs. Variants that cannot run here (CUDA graphs on a CPU, custom ops without their build) are refused up
front with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .config import ConfigError, plain_name
from .launch import INSTALLED_TRAIN, TrainFailed, run_train
from .profiler.cli.oneline import OneLineParser
from .run_dir import create_result_dir

VARIANTS = {"eager": [], "compile": ["--compile", "reduce-overhead"], "compile-default": ["--compile", "default"],
            "cuda-graphs": ["--cuda-graphs"]}
OPS = ("native", "custom")


def parse(argv: list[str] | None, prog: str, default_logdir: Path) -> argparse.Namespace:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=["eager", "compile", "cuda-graphs"], choices=list(VARIANTS))
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--logdir", type=Path, default=default_logdir)
    p.add_argument("--name", default=None, help="folder under --logdir (default compare-<timestamp>)")
    a = p.parse_args(argv)
    if a.steps < 30:
        p.error(f"--steps {a.steps} is too few: the default profiler schedule needs 20 and timing needs more; use >= 30")
    return a


def train_args(a: argparse.Namespace, root: Path, variant: str, ops: str) -> list[str]:
    return ["--profile", "--arch", a.arch, "--batch-size", str(a.batch_size), "--steps", str(a.steps), "--device",
            a.device, "--ops", ops, "--logdir", str(root), "--run-name", f"{variant}-{ops}", "--log-every", "25",
            *VARIANTS[variant]]


def check_possible(a: argparse.Namespace, prog: str) -> None:
    """Each variant's train flags, checked by the trainer's own validation before anything is written: first
    what needs no torch (a typo is answered at once), then the rest."""
    from .cli import check_before_torch, parse_and_check

    plain_name("--name", a.name)
    root = a.logdir / a.name  # not created yet: the checks only need its nearest existing parent to be writable
    variants = [train_args(a, root, v, o) for o in a.ops for v in a.variants]
    for args in variants:
        check_before_torch(args, prog=prog)
    import torch

    for args in variants:
        parse_and_check(args, torch.cuda.is_available(), prog=prog)


def run_variant(a: argparse.Namespace, root: Path, variant: str, ops: str, train_cmd: tuple[str, ...],
                cwd: Path | None) -> dict:
    name = f"{variant}-{ops}"
    args = train_args(a, root, variant, ops)
    print(f"[{name}] started: {' '.join(args)}", flush=True)
    t0 = time.monotonic()
    try:
        run = run_train(args, train_cmd, cwd)
    except TrainFailed as e:
        print(f"[{name}] failed after {time.monotonic() - t0:.0f} s: {e}", flush=True)
        return {"variant": variant, "ops": ops, "error": str(e)}
    print(f"[{name}] finished in {time.monotonic() - t0:.0f} s: median {run['final']['median_step_ms']:.2f} ms/step",
          flush=True)
    median_ms = run["final"]["median_step_ms"]
    row = {"variant": variant, "ops": ops, "run": name, "median_ms": median_ms,
           "mean_ms": run["final"]["mean_step_ms"],
           "images_per_s": run["config"]["data"]["batch_size"] * run["world_size"] / (median_ms / 1e3),
           "timed_steps": run["final"]["timed_steps"], "verdict": None, "gpu_busy_pct": None}
    diagnosis = run.get("diagnosis")
    if diagnosis:  # the run analysed its own traces at its end; nothing to parse again
        row["verdict"] = diagnosis["verdict"]
        row["gpu_busy_pct"] = diagnosis["spans"][0]["metrics"].get("gpu_busy_pct")
    return row


def add_speedups(rows: list[dict]) -> None:
    base = {r["ops"]: r["median_ms"] for r in rows if r["variant"] == "eager" and "error" not in r}
    for r in rows:
        if "error" not in r and r["ops"] in base:
            r["speedup_vs_eager"] = base[r["ops"]] / r["median_ms"]


def render(rows: list[dict]) -> str:
    head = "| variant | ops | median ms/step | images/s | speedup vs eager | GPU busy % | verdict |\n|---|---|---|---|---|---|---|"
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['ops']} | failed: {r['error']} | | | | |")
            continue
        busy = "-" if r["gpu_busy_pct"] is None else f"{r['gpu_busy_pct']:.0f}"
        sp = r.get("speedup_vs_eager")
        lines.append(f"| {r['variant']} | {r['ops']} | {r['median_ms']:.2f} | {r['images_per_s']:.0f} | "
                     f"{'-' if sp is None else f'{sp:.2f}x'} | {busy} | {r['verdict'] or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, prog: str = "stepscope compare",
         train_cmd: tuple[str, ...] = INSTALLED_TRAIN, default_logdir: Path = Path("logs"),
         cwd: Path | None = None) -> int:
    """`train_cmd` starts one training run (the flags follow); `cwd` is where it runs (None: here)."""
    a = parse(argv, prog, default_logdir)
    a.name = a.name or time.strftime("compare-%Y%m%d-%H%M%S")
    try:
        check_possible(a, prog)
        root = create_result_dir(a.logdir, a.name, "compare")
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    rows = [run_variant(a, root, v, o, train_cmd, cwd) for o in a.ops for v in a.variants]
    add_speedups(rows)
    table = render(rows)
    (root / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    (root / "compare.md").write_text(table)
    print(table)
    print(f"tensorboard --logdir {root}")
    return 1 if any("error" in r for r in rows) else 0


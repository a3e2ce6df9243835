"""Compare step variants side by side: eager, torch.compile and whole-step CUDA graphs, each with native and
custom elementwise ops. Each variant is one `scripts/train.py --profile` run (its own process and its own
TensorBoard run under one logdir), so TensorBoard's Scalars compare them directly.

    python scripts/compare.py --arch resnet18 --batch-size 128 --steps 300          # on a GPU
    python scripts/compare.py --device cpu --arch resnet8 --batch-size 32 --variants eager --ops native --steps 30
    tensorboard --logdir logs/compare-<timestamp>

On 2 CPU cores the CPU line takes about a minute per variant (torch.compile adds a few minutes of compiling).
Prints a line as each variant starts and finishes, then one row per variant: median ms/step, images/s (batch / median step), speedup vs eager (same ops, same invocation), GPU busy %
and the verdict from the run's trace; writes compare.json and compare.md next to the runs. Every variant's
train.py flags go through the trainer's own checks first: a bad value or a variant that cannot run here (CUDA
graphs on a CPU, custom ops without their build) is one line on stderr, exit code 2, and nothing written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
import _checkout  # noqa: E402,F401  this checkout's stepscope.trainer and stepscope.kernels
from stepscope.trainer.cli import OneLineParser  # noqa: E402
from stepscope.trainer.config import ConfigError, plain_name  # noqa: E402
from stepscope.trainer.run_dir import create_result_dir  # noqa: E402

VARIANTS = {"eager": [], "compile": ["--compile", "reduce-overhead"], "compile-default": ["--compile", "default"],
            "cuda-graphs": ["--cuda-graphs"]}
OPS = ("native", "custom")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="compare.py", description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=["eager", "compile", "cuda-graphs"], choices=list(VARIANTS))
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--logdir", type=Path, default=REPO / "logs")
    p.add_argument("--name", default=None, help="folder under --logdir (default compare-<timestamp>)")
    a = p.parse_args(argv)
    if a.steps < 30:
        p.error(f"--steps {a.steps} is too few: the default profiler schedule needs 20 and timing needs more; use >= 30")
    return a


def check_possible(a: argparse.Namespace) -> None:
    """Each variant's train.py flags, checked by the trainer's own validation before anything is written."""
    import torch
    from stepscope.trainer.cli import parse_and_check

    plain_name("--name", a.name)
    root = a.logdir / a.name  # not created yet: the checks only need its nearest existing parent to be writable
    for o in a.ops:
        for v in a.variants:
            parse_and_check(train_cmd(a, root, v, o)[2:], torch.cuda.is_available(), prog="compare.py")


def train_cmd(a: argparse.Namespace, root: Path, variant: str, ops: str) -> list[str]:
    return [sys.executable, str(REPO / "scripts" / "train.py"), "--profile", "--arch", a.arch, "--batch-size",
            str(a.batch_size), "--steps", str(a.steps), "--device", a.device, "--ops", ops, "--logdir", str(root),
            "--run-name", f"{variant}-{ops}", "--log-every", "25", *VARIANTS[variant]]


def run_variant(a: argparse.Namespace, root: Path, variant: str, ops: str) -> dict:
    name = f"{variant}-{ops}"
    cmd = train_cmd(a, root, variant, ops)
    print(f"[{name}] started: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    took = f"{time.monotonic() - t0:.0f} s"
    if r.returncode != 0:
        error = (r.stderr.strip().splitlines() or ["?"])[-1]
        print(f"[{name}] failed after {took}: {error}", flush=True)
        return {"variant": variant, "ops": ops, "error": error}
    run = json.loads((root / name / "run.json").read_text())
    median_ms = run["final"]["median_step_ms"]
    row = {"variant": variant, "ops": ops, "run": name, "median_ms": median_ms,
           "mean_ms": run["final"]["mean_step_ms"],
           "images_per_s": run["config"]["data"]["batch_size"] * run["world_size"] / (median_ms / 1e3),
           "timed_steps": run["final"]["timed_steps"], "verdict": None, "gpu_busy_pct": None}
    diagnosis = run.get("diagnosis")
    if diagnosis:  # the run analysed its own traces at its end; nothing to parse again
        row["verdict"] = diagnosis["verdict"]
        row["gpu_busy_pct"] = diagnosis["spans"][0]["metrics"].get("gpu_busy_pct")
    print(f"[{name}] finished in {took}: median {median_ms:.2f} ms/step", flush=True)
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


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    a.name = a.name or time.strftime("compare-%Y%m%d-%H%M%S")
    try:
        check_possible(a)
        root = create_result_dir(a.logdir, a.name, "compare")
    except ConfigError as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2
    rows = [run_variant(a, root, v, o) for o in a.ops for v in a.variants]
    add_speedups(rows)
    table = render(rows)
    (root / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    (root / "compare.md").write_text(table)
    print(table)
    print(f"tensorboard --logdir {root}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare step variants side by side: eager, torch.compile and whole-step CUDA graphs, each with native and
custom elementwise ops.

Each variant is one `stepscope train --profile` run (its own process and its own TensorBoard run under one
logdir), so TensorBoard's Scalars compare them directly.

    stepscope compare                                                   # the defaults of this machine's device
    stepscope compare --arch resnet18 --batch-size 128 --steps 300      # on a GPU
    stepscope compare --device cpu --variants eager compile-default --ops native --steps 40
    python scripts/compare.py ...                                       # the same, from a checkout
    tensorboard --logdir logs/compare-<timestamp>
    rows = stepscope.compare(["--device", "cpu", "--variants", "eager"])   # the rows, as compare.json

The defaults fit the device: on a GPU ResNet-18 at batch 128 for 300 steps, variants eager, compile and
cuda-graphs, ops native and custom; on a CPU ResNet-8 at batch 32 for 40 steps, variants eager and
compile-default, ops native. The first line says what will run; each variant then shows its progress (its
latest logged step, every few seconds) and how it ended. At the end it prints one row per variant: median
ms/step, images/s (batch / median step), speedup vs eager (same ops, same invocation), GPU busy % and the
verdict from the run's trace, and writes compare.json and compare.md next to the runs.

Bad input is refused up front, before anything runs or is written: one line on stderr and exit code 2. That
covers unknown or repeated variants or ops, and variants that cannot run here (CUDA graphs on a CPU, custom
ops without their build). A variant that fails while running is a row "failed: <its last error line>", and
the exit code is then 1.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from stepscope.cli.oneline import OneLineParser
from stepscope.demo.config import ConfigError, plain_name
from stepscope.demo.launch import INSTALLED_TRAIN, TrainFailed, run_train
from stepscope.demo.run_dir import create_result_dir
from stepscope.trace.errors import print_error

VARIANTS = {"eager": [], "compile": ["--compile", "reduce-overhead"], "compile-default": ["--compile", "default"],
            "cuda-graphs": ["--cuda-graphs"]}
OPS = ("native", "custom")
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class Defaults:
    arch: str
    batch_size: int
    steps: int
    variants: tuple[str, ...]
    ops: tuple[str, ...]


DEFAULTS = {"cuda": Defaults("resnet18", 128, 300, ("eager", "compile", "cuda-graphs"), OPS),
            "cpu": Defaults("resnet8", 32, 40, ("eager", "compile-default"), ("native",))}


class CompareError(ConfigError):
    """Bad input to compare; the message is the one line printed."""


class _Parser(OneLineParser):
    def error(self, message: str) -> None:  # raised, so that compare() can be called from Python too
        raise CompareError(message)


def parse(argv: list[str] | None, prog: str, default_logdir: Path) -> argparse.Namespace:
    """The flags; those left out stay None until `fill_defaults` knows the device. Raises CompareError."""
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0],
                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS),
                   help="default: eager compile cuda-graphs on a GPU, eager compile-default on a CPU")
    p.add_argument("--ops", nargs="+", default=None, choices=OPS,
                   help="default: native custom on a GPU, native on a CPU")
    p.add_argument("--arch", default=None, help="default: resnet18 on a GPU, resnet8 on a CPU")
    p.add_argument("--batch-size", type=int, default=None, help="default: 128 on a GPU, 32 on a CPU")
    p.add_argument("--steps", type=int, default=None, help="default: 300 on a GPU, 40 on a CPU (at least 30)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--logdir", type=Path, default=default_logdir)
    p.add_argument("--name", default=None, help="folder under --logdir (default compare-<timestamp>)")
    a = p.parse_args(argv)
    for flag, given in (("--variants", a.variants), ("--ops", a.ops)):
        twice = sorted({v for v in given or () if given.count(v) > 1})
        if twice:
            p.error(f"{flag}: {', '.join(twice)} given more than once; name each once")
    if a.steps is not None and a.steps < 30:
        p.error(f"--steps {a.steps} is too few: the default profiler schedule needs 20 and timing needs more; use >= 30")
    return a


def fill_defaults(a: argparse.Namespace, device: str) -> argparse.Namespace:
    """The flags left out, as fit ``device`` ("cuda" or "cpu")."""
    d = DEFAULTS[device]
    given = vars(a)
    filled = {"arch": d.arch, "batch_size": d.batch_size, "steps": d.steps, "variants": list(d.variants),
              "ops": list(d.ops)}
    return argparse.Namespace(**{**given, **{k: v for k, v in filled.items() if given[k] is None}})


def train_args(a: argparse.Namespace, root: Path, variant: str, ops: str) -> list[str]:
    return ["--profile", "--arch", a.arch, "--batch-size", str(a.batch_size), "--steps", str(a.steps), "--device",
            a.device, "--ops", ops, "--logdir", str(root), "--run-name", f"{variant}-{ops}", "--log-every",
            str(max(1, a.steps // 10)), *VARIANTS[variant]]


def check_possible(a: argparse.Namespace, prog: str) -> argparse.Namespace:
    """Each variant's train flags, checked by the trainer's own validation before anything is written: first
    what needs no torch (a typo is answered at once), then the rest. Returns the flags with the defaults of
    the device that will run them."""
    from stepscope.demo.cli import check_before_torch, parse_and_check

    plain_name("--name", a.name)
    root = a.logdir / a.name  # not created yet: the checks only need its nearest existing parent to be writable
    # every default is valid, so the torch-free checks can use either device's before the device is known
    early = fill_defaults(a, "cpu" if a.device == "cpu" else "cuda")
    for args in [train_args(early, root, v, o) for o in early.ops for v in early.variants]:
        check_before_torch(args, prog=prog)
    import torch

    cuda = torch.cuda.is_available()
    device = "cuda" if a.device == "cuda" or (a.device == "auto" and cuda) else "cpu"
    a = fill_defaults(a, device)
    a.on = device
    for args in [train_args(a, root, v, o) for o in a.ops for v in a.variants]:
        parse_and_check(args, cuda, prog=prog)
    return a


def latest_step(run_dir: Path) -> int | None:
    """The latest step the run has logged to TensorBoard so far (None before its first)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    step = None
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        try:
            for event in EventFileLoader(str(path)).Load():
                if event.summary.value:
                    step = max(step or 0, event.step)
        except Exception:  # a record still being written: the next look reads it
            continue
    return step


def run_variant(a: argparse.Namespace, root: Path, variant: str, ops: str, train_cmd: tuple[str, ...],
                cwd: Path | None) -> dict:
    name = f"{variant}-{ops}"
    args = train_args(a, root, variant, ops)
    print(f"[{name}] started: {' '.join(args)}", flush=True)
    t0 = time.monotonic()

    def progress(elapsed_s: float) -> None:
        step = latest_step(root / name)
        done = "starting" if step is None else f"step {step}/{a.steps}"
        print(f"[{name}] {done}, {elapsed_s:.0f} s", flush=True)

    try:
        run = run_train(args, train_cmd, cwd, progress=progress, every_s=PROGRESS_EVERY_S)
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


def compare(argv: list[str] | None = None, *, prog: str = "stepscope compare",
            train_cmd: tuple[str, ...] = INSTALLED_TRAIN, default_logdir: Path = Path("logs"),
            cwd: Path | None = None) -> list[dict]:
    """Run every variant of ``argv`` (the command's flags) and return its rows, as written to compare.json:
    {"variant", "ops", "run", "median_ms", "mean_ms", "images_per_s", "timed_steps", "verdict",
    "gpu_busy_pct", "speedup_vs_eager"}, or {"variant", "ops", "error"} for a variant that failed. Bad input
    raises CompareError (a ValueError, one line) before anything runs or is written. `train_cmd` starts one
    training run (the flags follow); `cwd` is where it runs (None: here)."""
    a = parse(argv, prog, default_logdir)
    a.name = a.name or time.strftime("compare-%Y%m%d-%H%M%S")
    a = check_possible(a, prog)
    names = [f"{v}-{o}" for o in a.ops for v in a.variants]
    root = create_result_dir(a.logdir, a.name, "compare")
    print(f"{prog}: {len(names)} variant(s) on {a.on}, {a.arch} at batch {a.batch_size} for {a.steps} steps each: {', '.join(names)} -> {root}", flush=True)
    rows = [run_variant(a, root, v, o, train_cmd, cwd) for o in a.ops for v in a.variants]
    add_speedups(rows)
    table = render(rows)
    (root / "compare.json").write_text(json.dumps(rows, indent=2) + "\n")
    (root / "compare.md").write_text(table)
    print(table)
    print(f"tensorboard --logdir {root}")
    return rows


def main(argv: list[str] | None = None, prog: str = "stepscope compare",
         train_cmd: tuple[str, ...] = INSTALLED_TRAIN, default_logdir: Path = Path("logs"),
         cwd: Path | None = None) -> int:
    """`stepscope compare`: exit code 0, 1 when a variant failed, 2 on bad input (nothing run or written)."""
    try:
        rows = compare(argv, prog=prog, train_cmd=train_cmd, default_logdir=default_logdir, cwd=cwd)
    except ConfigError as e:
        print_error(f"{prog}: error: {e}")
        return 2
    return 1 if any("error" in r for r in rows) else 0

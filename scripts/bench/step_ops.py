"""Native vs custom elementwise ops in the trainer's own training step, both in one process, steps interleaved.

    python scripts/bench_step_ops.py [--arch resnet18] [--batch-size 128] [--steps 300] [--compile MODE]
                                     [--out step_ops.json]

Builds the model twice with the trainer's builders (bf16 autocast, channels_last, fused Nesterov SGD), once
with native ops and once with --ops custom (kernels/), from the same initial weights, and checks first that
one step of each gives the same loss and gradients (bf16 tolerance). Then it runs the two steps alternately
(native, custom, custom, native, ...), each timed with CUDA events on the stream, after a warm-up. Process-wide
drift in the host's speed, which decides a launch-bound step's time, reaches both alike; separate processes
(scripts/compare.py) differ by more than the ops do. Prints the median ms per step of each, their ratio and
the median of the per-pair ratios; --out writes them as JSON. CUDA only.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stepscope.cli.oneline import OneLineParser
from stepscope.demo.config import ARCHS, COMPILE_MODES, ModelConfig, OptimConfig

from bench.out_file import writable_file_error

# torch, the kernels and the trainer's builders are imported by the functions that use them: a refused argument
# costs no torch import (seconds of CPU)
if TYPE_CHECKING:
    import torch

OPS = ("native", "custom")


def build_steps(arch: str, batch_size: int, steps: int, compile_mode: str | None, env) -> dict:
    import torch
    from stepscope.capture.phases import Phases
    from stepscope.demo.models import build_model
    from stepscope.demo.optim import build_optimizer, loss_fn
    from stepscope.demo.step import CompiledStep, EagerStep

    torch.manual_seed(0)
    models = {ops: build_model(ModelConfig(arch=arch, ops=ops)).to(env.device, memory_format=env.memory_format)
              for ops in OPS}
    models["custom"].load_state_dict(models["native"].state_dict())
    out = {}
    for ops, model in models.items():
        opt, _ = build_optimizer(OptimConfig(), model, env.device, batch_size, steps)
        args = (model, opt, loss_fn(0.1), env, Phases(False))
        out[ops] = CompiledStep(*args, compile_mode) if compile_mode else EagerStep(*args)
    return out


def check_same_step(steps: dict, x: torch.Tensor, y: torch.Tensor) -> None:
    """One step of each from the same weights: same loss and gradients, up to bf16 rounding."""
    import torch

    grads = {}
    for ops, step in steps.items():
        with step.env.autocast():
            loss = step.loss_fn(step.model(x), y)
        loss.backward()
        grads[ops] = (loss.detach(), [p.grad.clone() for p in step.model.parameters()])
        step.opt.zero_grad(set_to_none=True)
    (ln, gn), (lc, gc) = grads["native"], grads["custom"]
    torch.testing.assert_close(lc, ln, rtol=2e-2, atol=2e-2)
    worst = max(((a - b).norm() / b.norm().clamp_min(1e-12)).item() for a, b in zip(gc, gn))
    if worst > 5e-2:  # sync point: reads the gradient comparison
        raise SystemExit(f"bench_step_ops.py: custom gradients differ from native (relative error {worst:.3g})")


def timed(steps: dict, x: torch.Tensor, y: torch.Tensor, pairs: int, warmup: int) -> dict:
    import torch

    for _ in range(warmup):
        for step in steps.values():
            step(x, y)
    events = {ops: [] for ops in OPS}
    for i in range(pairs):
        order = OPS if i % 2 == 0 else OPS[::-1]
        for ops in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            steps[ops](x, y)
            end.record()
            events[ops].append((start, end))
    torch.cuda.synchronize()  # sync point: all events complete before they are read
    return {ops: [s.elapsed_time(e) for s, e in ev] for ops, ev in events.items()}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench_step_ops.py", description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet18", choices=ARCHS)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=300, help="timed steps of each (default 300)")
    p.add_argument("--compile", dest="compile_mode", default=None, choices=COMPILE_MODES,
                   help="torch.compile mode (default: eager)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.steps < 1 or a.batch_size < 1:
        p.error(f"--steps and --batch-size must be at least 1; got {a.steps} and {a.batch_size}")
    if a.out is not None and (problem := writable_file_error(a.out, "--out")):
        p.error(problem)
    import torch
    from stepscope import kernels
    from stepscope.demo.env import configure_process, make_env

    if not torch.cuda.is_available():
        print("bench_step_ops.py: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    reason = kernels.unavailable_reason("cuda")
    if reason:
        print(f"bench_step_ops.py: error: {reason}", file=sys.stderr)
        return 2
    env = make_env("cuda", bf16=True, channels_last=True)
    configure_process(env, profiling=False, cuda_graphs=False, compile_mode=a.compile_mode)
    steps = build_steps(a.arch, a.batch_size, a.steps, a.compile_mode, env)
    x = torch.randn(a.batch_size, 3, 32, 32, device=env.device).contiguous(memory_format=env.memory_format)
    y = torch.randint(0, 10, (a.batch_size,), device=env.device)
    check_same_step(steps, x, y)
    ms = timed(steps, x, y, a.steps, warmup=30)
    med = {ops: statistics.median(v) for ops, v in ms.items()}
    pair_ratio = statistics.median(c / n for c, n in zip(ms["custom"], ms["native"]))
    result = {"arch": a.arch, "batch_size": a.batch_size, "variant": a.compile_mode or "eager", "steps": a.steps,
              "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "median_ms": med,
              "custom_over_native": med["custom"] / med["native"], "median_pair_ratio": pair_ratio}
    print(f"{a.arch} batch {a.batch_size} {result['variant']}: native {med['native']:.3f} ms, custom "
          f"{med['custom']:.3f} ms per step (median of {a.steps}, interleaved); custom/native "
          f"{result['custom_over_native']:.3f}, median per-pair ratio {pair_ratio:.3f}")
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a CUDA-graph replay's time goes: kernels, or the gaps between them.

    python scripts/bench_graph_gaps.py --only bert_bs8 vit_tiny_bs8      # on a CUDA machine

The verdict benchmarks take a step's GPU time from a CUDA-graph replay of its device work (verdicts/truth.py):
the replay's span, from its first kernel's start to its last kernel's end, timed with CUDA events and no
profiler. A trace's GPU busy counts only the time a kernel runs. For a step of hundreds of kernels of a few
microseconds, the two can differ by the gaps between kernels, which the GPU spends starting the next one.
This measures, for each scenario, in one process:
  ``replay_ms``        the replay's span, unprofiled (CUDA events, median of 20): the truth's GPU time;
  ``replay_kernel_ms`` the union of the replay's kernel intervals under torch.profiler (CUDA activity only;
                       the profiler adds host time per launch, and a replay has one launch);
  ``eager_kernel_ms``  the union of the kernel intervals of one eager step under torch.profiler, as a trace of
                       the user's loop records it;
  ``kernels``          kernels per replay and per eager step.
If ``replay_kernel_ms`` is close to ``eager_kernel_ms`` and below ``replay_ms``, the replay's extra time is
gaps between kernels, not slower kernels. Prints a Markdown table; ``--out`` also writes it as JSON.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from stepscope.cli.oneline import OneLineParser

DEFAULT = ("bert_bs8", "vit_tiny_bs8", "resnet18_bs32", "gpt_tiny")


def kernel_union_ms(events: list[dict]) -> float:
    """ms covered by at least one of ``events`` (chrome-trace complete events, microseconds)."""
    total, end = 0.0, None
    for e in sorted(events, key=lambda e: e["ts"]):
        a, b = e["ts"], e["ts"] + e["dur"]
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e3


def _profiled_kernels(fn, reps: int) -> list[list[dict]]:
    """The kernels of each of ``reps`` calls of ``fn``, each call in its own profiled step. CUPTI stays
    attached after the session (torch's default): a teardown would race the next session's start and leave
    it with no GPU events."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=reps, repeat=1)) as prof:
            for _ in range(reps + 1):
                fn()
                torch.cuda.synchronize()  # sync point: each call's kernels within its own step
                prof.step()
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    out = []
    for i, s in enumerate(steps):
        hi = steps[i + 1]["ts"] if i + 1 < len(steps) else float("inf")  # a step's kernels may end after it
        out.append([k for k in kernels if s["ts"] <= k.get("ts", -1) < hi])
    return out


def measure(name: str, device) -> dict:
    import torch

    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.holdout import HOLDOUT
    from bench.verdicts.truth import capture, events_ms

    torch.manual_seed(0)
    w = (WORKLOADS.get(name) or HOLDOUT[name])(device)
    g = capture(w.gpu_part)
    if g is None:
        raise ValueError(f"{name}: its step cannot be captured as a CUDA graph")
    replay = events_ms(g.replay, 20)  # as the truth's graph_ms times it
    for _ in range(5):
        w.step()
    torch.cuda.synchronize()
    in_replay = _profiled_kernels(g.replay, 5)
    in_eager = _profiled_kernels(w.step, 5)
    return {"scenario": name, "replay_ms": replay,
            "replay_kernel_ms": statistics.median(kernel_union_ms(k) for k in in_replay),
            "eager_kernel_ms": statistics.median(kernel_union_ms(k) for k in in_eager),
            "replay_kernels": statistics.median(len(k) for k in in_replay),
            "eager_kernels": statistics.median(len(k) for k in in_eager)}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="bench_graph_gaps.py", description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=list(DEFAULT), help="scenarios of the verdict benchmarks")
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    a = p.parse_args(argv)
    import torch

    from bench.verdicts.gpu import WORKLOADS
    from bench.verdicts.holdout import HOLDOUT

    unknown = [n for n in a.only if n not in WORKLOADS and n not in HOLDOUT]
    if unknown:
        p.error(f"--only {' '.join(unknown)}: no such scenario (one of {', '.join([*WORKLOADS, *HOLDOUT])})")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    rows = []
    print("| scenario | replay ms (unprofiled) | replay kernels ms | eager step kernels ms | kernels replay / eager |")
    print("|---|---:|---:|---:|---:|")
    for name in a.only:
        r = measure(name, torch.device("cuda"))
        rows.append(r)
        print(f"| {name} | {r['replay_ms']:.3f} | {r['replay_kernel_ms']:.3f} | {r['eager_kernel_ms']:.3f} | "
              f"{r['replay_kernels']:.0f} / {r['eager_kernels']:.0f} |", flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    return 0

"""Benchmark the stepscope elementwise ops against eager PyTorch, torch.compile and copy_.

    python scripts/bench_ops.py --out bench.json --plot sweep.png      # GPU (about 3 min on an H100)
    python scripts/bench_ops.py --device cpu --quick --no-compile --out /tmp/b.json --plot /tmp/s.png
    python scripts/bench_ops.py --per-call --out per_call.json         # only the per-call costs (about 1 min)

Method. GPU: CUDA events around each call after warm-up, L2 flushed before each call, median of
--reps calls (at least 50); every tensor is 256 MiB (64 Mi fp32 or 128 Mi fp16/bf16 elements) of
random values; every implementation is checked against eager PyTorch before it is timed. CPU:
the same with perf_counter and no flush. GB/s counts the fewest bytes an op must move (each
input read once, the output written once); "% copy" divides by copy_'s GB/s (read + write of
one tensor), measured in the same run. Our CUDA kernel versions (kernels/csrc/cuda/
elementwise.cu) are timed too ("custom_v1".."custom_v3"; "custom" is the default).

The size sweep (fp32 add_relu, 10^2..10^8 elements) reports the time per call of back-to-back
calls: CPU, GPU launched from Python, and GPU launched from a CUDA graph; small sizes show the
launch-overhead floor, the crossover where the GPU starts to win is printed and plotted.

Per-call cost (also alone with --per-call): the time per call from Python of our add_relu (the
kernels.add_relu wrapper and torch.ops.stepscope.add_relu) next to native torch.relu and a + b, at
10^2..10^5 fp32 elements, with and without inputs that require grad, on CUDA (when present) and the
CPU, all in the same run: back-to-back calls timed with CUDA events (perf_counter on the CPU) after
warm-up, so at these sizes the number is the host's cost of issuing one op (Python, dispatcher,
autograd, launch). The implementations are timed in rounds, one batch of each per round, so drift in the
host's speed hits them alike. Prints ours / native; ours/relu is the median of the per-round ratios.

Prints a short table and the performance target checks; writes everything to --out as JSON and
the sweep to --plot as PNG. Bad arguments (too few --reps, an --out or --plot that cannot be
written, a --plot that is not a .png file) are refused before anything is built or run.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from stepscope import kernels
from stepscope.cli.oneline import OneLineParser
from stepscope.demo.step import capture_graph
from stepscope.demo.timing import time_fn

from bench.out_file import writable_file_error

EAGER = {  # op -> (number of inputs, eager PyTorch)
    "add": (2, lambda a, b: a + b),
    "relu": (1, torch.relu),
    "add_relu": (2, lambda a, b: torch.relu(a + b)),
    "square": (1, torch.square),
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MIB = 1 << 20


@dataclass(frozen=True)
class BenchConfig:
    device: str  # "cuda" or "cpu"
    quick: bool  # tiny sizes and few repetitions: a smoke test, not a measurement
    compile: bool  # time torch.compile too
    reps: int
    bytes_per_tensor: int
    sweep_max_exp: int  # the sweep goes up to 10**sweep_max_exp elements


def median_us(times_s: list[float]) -> float:
    return statistics.median(times_s) * 1e6


class Timer:
    """Times one call of fn: CUDA events around it with L2 flushed before (GPU), or perf_counter (CPU)."""

    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        self.flush = None
        if cfg.device == "cuda":
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
            self.flush = torch.empty(max(2 * l2, 64 * MIB) // 4, dtype=torch.int32, device="cuda")

    def per_call(self, fn, warmup: int = 5) -> list[float]:
        """Seconds per call, through trainer.timing (the one timing module of training and benchmarks)."""
        # on the GPU, zeroing the flush buffer evicts the inputs from L2: every call reads device memory
        flush = self.flush.zero_ if self.flush is not None else None
        ms = time_fn(fn, torch.device(self.cfg.device), warmup=warmup, reps=self.cfg.reps, before_each=flush)
        return [t / 1e3 for t in ms]


def check(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    try:
        torch.testing.assert_close(got, expected)
    except AssertionError as e:
        raise SystemExit(f"bench_ops: {name} gives wrong results, not timing it:\n{e}") from e


def implementations(op: str, cfg: BenchConfig) -> dict:
    arity, eager = EAGER[op]
    impls = {"custom": getattr(kernels, op), "eager": eager}
    if cfg.device == "cuda":
        for v in range(1, kernels.kernel_version_count() + 1):
            impls[f"custom_v{v}"] = functools.partial(_with_version, v, getattr(kernels, op))
    if cfg.compile:
        impls["compile"] = torch.compile(eager, dynamic=False)
    return impls


def _with_version(version: int, fn, *inputs):
    with kernels.kernel_version(version):
        return fn(*inputs)


def row(kind: str, op: str, dtype: str, numel: int, impl: str, times: list[float], nbytes: int) -> dict:
    us = median_us(times)
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return {"kind": kind, "op": op, "dtype": dtype, "numel": numel, "impl": impl, "us": us,
            "us_p10": q[0] * 1e6, "us_p90": q[-1] * 1e6, "gbps": nbytes / us / 1e3}  # fmt: skip


def bench_copy(cfg: BenchConfig, timer: Timer, dname: str) -> dict:
    numel = cfg.bytes_per_tensor // DTYPES[dname].itemsize
    src = torch.randn(numel, dtype=DTYPES[dname], device=cfg.device)
    dst = torch.empty_like(src)
    return row("copy", "copy_", dname, numel, "eager", timer.per_call(lambda: dst.copy_(src)), 2 * cfg.bytes_per_tensor)


def bench_op(cfg: BenchConfig, timer: Timer, op: str, dname: str) -> list[dict]:
    arity, eager = EAGER[op]
    numel = cfg.bytes_per_tensor // DTYPES[dname].itemsize
    inputs = [torch.randn(numel, dtype=DTYPES[dname], device=cfg.device) for _ in range(arity)]
    expected = eager(*inputs)
    rows = []
    for impl, fn in implementations(op, cfg).items():
        check(f"{op} {dname} {impl}", fn(*inputs), expected)
        times = timer.per_call(functools.partial(fn, *inputs))
        rows.append(row("op", op, dname, numel, impl, times, (arity + 1) * cfg.bytes_per_tensor))
    return rows


def bench_ops(cfg: BenchConfig, timer: Timer) -> tuple[list[dict], dict]:
    rows, copy_gbps = [], {}
    for dname in DTYPES:
        rows.append(bench_copy(cfg, timer, dname))
        copy_gbps[dname] = rows[-1]["gbps"]
        for op in EAGER:
            rows += bench_op(cfg, timer, op, dname)
    for r in rows:
        r["pct_copy"] = 100 * r["gbps"] / copy_gbps[r["dtype"]]
    return rows, copy_gbps


def bench_classic(cfg: BenchConfig, timer: Timer, copy_gbps: dict) -> list[dict]:
    """torch.square vs a * a vs a ** 2 vs ours, and an add2-style standalone add, in fp32."""
    numel = cfg.bytes_per_tensor // 4
    a, b = (torch.randn(numel, device=cfg.device) for _ in range(2))
    candidates = {
        "square": {"torch.square": lambda: torch.square(a), "a * a": lambda: a * a, "a ** 2": lambda: a**2,
                   "ours": lambda: kernels.square(a)},
        "add": {"a + b": lambda: a + b, "torch.add(out=)": lambda: torch.add(a, b, out=c), "ours": lambda: kernels.add(a, b),
                "ours, out=": lambda: kernels.add(a, b, out=c)},
    }  # fmt: skip
    if cfg.device == "cuda":  # the tutorial add2 kernel: one element per thread
        candidates["add"]["ours v1 (add2-style)"] = functools.partial(_with_version, 1, kernels.add, a, b)
    c = torch.empty_like(a)
    rows = []
    for op, impls in candidates.items():
        expected = a * a if op == "square" else a + b
        nbytes = (2 if op == "square" else 3) * numel * 4
        for impl, fn in impls.items():
            check(f"{op} {impl}", fn(), expected)
            rows.append(row("classic", op, "float32", numel, impl, timer.per_call(fn), nbytes))
            rows[-1]["pct_copy"] = 100 * rows[-1]["gbps"] / copy_gbps["float32"]
    return rows


def batch_times_s(fn, k: int, device: torch.device, reps: int) -> list[float]:
    """Seconds per batch of k back-to-back calls of fn, `reps` batches, through trainer.timing (no warm-up)."""

    def batch() -> None:
        for _ in range(k):
            fn()

    return [ms / 1e3 for ms in time_fn(batch, device, warmup=0, reps=reps)]


def per_call_batched(fn, device: torch.device, target_s: float, batches: int = 7) -> tuple[float, int]:
    """Median µs per call of back-to-back calls, in batches of K calls lasting about target_s."""
    one_call_s = min(batch_times_s(fn, 1, device, 3))
    k = max(1, min(2000, math.ceil(target_s / max(one_call_s, 1e-7))))
    return statistics.median(t / k for t in batch_times_s(fn, k, device, batches)) * 1e6, k


def graph_of(fn, k: int) -> torch.cuda.CUDAGraph:
    """k back-to-back calls of fn captured as one CUDA graph."""
    def k_calls() -> None:
        for _ in range(k):
            fn()

    return capture_graph(k_calls, warmup=1)


def sweep_point(cfg: BenchConfig, numel: int) -> dict:
    a, b = torch.randn(numel), torch.randn(numel)
    expected = torch.relu(a + b)
    check(f"sweep cpu {numel}", kernels.add_relu(a, b), expected)
    fn = functools.partial(kernels.add_relu, a, b)
    point = {"numel": numel, "cpu_us": per_call_batched(fn, torch.device("cpu"), 2e-3 if cfg.quick else 2e-2)[0]}
    if cfg.device == "cuda":
        ga, gb = a.cuda(), b.cuda()
        check(f"sweep cuda {numel}", kernels.add_relu(ga, gb), expected.cuda())
        cuda = torch.device("cuda")
        fn = functools.partial(kernels.add_relu, ga, gb)
        point["gpu_us"], k = per_call_batched(fn, cuda, 2e-3)
        graph = graph_of(fn, k)
        point["graph_us"] = statistics.median(t / k for t in batch_times_s(graph.replay, 1, cuda, 7)) * 1e6
    return point


def bench_sweep(cfg: BenchConfig) -> dict:
    exps = [e / 2 for e in range(4, 2 * cfg.sweep_max_exp + 1)]  # 10^2, 10^2.5, ..., 10^max
    points = [sweep_point(cfg, int(round(10**exp))) for exp in exps]
    result = {"op": "add_relu", "dtype": "float32", "points": points}
    if cfg.device == "cuda":
        losing = [p["numel"] for p in points if p["gpu_us"] >= p["cpu_us"]]
        result["gpu_wins_from_numel"] = next((p["numel"] for p in points if p["numel"] > max(losing, default=0)), None)
        result["gpu_floor_us"] = min(p["gpu_us"] for p in points)
        result["graph_floor_us"] = min(p["graph_us"] for p in points)
    return result


PER_CALL_SIZES = (10**2, 10**3, 10**4, 10**5)


def per_call_impls(a: torch.Tensor, b: torch.Tensor) -> dict:
    """name -> (call, expected result): ours through the wrapper and through torch.ops, and native ops."""
    both = torch.relu(a + b)
    return {
        "ours": (functools.partial(kernels.add_relu, a, b), both),  # the wrapper the trainer calls
        "ours torch.ops": (functools.partial(torch.ops.stepscope.add_relu, a, b), both),
        "torch.relu": (functools.partial(torch.relu, a), torch.relu(a)),
        "a + b": (functools.partial(torch.add, a, b), a + b),
        "relu(a + b)": (lambda: torch.relu(a + b), both),  # what add_relu replaces: two native ops
    }


def interleaved_per_call(fns: dict, device: torch.device, target_s: float, rounds: int) -> dict:
    """name -> (median µs per call, calls per batch, per-round µs): each round times one batch of every fn in
    turn, so a drift in the host's speed during the run reaches all of them alike."""
    ks = {name: per_call_batched(fn, device, target_s, batches=1)[1] for name, fn in fns.items()}
    rounds_us: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            rounds_us[name].append(batch_times_s(fn, ks[name], device, 1)[0] / ks[name] * 1e6)
    return {name: (statistics.median(us), ks[name], us) for name, us in rounds_us.items()}


def bench_per_call(devices: list[str], quick: bool) -> list[dict]:
    """Time per call from Python of our add_relu and of native ops, back to back, in one run. Each row also has
    `vs_relu`: the median over rounds of ours / torch.relu timed in the same round (robust to drift)."""
    rows = []
    for device_name in devices:
        device = torch.device(device_name)
        for numel in PER_CALL_SIZES:
            for grad in (False, True):
                a, b = (torch.randn(numel, device=device, requires_grad=grad) for _ in range(2))
                fns = {}
                for impl, (fn, expected) in per_call_impls(a, b).items():
                    check(f"per-call {impl} {device_name} {numel}", fn(), expected)
                    for _ in range(20):  # warm-up: first-call caches, allocator blocks
                        fn()
                    fns[impl] = fn
                timed = interleaved_per_call(fns, device, 2e-3 if quick else 2e-2, 5 if quick else 15)
                relu_rounds = timed["torch.relu"][2]
                for impl, (us, k, per_round) in timed.items():
                    vs_relu = statistics.median(x / r for x, r in zip(per_round, relu_rounds))
                    rows.append({"device": device_name, "numel": numel, "grad": grad, "impl": impl, "us": us,
                                 "calls": k, "vs_relu": vs_relu})
    return rows


def print_per_call(rows: list[dict]) -> None:
    us = {(r["device"], r["numel"], r["grad"], r["impl"]): r["us"] for r in rows}
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    print("per-call µs from Python, back-to-back calls (ours = kernels.add_relu; grad = inputs require grad)")
    print(f"{'device':<6} {'numel':>7} {'grad':<5} " + " ".join(f"{i:>14}" for i in impls)
          + f" {'ours/relu':>9} {'ours/add':>8} {'ours/relu(a+b)':>14}")  # fmt: skip
    for device, numel, grad in dict.fromkeys((r["device"], r["numel"], r["grad"]) for r in rows):
        cell = {i: us[(device, numel, grad, i)] for i in impls}
        ours = cell["ours"]
        vs_relu = next(r["vs_relu"] for r in rows if (r["device"], r["numel"], r["grad"], r["impl"]) == (device, numel, grad, "ours"))
        print(f"{device:<6} {numel:>7} {str(grad):<5} " + " ".join(f"{cell[i]:14.2f}" for i in impls)
              + f" {vs_relu:9.2f} {ours / cell['a + b']:8.2f} {ours / cell['relu(a + b)']:14.2f}")  # fmt: skip


def plot_sweep(sweep: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numel = [p["numel"] for p in sweep["points"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label in [("cpu_us", "CPU"), ("gpu_us", "GPU, launched from Python"), ("graph_us", "GPU, inside a CUDA graph")]:
        if key in sweep["points"][0]:
            ax.plot(numel, [p[key] for p in sweep["points"]], marker="o", label=label)
    if sweep.get("gpu_wins_from_numel"):
        ax.axvline(sweep["gpu_wins_from_numel"], color="grey", linestyle=":", label="GPU wins from here")
    ax.set(xscale="log", yscale="log", xlabel="elements (fp32)", ylabel="time per call (µs)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def targets(rows: list[dict]) -> list[dict]:
    """The H100 targets for these kernels (>= 98% of copy_, faster than eager), checked on this run's numbers."""
    us = {(r["op"], r["dtype"], r["impl"]): r for r in rows if r["kind"] == "op"}
    checks = []
    for dtype in ("float32", "bfloat16"):
        mine = us[("add_relu", dtype, "custom")]
        checks.append({"target": f"add_relu {dtype}: >= 98% of copy_", "value": mine["pct_copy"], "met": mine["pct_copy"] >= 98})
        speedup = us[("add_relu", dtype, "eager")]["us"] / mine["us"]
        checks.append({"target": f"add_relu {dtype}: >= 1.6x eager relu(a + b)", "value": speedup, "met": speedup >= 1.6})
        if ("add_relu", dtype, "compile") in us:
            ratio = mine["us"] / us[("add_relu", dtype, "compile")]["us"]
            checks.append({"target": f"add_relu {dtype}: <= 1.02x torch.compile's time", "value": ratio, "met": ratio <= 1.02})
    for op in ("add", "relu", "square"):
        for dtype in DTYPES:
            ratio = us[(op, dtype, "custom")]["us"] / us[(op, dtype, "eager")]["us"]
            checks.append({"target": f"{op} {dtype}: <= 1.03x eager's time", "value": ratio, "met": ratio <= 1.03})
    return checks  # fmt: skip


def print_summary(rows: list[dict], classic: list[dict], sweep: dict, checks: list[dict]) -> None:
    us = {(r["op"], r["dtype"], r["impl"]): r for r in rows if r["kind"] == "op"}
    print(f"{'op':<9} {'dtype':<9} {'custom us':>9} {'eager us':>9} {'compile us':>10} {'GB/s':>7} {'% copy':>7} {'x eager':>7}")
    for op in EAGER:
        for dtype in DTYPES:
            mine, eager = us[(op, dtype, "custom")], us[(op, dtype, "eager")]
            comp = us.get((op, dtype, "compile"))
            print(f"{op:<9} {dtype:<9} {mine['us']:9.1f} {eager['us']:9.1f} {comp['us'] if comp else float('nan'):10.1f} "
                  f"{mine['gbps']:7.0f} {mine['pct_copy']:7.1f} {eager['us'] / mine['us']:7.2f}")  # fmt: skip
    versions = sorted({r["impl"] for r in rows if r["impl"].startswith("custom_v")})
    for dtype in ("float32", "bfloat16") if versions else ():
        cells = "  ".join(f"{v}: {us[('add_relu', dtype, v)]['us']:.1f} us" for v in versions)
        print(f"add_relu {dtype} versions  {cells}")
    for r in classic:
        print(f"classic {r['op']:<7} {r['impl']:<22} {r['us']:9.1f} us {r['gbps']:7.0f} GB/s {r['pct_copy']:6.1f}% copy")
    for key in ("gpu_wins_from_numel", "gpu_floor_us", "graph_floor_us"):
        if key in sweep:
            print(f"sweep {key}: {sweep[key]:.4g}")
    for c in checks:
        print(f"target {'MET   ' if c['met'] else 'MISSED'} {c['target']}: {c['value']:.3f}")


def check_args(parser, args) -> int:
    """Refuses bad arguments before anything is built or timed (parser.error: one line, exit 2); returns reps."""
    reps = args.reps if args.reps is not None else (5 if args.quick else 100)
    least = 2 if args.quick else 50
    if reps < least:
        parser.error(f"--reps {reps} is too few; use at least {least} (the median and quantiles need them)")
    if args.plot is None and not args.per_call:
        parser.error("--plot is required (except with --per-call)")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        parser.error(f"--plot {args.plot} must name a .png file")
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        error = writable_file_error(path, flag) if path is not None else None
        if error:
            parser.error(error)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but no CUDA GPU is available; use --device cpu")
    return reps


def main(argv: list[str] | None = None, prog: str = "bench_ops.py") -> int:
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions (smoke test)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on CPU)")
    parser.add_argument("--per-call", action="store_true", help="only the per-call cost of ours vs native ops")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 100; quick 5)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the full results")
    parser.add_argument("--plot", type=Path, default=None, help="PNG file for the size sweep (required without --per-call)")
    args = parser.parse_args(argv)
    reps = check_args(parser, args)
    reason = kernels.unavailable_reason(args.device)
    if reason is not None:
        print(f"bench_ops: stepscope ops unavailable on {args.device}: {reason}", file=sys.stderr)
        return 2
    cfg = BenchConfig(device=args.device, quick=args.quick, compile=not args.no_compile, reps=reps,
                      bytes_per_tensor=(MIB // 4 if args.quick else 256 * MIB), sweep_max_exp=5 if args.quick else 8)  # fmt: skip
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0) if cfg.device == "cuda" else "CPU"
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": name,
            "torch": torch.__version__, "cuda": torch.version.cuda, "argv": sys.argv, "config": asdict(cfg)}  # fmt: skip
    per_call = bench_per_call(["cuda", "cpu"] if cfg.device == "cuda" else ["cpu"], cfg.quick)
    if args.per_call:
        args.out.write_text(json.dumps({"meta": meta, "per_call": per_call}, indent=1))
        print(f"# {name}, torch {torch.__version__}")
        print_per_call(per_call)
        print(f"wrote {args.out}")
        return 0
    timer = Timer(cfg)
    rows, copy_gbps = bench_ops(cfg, timer)
    classic = bench_classic(cfg, timer, copy_gbps)
    sweep = bench_sweep(cfg)
    checks = targets(rows) if cfg.device == "cuda" else []
    meta["copy_gbps"] = copy_gbps
    args.out.write_text(json.dumps({"meta": meta, "ops": rows, "classic": classic, "sweep": sweep, "per_call": per_call,
                                    "targets": checks}, indent=1))  # fmt: skip
    plot_sweep(sweep, args.plot, f"add_relu fp32, time per call ({name}, torch {torch.__version__})")
    print(f"# {name}, torch {torch.__version__}, {cfg.reps} reps, {cfg.bytes_per_tensor // MIB} MiB per tensor")
    print_summary(rows, classic, sweep, checks)
    print_per_call(per_call)
    print(f"wrote {args.out} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The verdict on one (worker, span), the evidence behind it, and findings with their cost and remedies.

Verdicts (exactly one per span), taken from the step as it runs without the profiler (unprofiled.py):
    gpu_bound            GPU trace: kernels run, or queued kernels wait on each other, >= 50% of the step
    transfer_bound       GPU trace: host<->device copies that no kernel overlaps outweigh the kernels, and
                         with them make up >= 50% of the step
    launch_bound         GPU mostly idle, mostly while the host dispatches ops and launches kernels
    data_bound           GPU (or CPU step) mostly waiting for the next batch
    host_bound           GPU mostly idle while the host is blocked in or recovering from syncs, or runs
                         other code (Python outside torch ops); CPU trace: mostly outside torch ops
    communication_bound  collectives not hidden behind compute take the largest share
    cpu_bound            CPU-only traces: the step is mostly spent computing inside torch ops
The gpu_bound threshold is "the GPU is busy for most of the step". Otherwise the largest idle cause names
the verdict, so a verdict never rests on a bucket that a bigger one outweighs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .breakdown import Breakdown
from .metrics import SpanMetrics

VERDICTS = ("launch_bound", "data_bound", "host_bound", "gpu_bound", "transfer_bound", "communication_bound",
            "cpu_bound")
GPU_BOUND_PCT = 50.0

CUDA_GRAPHS = ("Replay the whole step as a CUDA graph (stepscope: `--cuda-graphs`) or use "
               "torch.compile(mode=\"reduce-overhead\") (stepscope: `--compile reduce-overhead`): one "
               "launch instead of one per kernel, no Python between kernels.")
BIGGER_BATCH = ("Use a bigger batch per GPU (stepscope: `--batch-size`), so that each kernel does more work "
                "per launch.")
FUSE = ("Fuse small ops: torch.compile (stepscope: `--compile default` or `--compile max-autotune`), or "
        "fused custom kernels for elementwise chains (stepscope: `--ops custom`).")
REMOVE_SYNC = ("Remove per-step host syncs: no .item()/.cpu()/print(tensor) inside the step; accumulate "
               "metrics on the GPU and read them every N steps, or copy with .to('cpu', non_blocking=True) "
               "into pinned memory and read the value a step later.")
LOADER = ("Load batches in the background: DataLoader(num_workers=N, pin_memory=True, "
          "persistent_workers=True) (stepscope: `--workers N`) and .to(device, non_blocking=True).")
CHEAPER_DATA = ("Make each sample cheaper: decode/augment once and cache, batch the transforms, or augment "
                "on the GPU.")
HOST_WORK = ("Move host work off the critical path: run it every N steps, in a background thread or "
             "process, or on the GPU; find it in the trace's Python stacks (with_stack=True).")
PINNED_COPIES = ("Copy from pinned memory with non_blocking=True so that copies overlap compute "
                 "(DataLoader(pin_memory=True); stepscope: `--pin-memory`), or keep the data resident on the GPU "
                 "(stepscope: `--data-placement device`); avoid per-step host<->device transfers of constants.")
UINT8_INPUTS = ("Send inputs as uint8 and normalise them on the GPU: a quarter of the bytes of float32.")
GPU_AUGMENT = ("Augment on the GPU (batch-wise transforms on device tensors) instead of per sample on the host.")
PREFETCH = ("Prefetch the next batch on a side stream (copy it while the current step computes), so that "
            "no copy sits on the step's critical path.")
WARM_UP_FIRST = ("Profile after warm-up: torch.profiler.schedule(skip_first=10, wait=5, warmup=2, active=3) "
                 "(stepscope: `--skip-first`, `--wait`, `--warmup`), so that CUDA context creation, lazy module "
                 "loading and cuDNN autotuning stay out of the recorded steps.")
GPU_WORK = ("The GPU is the bottleneck, so make its work cheaper: bf16 autocast and channels_last "
            "(stepscope: `--bf16 --channels-last`), torch.compile to fuse memory-bound kernels "
            "(stepscope: `--compile max-autotune`), then the top kernels listed here.")
CPU_WORK = ("The CPU computes the step: train on a GPU (stepscope: `--device cuda`), or try torch.compile "
            "and torch.set_num_threads(<physical cores>).")
COMM = ("Hide communication behind compute: a bigger per-rank batch or gradient accumulation with "
        "no_sync(), DDP's bucket_cap_mb, compressed gradients (bf16 comm hook), a faster interconnect.")
STRAGGLER = ("Balance the ranks: the same data volume per rank, no rank-specific host work (logging, "
             "checkpointing, evaluation) inside the step, no CPU oversubscription on one host.")


@dataclass(frozen=True)
class Finding:
    id: str
    text: str
    cost_ms_per_step: float
    remedies: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "cost_ms_per_step": round(self.cost_ms_per_step, 4),
                "remedies": list(self.remedies)}


def verdict(bd: Breakdown, gpu: bool, loader_paces: bool = False) -> str:
    """The bucket that bounds the step. A GPU busy for at least GPU_BOUND_PCT of it bounds it; else a
    DataLoader that paces the step (`loader_paces`, unprofiled.py) does, since whatever else is made faster
    the host would only wait longer for its batch; else the largest host-side cause."""
    if gpu:
        device = bd.pct("gpu_busy") + bd.pct("device_idle")
        if device + bd.pct("transfer") >= GPU_BOUND_PCT:
            return "transfer_bound" if bd.pct("transfer") > device else "gpu_bound"
    if loader_paces and bd.buckets["data"] > 0:
        return "data_bound"
    if gpu:
        causes = {"launch_bound": bd.buckets["launch"], "data_bound": bd.buckets["data"],
                  "host_bound": bd.buckets["sync"] + bd.buckets["other_host"],
                  "communication_bound": bd.buckets["communication"]}
    else:
        causes = {"cpu_bound": bd.buckets["cpu_ops"], "data_bound": bd.buckets["data"],
                  "host_bound": bd.buckets["other_host"], "communication_bound": bd.buckets["communication"]}
    return max(causes, key=causes.get)


def evidence(bd: Breakdown, m: SpanMetrics, gpu: bool) -> list[str]:
    """The numbers behind the verdict, largest share first: one line per time bucket."""
    labels = {
        "gpu_busy": "GPU busy in kernels",
        "transfer": "GPU busy in host<->device copies (no kernel running)",
        "device_idle": "GPU idle between already-queued work",
        "communication": "communication not overlapped with compute",
        "launch": "GPU idle while the host dispatches ops / launches kernels",
        "data": "GPU idle while the host waits for the next batch" if gpu else "waiting for the next batch",
        "sync": "GPU idle around host-device syncs",
        "other_host": ("GPU idle while the host runs code outside torch ops" if gpu
                       else "outside torch ops (Python, sleeping, waiting)"),
        "cpu_ops": "inside torch ops",
    }
    order = sorted(bd.buckets, key=bd.buckets.get, reverse=True)
    lines = [f"step {m.step_ms:.2f} ms without the profiler ({m.steps} profiled steps analysed)"]
    lines += [f"{bd.pct(b):.1f}% ({bd.ms_per_step(b):.2f} ms) {labels[b]}"
              for b in order if bd.buckets[b] > 0]
    return lines


def findings(bd: Breakdown, m: SpanMetrics, gpu: bool, the_verdict: str) -> list[Finding]:
    """Findings worth acting on (each above a share of the step, or the one behind the verdict), costliest
    first."""
    candidates = _gpu_candidates(bd, m) if gpu else _cpu_candidates(bd, m)
    primary = _primary(the_verdict, candidates)
    out = [f for f, share in candidates if share >= _threshold(f.id) or f.id == primary]
    return sorted(out, key=lambda f: f.cost_ms_per_step, reverse=True)


def remedies(found: list[Finding]) -> list[str]:
    out: list[str] = []
    for f in sorted(found, key=lambda f: f.cost_ms_per_step, reverse=True):
        out += [r for r in f.remedies if r not in out]
    return out


def _threshold(finding_id: str) -> float:
    """Share of the step (%) from which a finding is reported. Any sync inside the step is worth naming; busy
    compute is a finding only where it is the bottleneck."""
    return {"host_sync": 0.0, "data_loading": 5.0, "gpu_compute": GPU_BOUND_PCT,
            "cpu_compute": 50.0, "transfer": 10.0}.get(finding_id, 10.0)


def _primary(the_verdict: str, candidates: list[tuple[Finding, float]]) -> str:
    if the_verdict == "host_bound":
        shares = {f.id: f.cost_ms_per_step for f, _ in candidates if f.id in ("host_work", "host_sync")}
        return max(shares, key=shares.get) if shares else "host_work"
    return {"launch_bound": "launch_overhead", "data_bound": "data_loading", "gpu_bound": "gpu_compute",
            "cpu_bound": "cpu_compute", "communication_bound": "communication",
            "transfer_bound": "transfer"}[the_verdict]


def _gpu_candidates(bd: Breakdown, m: SpanMetrics) -> list[tuple[Finding, float]]:
    out = []
    k, kd, ld = m.kernels_per_step, m.median_kernel_us, m.median_launch_us
    kernels = f"{k:.0f} kernels per step"
    if kd is not None and ld is not None:
        rel = "shorter than" if kd < 0.9 * ld else "about as long as" if kd <= 1.1 * ld else "vs"
        kernels += f", median {kd:.1f} µs, {rel} their launch call ({ld:.1f} µs)"
    if m.host_us_per_kernel is not None:
        kernels += f"; the host spends {m.host_us_per_kernel:.1f} µs per kernel"
    out.append((Finding("launch_overhead",
                        f"{kernels}; GPU idle {bd.ms_per_step('launch'):.2f} ms per step "
                        f"({bd.pct('launch'):.0f}%) while the host dispatches ops and launches kernels",
                        bd.ms_per_step("launch"), (CUDA_GRAPHS, BIGGER_BATCH, FUSE)), bd.pct("launch")))
    if m.syncs_per_step:
        names = sorted({e.name for e in m.sync_episodes})
        out.append((Finding("host_sync",
                            f"{m.syncs_per_step:g} host sync{'' if m.syncs_per_step == 1 else 's'} per step, "
                            f"{m.sync_ms_per_step:.2f} ms blocked "
                            f"({', '.join(names)}); GPU idle {bd.ms_per_step('sync'):.2f} ms per step "
                            "around them",
                            max(bd.ms_per_step("sync"), m.sync_ms_per_step), (REMOVE_SYNC,)),
                    bd.pct("sync")))
    out.append((_data_finding(bd, m, "the GPU idles"), bd.pct("data")))
    out.append((Finding("host_work",
                        f"GPU idle {bd.ms_per_step('other_host'):.2f} ms per step "
                        f"({bd.pct('other_host'):.0f}%) "
                        "while the host runs code outside torch ops (Python between ops, metrics, logging)",
                        bd.ms_per_step("other_host"), (HOST_WORK, CUDA_GRAPHS)), bd.pct("other_host")))
    if m.memcpy_ms_per_step:
        out.append((Finding("transfer",
                            f"host<->device copies {m.memcpy_ms_per_step:.2f} ms per step "
                            f"({m.memcpy_per_step:.0f} copies), {bd.ms_per_step('transfer'):.2f} ms of it "
                            f"({bd.pct('transfer'):.0f}% of the step) with no kernel running",
                            bd.ms_per_step("transfer"), (PINNED_COPIES, UINT8_INPUTS, GPU_AUGMENT, PREFETCH)),
                    bd.pct("transfer")))
    out.append((Finding("device_idle",
                        f"GPU idle {bd.ms_per_step('device_idle'):.2f} ms per step "
                        f"({bd.pct('device_idle'):.0f}%) "
                        "between kernels that were already queued (dependencies, many tiny kernels)",
                        bd.ms_per_step("device_idle"), (FUSE, BIGGER_BATCH)), bd.pct("device_idle")))
    top = f"; top kernel {_short(m.top[0].name)} ({m.top[0].pct:.0f}% of kernel time)" if m.top else ""
    out.append((Finding("gpu_compute", f"GPU busy {m.gpu_busy_pct:.0f}% of the step{top}",
                        bd.ms_per_step("gpu_busy"), (GPU_WORK,)), bd.pct("gpu_busy")))
    out.append((_comm_finding(bd, m), bd.pct("communication")))
    return out


def _cpu_candidates(bd: Breakdown, m: SpanMetrics) -> list[tuple[Finding, float]]:
    top = f"; top op {m.top[0].name} ({m.top[0].pct:.0f}% of op self time)" if m.top else ""
    return [
        (Finding("cpu_compute", f"CPU inside torch ops {bd.pct('cpu_ops'):.0f}% of the step "
                                f"({bd.ms_per_step('cpu_ops'):.2f} ms){top}",
                 bd.ms_per_step("cpu_ops"), (CPU_WORK,)), bd.pct("cpu_ops")),
        (_data_finding(bd, m, "the step waits"), bd.pct("data")),
        (Finding("host_work", f"{bd.ms_per_step('other_host'):.2f} ms per step ({bd.pct('other_host'):.0f}%) "
                              "outside torch ops (Python, sleeping, waiting on a lock)",
                 bd.ms_per_step("other_host"), (HOST_WORK,)), bd.pct("other_host")),
        (_comm_finding(bd, m), bd.pct("communication")),
    ]


def _data_finding(bd: Breakdown, m: SpanMetrics, who_waits: str) -> Finding:
    return Finding("data_loading",
                   f"data loading {m.data_ms_per_step:.2f} ms per step "
                   f"({100.0 * m.data_ms_per_step / m.step_ms:.0f}% of step); {who_waits} "
                   f"{bd.ms_per_step('data'):.2f} ms per step for input",
                   bd.ms_per_step("data"), (LOADER, CHEAPER_DATA))


def _comm_finding(bd: Breakdown, m: SpanMetrics) -> Finding:
    hidden = 100.0 * m.overlap_ms_per_step / m.comm_ms_per_step if m.comm_ms_per_step else 0.0
    return Finding("communication",
                   f"communication {m.comm_ms_per_step:.2f} ms per step, {hidden:.0f}% overlapped with "
                   f"compute; {bd.ms_per_step('communication'):.2f} ms per step "
                   f"({bd.pct('communication'):.0f}%) exposed",
                   bd.ms_per_step("communication"), (COMM,))


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def cold_start_finding(steps: tuple[int, ...], cold_ms: float, warm_ms: float, module_loads: int,
                       whole_window: bool) -> Finding:
    """Steps that do not represent the run (trust.py): named, costed, and left out of the verdict."""
    loads = f", {module_loads} CUDA module loads" if module_loads else ""
    if whole_window:
        text = (f"every profiled step looks like cold start ({cold_ms:.1f} ms per step{loads}): the window "
                "holds the process's first CUDA work, so the verdict below describes start-up, not training")
    else:
        names = ", ".join(f"#{s}" for s in steps)
        text = (f"cold start: step{'s' if len(steps) > 1 else ''} {names} took {cold_ms:.1f} ms vs "
                f"{warm_ms:.2f} ms for the others{loads} (CUDA context, lazy module loading, cuDNN autotuning); "
                "left out of the verdict")
    return Finding("cold_start", text, cold_ms - warm_ms, (WARM_UP_FIRST,))

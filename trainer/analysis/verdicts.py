"""The verdict registry: every verdict stepscope can give, one record each, and nowhere else.

    from stepscope.analysis.verdicts import REGISTRY, by_name
    by_name("launch_bound").causes[0].finding      # "launch_overhead": the finding behind the verdict
    by_name("launch_bound").causes[0].fixes        # the trainer flags that remove it (stepscope verify)
    by_name("launch_bound").causes[0].predict(u)   # the step after the fix, a (fastest, slowest) range in ms

A record holds everything about one verdict:
- ``buckets``: the breakdown buckets (breakdown.py) whose time is its cause. The verdict of a step
  (findings.verdict) is the device verdict when the GPU works for at least GPU_BOUND_PCT of the step
  (``kind="device"``), else ``data_bound`` when the DataLoader paces the step (``paces``), else the host-side
  cause with the most time. Ties go to the record listed first in REGISTRY;
- ``traces``: which traces it can describe: "gpu", "cpu" or "any";
- ``causes``: the findings (findings.py) that can stand behind it, each with the share of the step from
  which that finding is reported, its remedies (text naming the stepscope flag or the code change), the
  trainer flags that remove it (``fixes``, tried in order by verify.py) and the rule that predicts the step
  once they do (``predict``, from the run's unprofiled figures). Of several causes the costliest is the
  verdict's primary finding;
- ``readme``: its row in the verdict table of docs/verdicts.md (tests/test_verdict_registry.py holds the two
  together);
- ``tone``: the colour of its badge in the tab ("good" or "warn"), which the tab gets from the plugin.
The buckets and finding ids a record names are analysis/vocabulary.py's constants.

Adding a verdict (say ``memory_bound``) is analysis/vocabulary.py's recipe, "adding a verdict with a new
bucket": its bucket and finding there, how the bucket is measured in breakdown.py, one record here, placed
in REGISTRY where its ties should fall, with its cause (the finding that reports the bucket, its remedies,
and, where a trainer flag removes the cause, its fixes and ``predict`` rule; a flag verify.py has not
applied before also needs its check in verify._refusal), the finding's candidate in findings.py, its row in
docs/verdicts.md's verdict table, and a test; the golden reports gain the new bucket's key.
Nothing else names verdicts: other modules take them from here (the names are string literals in this module
only, which tests/test_verdict_registry.py checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stepscope.analysis.vocabulary import (
    COMMUNICATION,
    CPU_COMPUTE,
    CPU_OPS,
    DATA,
    DATA_LOADING,
    DEVICE_IDLE,
    GPU_BUSY,
    GPU_COMPUTE,
    HOST_SYNC,
    HOST_WORK,
    LAUNCH,
    LAUNCH_OVERHEAD,
    OTHER_HOST,
    SYNC,
    TRANSFER,
)

GPU_BOUND_PCT = 50.0  # the GPU busy (kernels, copies, its own gaps) for at least this share bounds the step
# Two device verdicts whose shares are this close (the smaller at least this fraction of the larger) are a
# near tie: a pageable copy's own time moved 20% within one scenario's run on the H100 and the H200
# (BENCHMARKS.md), so which of copies and kernels is the larger can flip between moments of one run.
DEVICE_TIE = 0.8
OTHER_FINDING_PCT = 10.0  # share of the step from which a finding that stands behind no verdict is reported
LOG_EVERY_FACTOR = 10  # the host-sync fix logs (and so syncs) this many times less often
# A replayed CUDA graph runs each kernel this much longer than the eager trace shows it, at most: its own
# turn-around between dependent kernels (0.04 to 2.4 µs a kernel over the launch-bound H100 runs of
# tests/data/suite and holdout, graph replay against the trace's kernel time).
GRAPH_US_PER_KERNEL = 2.5

# Remedies: what to change, and the stepscope flag that does it where one exists.
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
MOVE_HOST_WORK = ("Move host work off the critical path: run it every N steps, in a background thread or "
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
BALANCE_RANKS = ("Balance the ranks: the same data volume per rank, no rank-specific host work (logging, "
             "checkpointing, evaluation) inside the step, no CPU oversubscription on one host.")
GPU_ONLY = (CUDA_GRAPHS,)


@dataclass(frozen=True)
class Unprofiled:
    """One training step as it runs without the profiler, in ms: the run's own telemetry (trainer/demo/timing.py
    PHASES: the mean step and its host phases) and the device time of its diagnosis (the unprofiled
    breakdown, whose GPU buckets the profiler leaves alone). `device_ms`: the GPU busy in kernels, copies
    and collectives; `gaps_ms`: its idle between work already queued; 0 for both on a CPU."""

    step_ms: float
    device_ms: float = 0.0
    gaps_ms: float = 0.0
    transfer_ms: float = 0.0  # the part of device_ms that copies inputs with no kernel running
    sync_ms: float = 0.0  # GPU idle around host syncs (the breakdown's sync bucket)
    data_ms: float = 0.0  # the host waits for its batch
    copy_host_ms: float = 0.0  # the host issues the input copy (all of a pageable copy)
    dispatch_ms: float = 0.0  # the host queues forward, backward and optimizer (computes them, on a CPU)
    cpu_ms: float | None = None  # the training process's CPU time, all its threads
    cores: float = 1.0  # the cores' worth of parallel CPU throughput the run may use (verify measures it)
    kernels: float = 0.0  # kernels per step

    @classmethod
    def of_run(cls, telemetry: dict, span: dict, cores: float) -> Unprofiled:
        """From run.json's `final.telemetry` and a diagnosis span (its `breakdown_ms_per_step`, the
        unprofiled step's buckets, and its kernels per step)."""
        b = {k: v or 0.0 for k, v in span.get("breakdown_ms_per_step", {}).items()}
        return cls(step_ms=telemetry["step_ms"], kernels=span.get("metrics", {}).get("kernels_per_step") or 0.0,
                   device_ms=b.get(GPU_BUSY, 0.0) + b.get(TRANSFER, 0.0) + b.get(COMMUNICATION, 0.0)
                   if GPU_BUSY in b else 0.0,
                   gaps_ms=b.get(DEVICE_IDLE, 0.0), transfer_ms=b.get(TRANSFER, 0.0),
                   sync_ms=b.get(SYNC, 0.0), data_ms=telemetry.get("data_ms") or 0.0,
                   copy_host_ms=telemetry.get("copy_host_ms") or 0.0,
                   dispatch_ms=telemetry.get("dispatch_ms") or 0.0, cpu_ms=telemetry.get("cpu_ms"), cores=cores)


# Prediction rules: the step once a fix has removed its cause, as (fastest, slowest) ms. The fastest keeps
# only what the fix surely leaves (the GPU's busy time, the host work it does not touch); the slowest also
# keeps whatever it may not remove (the GPU's own gaps between kernels, the cores the work needs). The host
# and the GPU overlap once nothing makes one wait for the other, so each is a max, never a sum.

def without_launches(u: Unprofiled) -> tuple[float, float]:
    """Without the host's dispatch: the GPU time (at worst with its gaps and a graph's turn-around between
    kernels), or the wait for the batch and the input copy where longer. One CUDA-graph replay replaces a
    launch per kernel; the host's other work stays."""
    kept = u.data_ms + u.copy_host_ms
    turnaround = u.kernels * GRAPH_US_PER_KERNEL / 1e3
    return max(u.device_ms, kept), max(u.device_ms + u.gaps_ms + turnaround, kept)


def with_workers(u: Unprofiled) -> tuple[float, float]:
    """Without the wait for the batch: the GPU time or the host's dispatch, whichever is longer; at worst also
    the input copy and the process's CPU time per step spread over the cores. Workers load in the
    background, but the loading still needs CPU: worker processes move it off the training process, not off
    the machine."""
    return (max(u.device_ms, u.dispatch_ms),
            max(u.device_ms + u.gaps_ms, u.dispatch_ms + u.copy_host_ms, (u.cpu_ms or 0.0) / max(u.cores, 1)))


def fewer_syncs(u: Unprofiled) -> tuple[float, float]:
    """With host and GPU overlapping: the GPU time or the host's work per step, whichever is longer; at worst
    only the GPU's idle around the syncs that go is saved. Syncing LOG_EVERY_FACTOR times less often, the
    host no longer waits for the GPU to drain its queue."""
    host = u.data_ms + u.copy_host_ms + u.dispatch_ms
    saved = u.sync_ms * (1 - 1 / LOG_EVERY_FACTOR)
    return max(u.device_ms, host), max(u.device_ms + u.gaps_ms, host, u.step_ms - saved)


def overlapped_copies(u: Unprofiled) -> tuple[float, float]:
    """Without the copies on the critical path: the kernels' time or the host's work, whichever is longer; at
    worst the copies stay on the step's stream. With pinned non-blocking copies (or data kept on the GPU)
    the host no longer stages them."""
    host = u.data_ms + u.dispatch_ms
    return max(u.device_ms - u.transfer_ms, host), max(u.device_ms + u.gaps_ms, host)


@dataclass(frozen=True)
class Fix:
    """Trainer flags that remove a cause; "{workers}" and "{log_every}" take values from the run's config
    (verify.py)."""

    flags: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Cause:
    finding: str  # the finding id (findings.py)
    threshold_pct: float  # the share of the step from which the finding is reported
    remedies: tuple[str, ...]
    fixes: tuple[Fix, ...] = ()
    predict: Callable[[Unprofiled], tuple[float, float]] | None = None

    def remedies_on(self, gpu: bool) -> tuple[str, ...]:
        """Its remedies for a GPU or a CPU trace (a CPU trace has no kernels to graph)."""
        return self.remedies if gpu else tuple(r for r in self.remedies if r not in GPU_ONLY)


@dataclass(frozen=True)
class Verdict:
    name: str
    traces: str  # "gpu", "cpu" or "any"
    kind: str  # "device": taken when the GPU is busy most of the step; "host": the largest idle cause
    buckets: tuple[str, ...]
    causes: tuple[Cause, ...]  # the first is the primary finding where none of them was found
    readme: str  # its meaning, as the verdict table of docs/verdicts.md gives it
    paces: bool = False  # taken whenever the DataLoader paces the step (and the GPU is not busy most of it)
    tone: str = "warn"  # the tab's badge: "good" where the step is bound by the model's own work on the GPU

    def applies(self, gpu: bool) -> bool:
        return self.traces == "any" or self.traces == ("gpu" if gpu else "cpu")

    def cause(self, finding: str) -> Cause | None:
        return next((c for c in self.causes if c.finding == finding), None)


GPU_BOUND = Verdict(
    "gpu_bound", "gpu", "device", (GPU_BUSY, DEVICE_IDLE),
    (Cause(GPU_COMPUTE, GPU_BOUND_PCT, (GPU_WORK,)),),
    "GPU busy in kernels (plus gaps the GPU causes itself) for at least half of the step", tone="good")
TRANSFER_BOUND = Verdict(
    "transfer_bound", "gpu", "device", (TRANSFER,),
    (Cause(TRANSFER, 10.0, (PINNED_COPIES, UINT8_INPUTS, GPU_AUGMENT, PREFETCH),
           (Fix(("--pin-memory",), "copy from pinned memory with non_blocking=True"),
            Fix(("--data-placement", "device"), "keep the data on the GPU")), overlapped_copies),),
    "host<->device copies that no kernel overlaps outweigh the kernels, and the GPU is busy most of the step")
LAUNCH_BOUND = Verdict(
    "launch_bound", "gpu", "host", (LAUNCH,),
    (Cause(LAUNCH_OVERHEAD, OTHER_FINDING_PCT, (CUDA_GRAPHS, BIGGER_BATCH, FUSE),
           (Fix(("--cuda-graphs",), "replay the whole step as one CUDA graph"),
            Fix(("--compile", "reduce-overhead"), "torch.compile with CUDA graphs (reduce-overhead)")),
           without_launches),),
    "the GPU mostly idles while the host dispatches ops and launches many short kernels")
CPU_BOUND = Verdict(
    "cpu_bound", "cpu", "host", (CPU_OPS,),
    (Cause(CPU_COMPUTE, 50.0, (CPU_WORK,)),),
    "CPU-only traces: the CPU is busy computing inside torch ops (GPU terms are null)")
DATA_BOUND = Verdict(
    "data_bound", "any", "host", (DATA,),
    (Cause(DATA_LOADING, 5.0, (LOADER, CHEAPER_DATA),
           (Fix(("--workers", "{workers}", "--pin-memory"), "DataLoader workers load batches in the background"),),
           with_workers),),
    "the GPU mostly idles while the host waits for the next batch", paces=True)
HOST_BOUND = Verdict(
    "host_bound", "any", "host", (SYNC, OTHER_HOST),
    (Cause(HOST_WORK, OTHER_FINDING_PCT, (MOVE_HOST_WORK, CUDA_GRAPHS)),
     Cause(HOST_SYNC, 0.0, (REMOVE_SYNC,),  # any sync inside the step is worth naming
           (Fix(("--log-every", "{log_every}"), f"sync at the logging cadence {LOG_EVERY_FACTOR} times less often"),), fewer_syncs)),
    "the GPU mostly idles while the host runs other code, often right after a sync")
COMMUNICATION_BOUND = Verdict(
    "communication_bound", "any", "host", (COMMUNICATION,),
    (Cause(COMMUNICATION, OTHER_FINDING_PCT, (COMM,)),),
    "multi-rank runs: collectives not hidden behind compute dominate the step")

REGISTRY = (GPU_BOUND, TRANSFER_BOUND, LAUNCH_BOUND, CPU_BOUND, DATA_BOUND, HOST_BOUND, COMMUNICATION_BOUND)
VERDICTS = tuple(v.name for v in REGISTRY)


def by_name(name: str) -> Verdict:
    for v in REGISTRY:
        if v.name == name:
            return v
    raise KeyError(f"{name}: not a verdict (one of {', '.join(VERDICTS)})")


def threshold_pct(finding: str) -> float:
    """Share of the step (%) from which a finding is reported: its cause's, else OTHER_FINDING_PCT."""
    return next((c.threshold_pct for v in REGISTRY for c in v.causes if c.finding == finding), OTHER_FINDING_PCT)


def cause_of(finding: str) -> Cause:
    """The cause record of a finding id that stands behind a verdict."""
    return next(c for v in REGISTRY for c in v.causes if c.finding == finding)


def primary_cause(verdict: Verdict, costs: dict[str, float]) -> Cause:
    """The cause behind `verdict`: of its causes found (`costs`: finding id -> ms per step, in the order
    found), the costliest; none found: its first."""
    found = {f: ms for f, ms in costs.items() if verdict.cause(f) is not None}
    return verdict.cause(max(found, key=found.get)) if found else verdict.causes[0]

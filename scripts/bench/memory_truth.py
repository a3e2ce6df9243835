"""The memory diagnosis against the device's own counters, on one GPU (scripts/verify_memory.py's code).

    python scripts/verify_memory.py --out $OUT/memory [--reps 5] [--parts peaks boundary causes oom]
    python scripts/verify_memory.py --out $OUT/memory_bisect --parts bisect [--bisect-budget 420]
    python scripts/verify_memory.py --out $OUT/memory_ddp --parts ddp_peaks      # 2 GPUs

peaks     loops of several families, recorded with profile_memory=True (plain torch.profiler, stepscope.schedule
          with trace_handler, the trainer): each profiled step's peak allocated from the trace (stepscope's
          memory section) against torch.cuda.max_memory_allocated() after reset_peak_memory_stats() at the same
          step's start (the trainer: its run's largest window peak); pass within 1%.
boundary  the predicted largest batch (memory.batch_scale from a recorded step at a small batch) tried in fresh
          processes at 0.9x and 1.1x the prediction: the prediction is within 10% of the out-of-memory boundary
          when the first fits and the second does not.
causes    injected causes, ``--reps`` runs with and ``--reps`` without each (one process per cause and arm, a
          fresh model and loop per run, through stepscope.schedule + trace_handler: 5 profiled steps after 40
          timed ones): variable shapes (fragmentation),
          empty_cache() every step (allocator_churn), 2 MiB kept every step (memory_creep); hits and false
          positives of the matching finding, and each run's figures (why a finding fired or not); the first
          churn run's trace is kept under OUT/churn_trace (a real trace with allocator churn for tests/data).
bisect    per family, the predicted largest batch (batch_scale_predicted of the report's JSON, from a loop
          recorded at the family's base batch) against the real out-of-memory boundary, found by bisection in
          fresh processes (each try: 3 training steps at batch b, fits or runs out of memory) to within 2%,
          starting at the prediction -15% and +15%; every try's peak allocated and reserved and persistent bytes
          (allocated between steps), and those at 1x, 2x and 4x the base batch where they fit (one process,
          the cache emptied between them; what fits there starts the bisection above it): the data to fit a
          better predictor. Each family has its share of --bisect-budget seconds (what the ones before it left);
          one that runs out reports the bracket it reached.
predict   per family with a boundary bisected before on this GPU model (BOUNDARIES), the prediction alone against
          it: the loop recorded at the base batch, no bisection (the boundary is the device's, not stepscope's).
ddp_peaks each profiled step's peak allocated from the trace of each rank of a 2-GPU DDP loop (torchrun, NCCL)
          against that rank's torch.cuda.max_memory_allocated() for the step; pass within 1%.
oom       a real out-of-memory error in a stepscope.profile loop (memory history on): the process ends with the
          error, and oom/ holds the snapshot (with stacks), oom.json and diagnosis.md.
history   what allocation stacks cost: a resnet18 step with torch.cuda.memory._record_memory_history on and off,
          interleaved in one process.

Writes ``OUT/memory_truth.json`` and prints a table per part. Every try is bounded by a timeout.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PEAK_TOLERANCE = 0.01
TRY_TIMEOUT_S = 120

# each family: (name, batch for the recorded loop, code building `model`, `batch(b)` -> (inputs, targets),
# `loss(model, x, y)`; the boundary part scales the batch)
FAMILIES = {
    "resnet50": (64, """
        import torchvision
        model = torchvision.models.resnet50().cuda()
        def batch(b): return torch.randn(b, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (b,), device="cuda")
        def loss(model, x, y): return torch.nn.functional.cross_entropy(model(x), y)
    """),
    "vit_b_16": (32, """
        import torchvision
        model = torchvision.models.vit_b_16().cuda()
        def batch(b): return torch.randn(b, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (b,), device="cuda")
        def loss(model, x, y): return torch.nn.functional.cross_entropy(model(x), y)
    """),
    "gpt": (16, """
        class GPT(torch.nn.Module):
            def __init__(self, vocab=32000, d=768, layers=8, heads=12, seq=512):
                super().__init__()
                self.emb, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Parameter(torch.zeros(seq, d))
                layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True)
                self.blocks = torch.nn.TransformerEncoder(layer, layers)
                self.head = torch.nn.Linear(d, vocab)
                self.mask = torch.nn.Transformer.generate_square_subsequent_mask(seq)
            def forward(self, x):
                h = self.emb(x) + self.pos[: x.shape[1]]
                return self.head(self.blocks(h, mask=self.mask.to(x.device), is_causal=True))
        model = GPT().cuda()
        def batch(b):
            x = torch.randint(0, 32000, (b, 512), device="cuda")
            return x, x
        def loss(model, x, y): return torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    """),
    "mlp_adamw": (256, """
        model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU())
                                      for _ in range(8)]).cuda()
        def batch(b): return torch.randn(b, 4096, device="cuda"), torch.randn(b, 4096, device="cuda")
        def loss(model, x, y): return torch.nn.functional.mse_loss(model(x), y)
    """),
    "hf_gpt2": (8, """
        import transformers
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).cuda()
        def batch(b):
            x = torch.randint(0, 50257, (b, 512), device="cuda")
            return x, x
        def loss(model, x, y): return model(input_ids=x, labels=y).loss
    """),
    "resnet18_compiled": (128, """
        import torchvision
        model = torch.compile(torchvision.models.resnet18().cuda())
        def batch(b): return torch.randn(b, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (b,), device="cuda")
        def loss(model, x, y): return torch.nn.functional.cross_entropy(model(x), y)
    """),
}

# a loop recorded with profile_memory; per profiled step, the device's own peak (reset at the step's start)
PEAK_LOOP = """
import json, sys, torch, stepscope
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
out, style, b = sys.argv[1], sys.argv[2], int(sys.argv[3])
{family}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = batch(b)
def step():
    loss(model, x, y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
truth = {{}}
if style == "schedule":
    sched = stepscope.schedule(wait=5, warmup=1, active=3, repeat=1, window=2, warm_steps=1)
    handler = stepscope.trace_handler(out)
else:
    sched, handler = schedule(wait=3, warmup=1, active=3, repeat=1), tensorboard_trace_handler(out)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True, schedule=sched,
             on_trace_ready=handler) as prof:
    for i in range(12):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        n = prof.step_num
        step()
        torch.cuda.synchronize()
        truth[n] = torch.cuda.max_memory_allocated()
        prof.step()
if style == "schedule":
    handler.close()
print(json.dumps({{"truth": truth}}))
"""

# one try of a batch: a few steps, "ok" or "oom"
TRY_LOOP = """
import sys, torch
b = int(sys.argv[1])
{family}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
try:
    x, y = batch(b)  # made once, as in the recorded loop (PEAK_LOOP), where it is part of the persistent bytes
    for _ in range(3):
        loss(model, x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print("ok", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
except torch.OutOfMemoryError:
    print("oom")
"""

# the user's loop of the product's road (stepscope.schedule + trace_handler): the trace of 5 profiled steps and
# the allocator's counters over the 40 unprofiled steps before them (windows of 5 steps) reach the analysis
CAUSE_LOOP = """
import sys, torch, torchvision, stepscope
from torch.profiler import ProfilerActivity, profile
out, cause, on, reps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
for rep in range(reps):  # each a fresh model and loop, recorded into its own folder
    model = torchvision.models.resnet18().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep = []
    g = torch.Generator().manual_seed(rep)
    handler = stepscope.trace_handler(f"{out}/{rep}")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                 schedule=stepscope.schedule(wait=40, warmup=1, active=5, repeat=1, window=5, warm_steps=1),
                 on_trace_ready=handler) as prof:
        for i in range(47):
            b = int(torch.randint(16, 257, (1,), generator=g)) if cause == "fragmentation" and on else 128
            side = int(torch.randint(96, 257, (1,), generator=g)) if cause == "fragmentation" and on else 224
            x = torch.randn(b, 3, side, side, device="cuda")
            torch.nn.functional.cross_entropy(model(x), torch.randint(0, 1000, (b,), device="cuda")).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cause == "churn" and on:
                torch.cuda.empty_cache()
            if cause == "creep" and on:
                keep.append(torch.empty(2 << 20, dtype=torch.uint8, device="cuda"))
            prof.step()
    handler.close()
    del model, opt, keep
    torch.cuda.empty_cache()
"""

OOM_LOOP = """
import sys, torch, stepscope
torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Linear(4096, 4096).cuda()
keep = []
with stepscope.profile(sys.argv[1], wait=5, warmup=1, active=2, skip_first=0, capture_on_slowdown=False) as prof:
    for i in range(40):
        model(torch.randn(256, 4096, device="cuda")).sum().backward()
        if i == 25:
            keep.append(torch.empty(torch.cuda.get_device_properties(0).total_memory * 2, dtype=torch.uint8,
                                    device="cuda"))
        prof.step()
"""

# the cost of allocation stacks: the same loop timed with torch.cuda.memory._record_memory_history on and off,
# interleaved blocks of steps in one process (CUDA events around each block)
HISTORY_LOOP = """
import json, statistics, torch, torchvision
model = torchvision.models.resnet18().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (128,), device="cuda")
def block(n=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n
block()
times = {"off": [], "on": []}
for _ in range(5):
    for mode in ("off", "on"):
        torch.cuda.memory._record_memory_history(max_entries=100000 if mode == "on" else 0,
                                                 enabled="all" if mode == "on" else None)
        block(3)
        times[mode].append(block())
torch.cuda.memory._record_memory_history(enabled=None)
print(json.dumps({k: statistics.median(v) for k, v in times.items()}))
"""

# one try of the bisection: 3 training steps at batch b in a fresh process, as JSON: fits ("ok") or runs out of
# memory ("oom"; cuBLAS/cuDNN failing to allocate counts too), with the device's peaks of the last step and the
# bytes held between steps (weights, optimizer state, the batch; gradients set to None)
TRAIN_AT = """
import json, sys, torch
{family}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def train_at(b):
    out = {{"batch": b}}
    try:
        x, y = batch(b)
        for i in range(3):
            if i == 2:  # the steady step: optimizer state made, the first step's workspace settled
                torch.cuda.synchronize()
                out["persistent"] = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            loss(model, x, y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        out.update(result="ok", peak_allocated=torch.cuda.max_memory_allocated(),
                   peak_reserved=torch.cuda.max_memory_reserved(),
                   capacity=torch.cuda.get_device_properties(0).total_memory)
    except torch.OutOfMemoryError as e:
        out.update(result="oom", error=str(e).splitlines()[0][:300])
    except RuntimeError as e:
        text = str(e)
        oom = "out of memory" in text or "ALLOC_FAILED" in text
        out.update(result="oom" if oom else "error", error=text.splitlines()[0][:300])
    return out
"""
BISECT_TRY = TRAIN_AT + """
print(json.dumps(train_at(int(sys.argv[1]))))
"""
# SIZES times the base batch in one process, smallest first, the cache emptied between them (the model and its
# optimizer state stay, as they would in a fresh process); one JSON line each, up to the first that does not fit
SIZES_LOOP = TRAIN_AT + """
for m in (int(m) for m in sys.argv[2].split(",")):
    row = train_at(m * int(sys.argv[1]))
    print(json.dumps({{**row, "multiple": m}}), flush=True)
    if row["result"] != "ok":
        break
    torch.cuda.empty_cache()
"""

# each rank of a 2-GPU DDP loop (torchrun): profiled steps, and each step's own peak (reset at its start)
DDP_PEAK_LOOP = """
import json, os, sys, torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
out, b = sys.argv[1], int(sys.argv[2])
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
{family}
model = DistributedDataParallel(model, device_ids=[local])
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = batch(b)
truth = {{}}
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             schedule=schedule(wait=3, warmup=1, active=3, repeat=1),
             on_trace_ready=tensorboard_trace_handler(out, worker_name=f"rank{{rank}}")) as prof:
    for i in range(9):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        n = prof.step_num
        loss(model, x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        truth[n] = torch.cuda.max_memory_allocated()
        prof.step()
with open(f"{{out}}/truth_rank{{rank}}.json", "w") as f:
    json.dump(truth, f)
dist.destroy_process_group()
"""

FINDING = {"fragmentation": "fragmentation", "churn": "allocator_churn", "creep": "memory_creep"}
# the bisection: tries start at the prediction -/+ BISECT_SPREAD, widen by BISECT_GROW where both fit or both
# fail, and stop once the largest batch that fits and the smallest that does not are within BISECT_TOLERANCE
BISECT_SPREAD = 0.15
BISECT_GROW = 1.5
BISECT_TOLERANCE = 0.02
BISECT_BUDGET_S = 420.0
BISECT_MIN_TRY_S = 15.0  # a try given less than this is not started
BISECT_FAMILIES = ["resnet50", "vit_b_16", "gpt", "mlp_adamw", "hf_gpt2", "resnet18_compiled"]
DDP_PEAK_TIMEOUT_S = 300


def _run(code: str, args: list[str], timeout: float = TRY_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        return subprocess.CompletedProcess(e.cmd, 124, out, f"timed out after {timeout:g} s")


def _family(name: str) -> str:
    return textwrap.dedent(FAMILIES[name][1])


def _span(folder: Path):
    import stepscope
    return stepscope.analyze(folder).spans[0]


def _memory(folder: Path):
    return _span(folder).memory


def peaks(out: Path, families: list[str], rows: list, save) -> list[dict]:
    for name in families:
        for style in ("torch", "schedule") if name in ("resnet50", "gpt") else ("torch",):
            folder = out / "peaks" / f"{name}_{style}"
            r = _run(PEAK_LOOP.format(family=_family(name)), [str(folder), style, str(FAMILIES[name][0])])
            row = {"family": name, "recorder": style, "exit": r.returncode}
            if r.returncode != 0:
                row["error"] = r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []
                rows.append(row)
                save()
                print(f"peaks {name} {style}: failed ({row['error']})", flush=True)
                continue
            truth = {int(k): v for k, v in json.loads(r.stdout.strip().splitlines()[-1])["truth"].items()}
            mem = _memory(folder)
            steps = []
            for st in mem.devices[0].steps:
                t = truth.get(st.step)
                steps.append({"step": st.step, "trace": st.peak_allocated, "truth": t,
                              "error": None if not t else (st.peak_allocated - t) / t})
            row["steps"] = steps
            row["pass"] = bool(steps) and all(s["error"] is not None and abs(s["error"]) <= PEAK_TOLERANCE for s in steps)
            rows.append(row)
            save()
            print(f"peaks {name} {style}: " + ", ".join(f"step {s['step']} trace {s['trace'] / 2**30:.3f} GiB truth "
                                                       f"{(s['truth'] or 0) / 2**30:.3f} GiB ({100 * (s['error'] or 0):+.2f}%)"
                                                       for s in steps) + f" -> {'pass' if row['pass'] else 'FAIL'}",
                  flush=True)
    rows.append(trainer_peak(out))
    save()
    return rows


def trainer_peak(out: Path) -> dict:
    """The trainer, profiled (profile_memory on by default): its trace's step peaks against the run's largest
    window peak of torch.cuda.max_memory_allocated (run.json final telemetry mem_peak_allocated_mib)."""
    logdir = out / "peaks" / "trainer"
    try:
        r = subprocess.run([sys.executable, "scripts/train.py", "--profile", "--arch", "resnet18", "--batch-size",
                            "128", "--steps", "40", "--log-every", "10", "--device", "cuda", "--logdir", str(logdir),
                            "--run-name", "r"], capture_output=True, text=True, timeout=TRY_TIMEOUT_S * 2)
    except subprocess.TimeoutExpired:
        return {"family": "resnet18", "recorder": "trainer", "exit": 124, "error": ["timed out"]}
    row = {"family": "resnet18", "recorder": "trainer", "exit": r.returncode}
    if r.returncode != 0:
        row["error"] = r.stderr.strip().splitlines()[-1:]
        return row
    run = logdir / "r"
    tel = json.loads((run / "run.json").read_text())["final"]["telemetry"] or {}
    mem = _memory(run)
    trace = max(s.peak_allocated for s in mem.devices[0].steps)
    truth = tel.get("mem_peak_allocated_mib", 0) * 2**20
    row.update(trace=trace, truth=truth, error=(trace - truth) / truth if truth else None)
    row["pass"] = row["error"] is not None and abs(row["error"]) <= PEAK_TOLERANCE
    print(f"peaks resnet18 trainer: trace {trace / 2**30:.3f} GiB, run's window peak {truth / 2**30:.3f} GiB "
          f"({100 * (row['error'] or 0):+.2f}%) -> {'pass' if row['pass'] else 'FAIL'}", flush=True)
    return row


def boundary(out: Path, families: list[str], rows: list, save) -> list[dict]:
    for name in families:
        folder = out / "boundary" / name
        b0 = FAMILIES[name][0]
        r = _run(PEAK_LOOP.format(family=_family(name)), [str(folder), "torch", str(b0)])
        if r.returncode != 0:
            rows.append({"family": name, "error": r.stderr.strip().splitlines()[-1:]})
            continue
        d = _memory(folder).devices[0]
        scale = d.batch_scale
        p = d.peak
        if scale is None:
            rows.append({"family": name, "error": "no prediction"})
            continue
        predicted = int(b0 * scale)
        tries = {}
        for f in (0.9, 1.1):
            b = max(1, int(predicted * f))
            t = _run(TRY_LOOP.format(family=_family(name)), [str(b)])
            words = t.stdout.strip().split() or ["error"]
            tries[f] = (b, words[0] if t.returncode == 0 else f"exit {t.returncode}", *(int(w) for w in words[1:3] if w.isdigit()))
        ok = tries[0.9][1] == "ok" and tries[1.1][1] == "oom"
        rows.append({"family": name, "batch": b0, "scale": scale, "predicted": predicted,
                     "peak_allocated": p.peak_allocated, "reserved_at_peak": p.reserved_at_peak,
                     "persistent": p.composition["persistent"], "capacity": d.capacity,
                     "tries": {str(k): v for k, v in tries.items()}, "pass": ok})
        save()
        print(f"boundary {name}: recorded at batch {b0}, predicted largest {predicted}; at {tries[0.9][0]}: "
              f"{tries[0.9][1]}, at {tries[1.1][0]}: {tries[1.1][1]} -> {'pass' if ok else 'FAIL'}", flush=True)
    return rows


class _Stop(Exception):
    """A try that could not say fits or not (out of time, a crash that is no out-of-memory error)."""


def bracket(known: dict) -> tuple[int | None, int | None]:
    """(the largest batch that fit below the smallest that did not, that smallest): None where none."""
    bad = [b for b, ok in known.items() if not ok]
    hi = min(bad) if bad else None
    ok = [b for b, fit in known.items() if fit and (hi is None or b < hi)]
    return (max(ok) if ok else None), hi


def bisect_boundary(fits, predicted: float, known: dict | None = None, tolerance: float = BISECT_TOLERANCE,
                    spread: float = BISECT_SPREAD, grow: float = BISECT_GROW) -> dict:
    """The out-of-memory boundary by bisection: ``fits(b)`` is True (batch b trains), False (it runs out of
    memory) or None (no answer: the search stops there). Tries the prediction -spread and +spread first, widens
    by ``grow`` until one fits and one does not, then halves the bracket until hi / lo <= 1 + tolerance (or the
    two are adjacent). ``known``: batches already tried (batch -> fits). Returns the bracket, whether it
    converged, the tries in order and why it stopped early."""
    known = dict(known or {})
    order: list[int] = []
    stopped = None

    def ask(b: int) -> None:
        r = fits(b)
        if r is None:
            raise _Stop(f"no answer at batch {b}")
        known[b] = bool(r)
        order.append(b)

    def new(b: int) -> bool:
        lo, hi = bracket(known)
        return b not in known and (lo is None or b > lo) and (hi is None or b < hi)

    try:
        for b in (max(1, math.floor(predicted * (1 - spread))), max(1, math.ceil(predicted * (1 + spread)))):
            if new(b):
                ask(b)
        while True:
            lo, hi = bracket(known)
            if hi is None:  # everything fit: larger
                ask(max(lo + 1, math.ceil(lo * grow)))
            elif lo is None:  # nothing fit: smaller
                if hi <= 1:
                    break
                ask(max(1, math.floor(hi / grow)))
            elif hi - lo > 1 and hi > lo * (1 + tolerance):
                ask((lo + hi) // 2)
            else:
                break
    except _Stop as e:
        stopped = str(e)
    lo, hi = bracket(known)
    converged = lo is not None and hi is not None and (hi - lo <= 1 or hi <= lo * (1 + tolerance))
    return {"fits": lo, "oom": hi, "converged": converged, "tries": order, "stopped": stopped,
            "monotonic": all(not ok for b, ok in known.items() if hi is not None and b >= hi)
            and all(ok for b, ok in known.items() if lo is not None and b <= lo)}


def _try_batch(name: str, b: int, timeout: float) -> dict:
    """One try of the family at batch b in a fresh process (BISECT_TRY's JSON, plus its seconds)."""
    t0 = time.monotonic()
    r = _run(BISECT_TRY.format(family=_family(name)), [str(b)], timeout=timeout)
    lines = r.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if r.returncode == 0 and lines else None
    except ValueError:
        out = None
    if out is None:
        tail = r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []
        out = {"batch": b, "result": "timeout" if r.returncode == 124 else "error", "exit": r.returncode,
               "error": tail}
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _predict(name: str, folder: Path, b0: int, timeout: float) -> dict:
    """The recorded loop at the base batch and the report's prediction, as the JSON document has them."""
    r = _run(PEAK_LOOP.format(family=_family(name)), [str(folder), "torch", str(b0)], timeout=timeout)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else [f"exit {r.returncode}"]}
    span = _span(folder).to_dict()
    dev = next(d for d in span["memory"]["devices"] if d["device"] != "cpu")
    peak = max(dev["steps"], key=lambda s: s["peak_allocated_gib"])
    return {"batch_scale_predicted": dev["batch_scale_predicted"], "capacity_gib": dev["capacity_gib"],
            "peak_allocated_gib": peak["peak_allocated_gib"], "peak_reserved_gib": dev["peak_reserved_gib"],
            "composition_gib": peak["composition_gib"]}


SIZES = (1, 2, 4)  # multiples of the base batch measured for the predictor's data


def _sizes(name: str, b0: int, timeout: float) -> list[dict]:
    """SIZES_LOOP's rows (those printed before a timeout or a crash too)."""
    r = _run(SIZES_LOOP.format(family=_family(name)), [str(b0), ",".join(map(str, SIZES))], timeout=timeout)
    rows = []
    for line in r.stdout.strip().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    if r.returncode != 0:
        rows.append({"result": "timeout" if r.returncode == 124 else "error", "exit": r.returncode,
                     "error": r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []})
    return rows


def bisect(work: Path, families: list[str], rows: list, save, budget_s: float = BISECT_BUDGET_S,
           try_batch=_try_batch, predict=_predict, sizes=_sizes, clock=time.monotonic) -> list[dict]:
    """Per family: the prediction, the figures at SIZES times the base batch (one process), the boundary found
    by bisection (a fresh process a try), its error and every try's figures (module docstring).
    ``try_batch(name, b, timeout)``, ``predict(name, folder, b0, timeout)`` and ``sizes(name, b0, timeout)`` are
    the device's (tests pass their own)."""
    end = clock() + budget_s
    for k, name in enumerate(families):
        share = (end - clock()) / (len(families) - k)
        row = {"family": name, "base_batch": FAMILIES[name][0], "budget_s": round(share, 1)}
        rows.append(row)
        _bisect_family(work, name, row, clock() + share, save, try_batch, predict, sizes, clock)
    return rows


def _bisect_family(work: Path, name: str, row: dict, until: float, save, try_batch, predict, sizes,
                   clock) -> None:
    t0, b0 = clock(), row["base_batch"]
    if until - clock() < BISECT_MIN_TRY_S:
        row["error"] = "no time left"
        save()
        print(f"bisect {name}: skipped, no time left", flush=True)
        return
    row.update(predict(name, work / "bisect" / name, b0, until - clock()))
    save()
    scale = row.get("batch_scale_predicted")
    if scale is None:
        row.setdefault("error", "no prediction")
        save()
        print(f"bisect {name}: no prediction ({row['error']})", flush=True)
        return
    predicted = b0 * scale
    row["predicted_batch"] = round(predicted, 1)
    if until - clock() >= BISECT_MIN_TRY_S:
        row["sizes"] = sizes(name, b0, until - clock())
        save()
    # what fit there fits in a fresh process too (the bisection starts above it); what did not, after the
    # smaller sizes in the same process, is left to fresh processes
    known = {s["batch"]: True for s in row.get("sizes", []) if s.get("result") == "ok"}
    tries: list[dict] = []
    row["tries"] = tries

    def fits(b: int):
        left = until - clock()
        if left < BISECT_MIN_TRY_S:
            return None
        t = try_batch(name, b, left)
        tries.append(t)
        save()
        return {"ok": True, "oom": False}.get(t["result"])

    found = bisect_boundary(fits, predicted, known)
    row.update(boundary_fits=found["fits"], boundary_oom=found["oom"], converged=found["converged"],
               monotonic=found["monotonic"], stopped=found["stopped"])
    if found["fits"]:
        row["error_pct"] = round(100.0 * (predicted - found["fits"]) / found["fits"], 2)
    row["seconds"] = round(clock() - t0, 1)
    save()
    err = f"{row['error_pct']:+.1f}%" if "error_pct" in row else "n/a"
    narrowed = "" if found["converged"] else f" (not narrowed to 2%: {found['stopped']})"
    print(f"bisect {name}: predicted {predicted:.0f} (x{scale:.2f} of batch {b0}), boundary {found['fits']} fits / "
          f"{found['oom']} does not{narrowed}, error {err}; {len(tries)} tries, {row['seconds']:.0f} s", flush=True)


# the out-of-memory boundaries bisected before (largest batch that fits, first that does not), by GPU model:
# torch 2.11.0+cu130, driver 580.159.04, 2026-11-27 (BENCHMARKS.md, "The predicted largest batch")
BOUNDARIES = {
    "NVIDIA H100 80GB HBM3": {"resnet50": (946, 963), "vit_b_16": (634, 646), "gpt": (165, 168), "hf_gpt2": (84, 85),
                              # 2026-11-28 (resnet18_compiled not narrowed to 2%: a try at 4,163 ran out of time)
                              "mlp_adamw": (241938, 244416), "resnet18_compiled": (3872, 4454)},
    "NVIDIA H200": {"vit_b_16": (1111, 1131), "gpt": (297, 302)},
}


def predict(work: Path, families: list[str], rows: list, save, predict=_predict, device: str | None = None,
            keep: Path | None = None) -> list[dict]:
    """Per family with a boundary in BOUNDARIES for this GPU: the prediction and its error against it; with
    ``keep``, each recorded loop's folder copied under it (the traces, to study the predictor on)."""
    if device is None:
        import torch
        device = torch.cuda.get_device_name(0)
    known = BOUNDARIES.get(device, {})
    for name in families:
        if name not in known:
            print(f"predict {name}: no boundary bisected on {device}", flush=True)
            continue
        b0, (fits, oom) = FAMILIES[name][0], known[name]
        row = {"family": name, "base_batch": b0, "boundary_fits": fits, "boundary_oom": oom, "device": device}
        rows.append(row)
        row.update(predict(name, work / "predict" / name, b0, TRY_TIMEOUT_S))
        if keep is not None and (work / "predict" / name).is_dir():
            shutil.copytree(work / "predict" / name, keep / name, dirs_exist_ok=True)
        scale = row.get("batch_scale_predicted")
        if scale is not None:
            row["predicted_batch"] = round(b0 * scale, 1)
            row["error_pct"] = round(100.0 * (b0 * scale - fits) / fits, 2)
        save()
        err = f"{row['error_pct']:+.1f}%" if "error_pct" in row else f"n/a ({row.get('error', 'no prediction')})"
        above = f"{oom} does not" if oom else "no larger try failed"
        print(f"predict {name}: predicted {row.get('predicted_batch')} against {fits} fits / {above}, "
              f"error {err}", flush=True)
    return rows


def ddp_peaks(work: Path, rows: list, save, family: str = "resnet50") -> list[dict]:
    """Two ranks of a DDP loop under torchrun: each rank's trace peaks per step against its own counters."""
    import torch
    if torch.cuda.device_count() < 2:
        rows.append({"family": family, "error": f"needs 2 GPUs, {torch.cuda.device_count()} here"})
        save()
        print(f"ddp_peaks: needs 2 GPUs, {torch.cuda.device_count()} here", flush=True)
        return rows
    folder = work / "ddp_peaks" / family
    folder.mkdir(parents=True, exist_ok=True)
    script = work / "ddp_peak_loop.py"
    script.write_text(DDP_PEAK_LOOP.format(family=_family(family)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
           str(folder), str(FAMILIES[family][0])]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=DDP_PEAK_TIMEOUT_S)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        code, err = 124, f"timed out after {DDP_PEAK_TIMEOUT_S} s"
    if code != 0:
        rows.append({"family": family, "exit": code, "error": err.strip().splitlines()[-3:]})
        save()
        print(f"ddp_peaks {family}: failed (exit {code}) {err.strip().splitlines()[-1:]}", flush=True)
        return rows
    import stepscope
    report = stepscope.analyze(folder)
    for span in report.spans:
        rank = span.rank if span.rank is not None else int(span.worker.removeprefix("rank"))
        truth_file = folder / f"truth_rank{rank}.json"
        dev = next((d for d in span.memory.devices if d.device != "cpu"), None) if span.memory else None
        if dev is None or not truth_file.is_file():
            rows.append({"family": family, "rank": rank, "error": "no GPU memory in the trace" if dev is None
                         else f"no {truth_file.name}", "pass": False})
            save()
            print(f"ddp_peaks {family} rank {rank}: FAIL ({rows[-1]['error']})", flush=True)
            continue
        truth = {int(k): v for k, v in json.loads(truth_file.read_text()).items()}
        steps = [{"step": st.step, "trace": st.peak_allocated, "truth": truth.get(st.step),
                  "error": (st.peak_allocated - truth[st.step]) / truth[st.step] if truth.get(st.step) else None}
                 for st in dev.steps]
        ok = bool(steps) and all(s["error"] is not None and abs(s["error"]) <= PEAK_TOLERANCE for s in steps)
        rows.append({"family": family, "rank": rank, "device": dev.device, "steps": steps, "pass": ok})
        save()
        print(f"ddp_peaks {family} rank {rank} ({dev.device}): " + ", ".join(
            f"step {s['step']} trace {s['trace'] / 2**30:.3f} GiB truth {(s['truth'] or 0) / 2**30:.3f} GiB "
            f"({100 * (s['error'] or 0):+.2f}%)" for s in steps) + f" -> {'pass' if ok else 'FAIL'}", flush=True)
    return rows


def _figures(mem) -> dict:
    """The figures the memory findings decide on, per run: each analysed step's allocated at its start, peak
    allocated and reserved, the creep slope of the trace and of the run's counters, the findings."""
    d = next((d for d in mem.devices if d.device != "cpu"), None)
    out = {"findings": [f.id for f in mem.findings], "measured": mem.measured}
    if d is not None:
        out.update(steps=[{"step": s.step, "at_start": s.at_start, "peak_allocated": s.peak_allocated,
                           "reserved_at_peak": s.reserved_at_peak, "peak_reserved": s.peak_reserved}
                          for s in d.steps],
                   creep_bytes_per_step=d.creep_bytes_per_step, allocator_calls_per_step=d.allocator_calls_per_step,
                   fragmentation_at_peak_pct=100.0 * d.peak.fragmentation / d.peak.reserved_at_peak
                   if d.peak.reserved_at_peak else None,
                   reserved_over_peak_allocated=d.peak_reserved / d.peak.peak_allocated if d.peak.peak_allocated
                   else None)
    return out


def causes(out: Path, reps: int, rows: list, save, keep: Path | None = None) -> list[dict]:
    """Each cause with and without; ``keep``: where the first churn run's trace is copied."""
    for cause, finding in FINDING.items():
        found = {True: 0, False: 0}
        runs = {True: 0, False: 0}
        figures = {True: [], False: []}  # what each run's analysis read: why a finding fired or not
        for on in (True, False):
            folder = out / "causes" / f"{cause}_{int(on)}"
            r = _run(CAUSE_LOOP, [str(folder), cause, "1" if on else "0", str(reps)], timeout=TRY_TIMEOUT_S * 2)
            if r.returncode != 0:
                print(f"causes {cause} on={on}: failed {r.stderr.strip().splitlines()[-1:]}", flush=True)
            for rep in range(reps):
                if not (folder / str(rep)).is_dir():
                    continue
                runs[on] += 1
                span = _span(folder / str(rep))
                mem = span.memory
                found[on] += finding in [f.id for f in mem.findings]
                figures[on].append({**_figures(mem), "time_findings": {f.id: round(f.cost_ms_per_step, 3)
                                                                       for f in span.findings},
                                    "step_ms": span.metrics.step_ms})
                if keep is not None and cause == "churn" and on and not keep.exists():
                    shutil.copytree(folder / str(rep), keep)
        rows.append({"cause": cause, "finding": finding, "runs_with": runs[True], "hits": found[True],
                     "runs_without": runs[False], "false_positives": found[False],
                     "figures_with": figures[True], "figures_without": figures[False]})
        save()
        print(f"causes {cause}: {finding} found in {found[True]} of {runs[True]} runs with the cause, "
              f"{found[False]} of {runs[False]} without", flush=True)
    return rows


def oom(out: Path) -> dict:
    folder = out / "oom"
    r = _run(OOM_LOOP, [str(folder)])
    captures = sorted((folder / "oom").glob("*")) if (folder / "oom").is_dir() else []
    row = {"exit": r.returncode, "reraised": "OutOfMemoryError" in r.stderr, "captures": len(captures)}
    if captures:
        info = json.loads((captures[0] / "oom.json").read_text())
        row.update(snapshot=(captures[0] / "snapshot.pickle").is_file(), cause=info["diagnosis"]["cause"],
                   stacks=(info.get("snapshot_live") or {}).get("stacks"), live=info["diagnosis"].get("live"))
    row["pass"] = r.returncode == 1 and row["reraised"] and row.get("snapshot") is True
    print(f"oom: exit {r.returncode}, re-raised {row['reraised']}, {row['captures']} capture(s), snapshot "
          f"{row.get('snapshot')}, stacks {row.get('stacks')}, cause {row.get('cause')} -> "
          f"{'pass' if row['pass'] else 'FAIL'}", flush=True)
    return row


def history_cost() -> dict:
    r = _run(HISTORY_LOOP, [])
    if r.returncode != 0:
        print(f"history: failed {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return {"exit": r.returncode}
    t = json.loads(r.stdout.strip().splitlines()[-1])
    row = {"off_ms": t["off"], "on_ms": t["on"], "ratio": t["on"] / t["off"]}
    print(f"history: resnet18 bs128 step {t['off']:.2f} ms without allocation stacks, {t['on']:.2f} ms with "
          f"({row['ratio']:.3f}x; medians of 5 interleaved blocks of 20 steps)", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="verify_memory.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=3, help="runs with and without each injected cause")
    p.add_argument("--parts", nargs="+", default=["peaks", "boundary", "causes", "oom", "history"],
                   choices=["peaks", "boundary", "causes", "oom", "history", "bisect", "predict", "ddp_peaks"])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--boundary-families", nargs="+", default=["resnet50", "vit_b_16", "gpt"], choices=list(FAMILIES))
    p.add_argument("--bisect-families", nargs="+", default=BISECT_FAMILIES, choices=list(FAMILIES))
    p.add_argument("--bisect-budget", type=float, default=BISECT_BUDGET_S,
                   help="seconds for the whole bisect part, shared by its families")
    p.add_argument("--ddp-family", default="resnet50", choices=list(FAMILIES))
    p.add_argument("--keep", type=Path, help="predict: copy each family's recorded loop (its traces) under this folder")
    a = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("verify_memory.py: error: needs a CUDA device", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="stepscope-memory-"))
    from stepscope.trace import fastread
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "trace_reader": "compiled" if fastread.available() else "python",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "parts": {}}
    path = a.out / "memory_truth.json"

    def save() -> None:  # after every row: a run cut off by its timeout keeps what it measured
        path.write_text(json.dumps(result, indent=1, default=str))

    for part in a.parts:
        t0 = time.time()
        rows = result["parts"].setdefault(part, [])
        if part == "peaks":
            peaks(work, a.families, rows, save)
        elif part == "boundary":
            boundary(work, a.boundary_families, rows, save)
        elif part == "causes":
            causes(work, a.reps, rows, save, keep=a.out / "churn_trace")
        elif part == "bisect":
            bisect(work, a.bisect_families, rows, save, a.bisect_budget)
        elif part == "predict":
            predict(work, a.families, rows, save, keep=a.keep)
        elif part == "ddp_peaks":
            ddp_peaks(work, rows, save, a.ddp_family)
        elif part == "history":
            result["parts"]["history"] = history_cost()
        else:
            result["parts"]["oom"] = oom(work)
        print(f"=== {part}: {time.time() - t0:.0f} s", flush=True)
        save()
    return 0

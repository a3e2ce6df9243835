"""The Lightning and Hugging Face integrations on a GPU, each on one scenario with its truth.

    python scripts/verdict_integrations.py --out OUT                  # both; needs lightning, transformers
    python scripts/verdict_integrations.py --out OUT --only hf --device cpu              # a smoke run

lightning: a LightningModule trains the CIFAR ResNet-18 at batch 64 in bf16 (SGD, fused, momentum 0.9), as
    verdicts/lightning.py records it with Lightning's own profiler;
hf: Hugging Face's Trainer trains a 4-layer GPT-2 (vocabulary 2048, width 128, sequence 128) at batch 4 in
    fp32 (AdamW, fused; gradients clipped at 1.0, the Trainer's default).

For each: the truth, without the profiler: the framework's loop unprofiled, with a callback recording a CUDA
event at every step's start (mean step over the steps after the first 10), run before the profiled run and
again after it (the truth's step is the mean of the two), and the GPU time of the same step (forward,
backward, clipping where the loop clips, optimizer) replayed as a CUDA graph outside the framework, and the
same step in a plain eager loop outside the framework (``truth.step_times``). The expected verdict follows from
these alone (``expected_of``): ``gpu_bound`` where the GPU time is at least half the step; else the host cause
whose removal saves more: the framework's own host work (its step minus the plain loop's) gives
``host_bound``, the launches (the plain loop's step minus the graph replay's) ``launch_bound``. Between
the two unprofiled runs, the same loop profiled by stepscope's integration (``stepscope.integrations.lightning`` /
``.hf`` ``StepscopeCallback`` with skip_first=5, wait=30, warmup=1, active=3; shapes, memory and stacks
recorded, or with ``--record none`` torch.profiler's defaults), whose handler diagnoses the cycle from the
unprofiled steps the schedule timed. Scored like the plain loops (verdicts/score.py): the verdict against the
one the truth implies, GPU busy within 5 points.
Writes OUT/results.json and OUT/results.md and prints the Markdown. Bad flags: one line on stderr, exit 2.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

CYCLE = dict(skip_first=5, wait=30, warmup=1, active=3, repeat=1)
RECORD = dict(record_shapes=True, profile_memory=True, with_stack=True)
STEPS = 5 + 30 + 4 + 1 + 30 + 2  # to the end of the window after the cycle, as verdicts/loops.py
SKIP = 10  # unprofiled steps left out of the truth's mean


# ---- Lightning

def lightning_run(out: Path, device, steps: int, record: dict) -> dict:
    import lightning as L
    import torch
    from stepscope.demo.models import torchvision_cifar_resnet18
    from stepscope.integrations.lightning import StepscopeCallback

    from bench.calibration import Clock
    from bench.verdicts.lightning import resnet_module
    from bench.verdicts.truth import step_times
    from bench.workloads import Workload, ce_loss, cifar_batch

    batch, cuda = 64, device.type == "cuda"

    class Boundaries(L.Callback):
        def __init__(self) -> None:
            self.clock = Clock(device)

        def on_train_batch_start(self, *args) -> None:
            self.clock.mark()

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(batch * (steps + 2), 3, 32, 32, generator=g),
                                          torch.randint(0, 10, (batch * (steps + 2),), generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, num_workers=0, pin_memory=cuda)

    def fit(callback) -> None:
        L.Trainer(max_steps=steps, accelerator="gpu" if cuda else "cpu", devices=1,
                  precision="bf16-mixed" if cuda else "32-true", logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False, callbacks=[callback]).fit(
            resnet_module(fused=cuda), loader)

    def unprofiled_ms() -> float:
        clock = Boundaries()
        fit(clock)
        return statistics.fmean(clock.clock.times_ms(SKIP))

    before = unprofiled_ms()
    # family "resnet18": channels_last, as the LightningModule's network
    w = Workload("lightning_resnet18", "resnet18", None, device, torchvision_cifar_resnet18(10),
                 cifar_batch(batch), ce_loss)
    gpu_ms = _graph_ms(w.gpu_part, cuda)
    plain = statistics.fmean(step_times(w.step, device))  # the same step, eager, outside Lightning
    del w
    cb = StepscopeCallback(out / "lightning", worker_name="lightning", **CYCLE, **record)
    fit(cb)
    return _row("lightning", "resnet18-bs64-bf16", (before, unprofiled_ms()), gpu_ms, plain, cb.session)


# ---- Hugging Face

def hf_run(out: Path, device, steps: int, record: dict) -> dict:
    import torch
    import torch.nn.functional as F
    import transformers
    from stepscope.integrations.hf import StepscopeCallback
    from transformers import GPT2Config, GPT2LMHeadModel

    from bench.calibration import Clock
    from bench.verdicts.truth import step_times

    batch, seq, vocab, cuda = 4, 128, 2048, device.type == "cuda"

    def model():
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=128, n_layer=4, n_head=4))

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch * (steps + 2), seq), generator=g)
    rows = [{"input_ids": r, "labels": r} for r in ids]

    class Boundaries(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.clock = Clock(device)

        def on_step_begin(self, *args, **kwargs):
            self.clock.mark()

    def train(callback, m) -> None:
        opt = torch.optim.AdamW(m.parameters(), lr=5e-5, fused=cuda)
        args = transformers.TrainingArguments(output_dir=str(out / "_hf"), max_steps=steps,
                                              per_device_train_batch_size=batch, report_to=[], save_strategy="no",
                                              logging_strategy="no", disable_tqdm=True, use_cpu=not cuda,
                                              dataloader_num_workers=0)
        transformers.Trainer(model=m, args=args, train_dataset=rows, optimizers=(opt, None),
                             callbacks=[callback]).train()

    def unprofiled_ms() -> float:
        clock = Boundaries()
        train(clock, model())
        return statistics.fmean(clock.clock.times_ms(SKIP))

    before = unprofiled_ms()
    m = model().to(device)
    # capturable: AdamW refuses a graph capture of its step without it (the same fused kernel either way)
    opt = torch.optim.AdamW(m.parameters(), lr=5e-5, fused=cuda, capturable=cuda)
    x = ids[:batch].to(device)

    def gpu_part() -> None:  # the Trainer's step on the device: forward, backward, clip at 1.0, optimizer
        # the model's own loss (labels=) checks its inputs on the host, which a CUDA graph cannot hold: the
        # same shifted cross-entropy, computed outside it
        logits = m(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    gpu_ms = _graph_ms(gpu_part, cuda)
    pm = model().to(device)
    popt = torch.optim.AdamW(pm.parameters(), lr=5e-5, fused=cuda)

    def plain_step() -> None:  # the Trainer's step in a plain eager loop: the model's own loss, as it computes it
        pm(input_ids=x, labels=x).loss.backward()
        torch.nn.utils.clip_grad_norm_(pm.parameters(), 1.0)
        popt.step()
        popt.zero_grad(set_to_none=True)

    plain = statistics.fmean(step_times(plain_step, device))
    cb = StepscopeCallback(out / "hf", worker_name="hf", **CYCLE, **record)
    train(cb, model())
    return _row("hf", "hf-gpt2-bs4", (before, unprofiled_ms()), gpu_ms, plain, cb.session)


# ---- scoring

def _graph_ms(fn, cuda: bool) -> float | None:
    if not cuda:
        return None
    from bench.verdicts.truth import graph_ms

    return graph_ms(fn)


def expected_of(step_ms: float, gpu_ms: float | None, plain_ms: float | None) -> str | None:
    """The verdict the unprofiled figures imply (module docstring); None without a GPU time."""
    from stepscope.analysis.verdicts import GPU_BOUND, HOST_BOUND, LAUNCH_BOUND

    from bench.verdicts.truth import GPU_BOUND_SHARE

    if gpu_ms is None:
        return None
    if gpu_ms / step_ms >= GPU_BOUND_SHARE:
        return GPU_BOUND.name
    if plain_ms is None:
        return LAUNCH_BOUND.name  # a step whose GPU idles most of the time waits for its launches
    framework, launches = step_ms - plain_ms, plain_ms - gpu_ms
    return HOST_BOUND.name if framework > launches else LAUNCH_BOUND.name


def _row(name: str, family: str, unprofiled: tuple[float, float], gpu_ms: float | None, plain_ms: float | None,
         session) -> dict:
    """``unprofiled``: the loop's mean step timed before the profiled run and after it; the truth's step is
    their mean, which brackets the profiled run in time (the host's speed drifts over seconds). ``plain_ms``:
    the same step in a plain eager loop."""
    from stepscope.capture.cycle import telemetry_of
    from stepscope.report.telemetry import as_dict

    step_ms = statistics.fmean(unprofiled)
    handler = session.handler
    (summary,) = handler.summaries
    if summary.report is None:
        raise ValueError(f"{name}: no diagnosis: {summary.error}")
    d = summary.report.to_dict()
    busy = None if gpu_ms is None else min(100.0, 100 * gpu_ms / step_ms)
    expected = expected_of(step_ms, gpu_ms, plain_ms)
    sched = session.schedule
    cycle = sched.cycles[0] if sched is not None and sched.cycles else None
    return {"scenario": name, "family": family,
            "truth": {"step_ms": step_ms, "step_ms_before": unprofiled[0], "step_ms_after": unprofiled[1],
                      "gpu_ms": gpu_ms, "gpu_busy_pct": busy, "plain_step_ms": plain_ms, "expected": expected},
            "telemetry": as_dict(summary.telemetry),
            "telemetry_before": as_dict(telemetry_of(cycle.before, cycle.with_data)) if cycle else None,
            "telemetry_after": as_dict(telemetry_of(cycle.after, cycle.with_data)) if cycle else None,
            "diagnosis_run": {"verdict": d["verdict"], "gpu_busy_pct": d["metrics"]["gpu_busy_pct"],
                              "profiled_gpu_busy_pct": d["metrics"]["profiled"]["gpu_busy_pct"],
                              "step_ms": d["metrics"]["step_ms"], "profiled_step_ms": d["metrics"]["profiled"]["step_ms"],
                              "basis": d["basis"], "findings": [f["id"] for f in d["findings"]]}}


def to_markdown(rows: list[dict]) -> str:
    out = ["| integration | scenario | step ms truth / telemetry | GPU busy % truth / diagnosed / as profiled "
           "| plain loop ms | expected | diagnosed | busy within 5 points |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['scenario']} | – | – | – | – | – | {r['error']} | – |")
            continue
        t, d, tel = r["truth"], r["diagnosis_run"], r["telemetry"] or {}
        busy, got = t["gpu_busy_pct"], d["gpu_busy_pct"]
        within = "–" if busy is None or got is None else ("yes" if abs(busy - got) <= 5 else "no")
        out.append(f"| {r['scenario']} | {r['family']} | {_num(t['step_ms'])} / {_num(tel.get('step_ms'))} | "
                   f"{_num(busy, 1)} / {_num(got, 1)} / {_num(d['profiled_gpu_busy_pct'], 1)} | "
                   f"{_num(t.get('plain_step_ms'))} | {t['expected'] or '–'} | {d['verdict']} | {within} |")
    return "\n".join(out) + "\n"


def _num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


RUNS = {"lightning": lightning_run, "hf": hf_run}


def main(argv: list[str] | None = None) -> int:
    from stepscope.cli.oneline import OneLineParser

    p = OneLineParser(prog="verdict_integrations.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--steps", type=int, default=STEPS, help=f"steps of each run (default {STEPS})")
    p.add_argument("--record", choices=["all", "none"], default="all",
                   help="what the profiled run records beside the events: shapes, memory and stacks (all, the "
                        "default), or none (torch.profiler's defaults)")
    a = p.parse_args(argv)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA GPU is visible (use --device cpu for a smoke run)")
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.only:
        print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            row = RUNS[name](a.out, torch.device(a.device), a.steps, RECORD if a.record == "all" else {})
        except (RuntimeError, OSError, ValueError, ImportError) as e:
            import traceback

            traceback.print_exc()
            row = {"scenario": name, "error": f"{type(e).__name__}: {e}"}
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        (a.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    md = to_markdown(rows)
    (a.out / "results.md").write_text(md)
    print(md)
    return 0

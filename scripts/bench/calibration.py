"""Recalibrate the overhead model: predicted (from a trace alone) vs measured unprofiled step, per family, loop
style and recording option.

    python scripts/calibrate_overhead.py --out OUT                       # all families, styles and options
    python scripts/calibrate_overhead.py --out OUT --families gru --styles eager,lightning --options none,stacks
    python scripts/calibrate_overhead.py --out OUT --device cpu --families tiny --styles eager --steps 20  # smoke
    python scripts/calibrate_overhead.py --table OUT/*/calibration.json     # one table of several runs' rows

For each family (a small model, synthetic batches on the device) and loop style:
  eager      a plain loop;                     compiled   the same with torch.compile(model);
  lightning  Lightning's Trainer (its PyTorchProfiler records);
  hf         Hugging Face's Trainer (a TrainerCallback drives torch.profiler with tensorboard_trace_handler);
the unprofiled step is measured first: CUDA events recorded at every step boundary (on the CPU, the clock),
median over --steps steps after --warmup. Then, per recording option (none; shapes = record_shapes; memory =
profile_memory; stacks = with_stack; all = the three), the same loop is profiled the way its users do
(schedule wait=2, warmup=2, active=5) and the trace is analysed by stepscope without telemetry, as a trace
from elsewhere: the model's point estimate, its range (analysis/step_range.py) and the verdicts.

Writes OUT/<family>-<style>-<option>/ (the traces), OUT/calibration.json (every row so far, rewritten after
each, so that a run cut off by a timeout keeps what it measured) and prints a Markdown table of the rows and
one of measured/predicted per (loop style read from the trace, with_stack) with the band it suggests for
analysis/step_range.py's BANDS (the extremes widened 5%) and the largest measured/profiled step (the range's
cap assumes at most 1). A style's first compile, Lightning and Hugging Face setup take tens of seconds: on a machine that
bounds each command, run one style per call (``--styles eager``, ...) and join them with ``--table``. Needs lightning / transformers for those styles (the integrations extra: pip install -e ".[integrations]").
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

OPTIONS = {"none": {}, "shapes": {"record_shapes": True}, "memory": {"profile_memory": True},
           "stacks": {"with_stack": True},
           "all": {"record_shapes": True, "profile_memory": True, "with_stack": True}}
STYLES = ("eager", "compiled", "lightning", "hf")
SCHEDULE = {"wait": 2, "warmup": 2, "active": 5}


class Loss(nn.Module):
    """A family's model with its loss: ``forward(x, labels)`` returns the loss (what every loop style needs)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x, labels):
        return nn.functional.cross_entropy(self.net(x).float(), labels)


class GRULoop(nn.Module):
    """A GRU cell stepped over time in Python: launch-bound."""

    def __init__(self, hidden: int = 512, steps: int = 32) -> None:
        super().__init__()
        self.cell, self.head, self.steps, self.hidden = nn.GRUCell(256, hidden), nn.Linear(hidden, 10), steps, hidden

    def forward(self, x):  # x: (batch, steps, 256)
        h = x.new_zeros(x.shape[0], self.hidden)
        for t in range(self.steps):
            h = self.cell(x[:, t], h)
        return self.head(h)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
        self.enc, self.head = nn.TransformerEncoder(layer, 4), nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.enc(x).mean(1))


def families() -> dict:
    """name -> (model factory, input shape with the batch first)."""
    def resnet18():
        from stepscope.demo.models import torchvision_cifar_resnet18

        return torchvision_cifar_resnet18(10)

    return {
        "mlp": (lambda: nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                      nn.Linear(1024, 10)), (32, 512)),
        "gru": (GRULoop, (16, 32, 256)),
        "transformer": (Encoder, (2, 64, 256)),
        "resnet18": (resnet18, (128, 3, 32, 32)),
        "tiny": (lambda: nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)), (8, 64)),  # smoke tests
    }


class Clock:
    """Step boundaries: CUDA events on a GPU (no sync until read), the host clock on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def times_ms(self, skip: int) -> list[float]:
        """Each step's time after the first ``skip``, in ms (one sync, here, on a GPU)."""
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks[skip:], self.marks[skip + 1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks[skip:], self.marks[skip + 1:])]

    def step_ms(self, skip: int) -> float:
        return statistics.median(self.times_ms(skip))


def dataset(shape, n_batches: int):
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(shape[0] * n_batches, *shape[1:], generator=g),
                                          torch.randint(0, 10, (shape[0] * n_batches,), generator=g))


# ---- the loop styles: each runs `steps` steps, marking the clock at every step boundary, profiled by `prof`
# (a dict of torch.profiler options and the trace folder) or not

def run_plain(model, shape, device, steps, clock, prof, compiled=False):
    model = model.to(device)
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(*shape, device=device)
    y = torch.randint(0, 10, (shape[0],), device=device)

    def step():
        loss = fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    if prof is None:
        for _ in range(steps):
            clock.mark()
            step()
        clock.mark()
        return
    with torch.profiler.profile(activities=_activities(device), schedule=torch.profiler.schedule(**SCHEDULE),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(prof["dir"])),
                                **prof["options"]) as p:
        for _ in range(sum(SCHEDULE.values()) + 1):
            step()
            p.step()


def run_lightning(model, shape, device, steps, clock, prof):
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _i):
            return self.model(*batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Boundaries(L.Callback):
        def on_train_batch_start(self, *args):
            clock.mark()

    kw = {}
    if prof is not None:
        from lightning.pytorch.profilers import PyTorchProfiler

        kw["profiler"] = PyTorchProfiler(dirpath=str(prof["dir"]), filename="fit", export_to_chrome=True,
                                         schedule=torch.profiler.schedule(**SCHEDULE), **prof["options"])
        steps = sum(SCHEDULE.values()) + 1
    n = steps + 1
    loader = torch.utils.data.DataLoader(dataset(shape, n), batch_size=shape[0], pin_memory=device.type == "cuda")
    trainer = L.Trainer(max_steps=n, accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[Boundaries()] if prof is None else [], **kw)
    trainer.fit(Module(), loader)


def run_hf(model, shape, device, steps, clock, prof):
    import transformers

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, labels):
            return {"loss": self.model(x, labels)}

    class Boundaries(transformers.TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            clock.mark()

    class Profile(transformers.TrainerCallback):  # what the Hugging Face docs show: torch.profiler, stepped
        def on_train_begin(self, *args, **kwargs):
            self.p = torch.profiler.profile(activities=_activities(device),
                                            schedule=torch.profiler.schedule(**SCHEDULE),
                                            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(prof["dir"])),
                                            **prof["options"])
            self.p.start()

        def on_step_end(self, *args, **kwargs):
            self.p.step()

        def on_train_end(self, *args, **kwargs):
            self.p.stop()

    if prof is not None:
        steps = sum(SCHEDULE.values()) + 1
    n = steps + 1
    data = dataset(shape, n)
    rows = [{"x": data.tensors[0][i], "labels": data.tensors[1][i]} for i in range(len(data))]
    args = transformers.TrainingArguments(output_dir=str(Path(prof["dir"] if prof else "/tmp") / "_hf"),
                                          max_steps=n, per_device_train_batch_size=shape[0], report_to=[],
                                          save_strategy="no", logging_strategy="no", disable_tqdm=True,
                                          use_cpu=device.type != "cuda", dataloader_num_workers=0,
                                          learning_rate=0.01)
    trainer = transformers.Trainer(model=Wrapped(), args=args, train_dataset=rows,
                                   callbacks=[Boundaries() if prof is None else Profile()])
    trainer.train()


def _activities(device):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def run(style, model, shape, device, steps, clock, prof):
    if style in ("eager", "compiled"):
        return run_plain(model, shape, device, steps, clock, prof, compiled=style == "compiled")
    return {"lightning": run_lightning, "hf": run_hf}[style](model, shape, device, steps, clock, prof)


def predicted(folder: Path) -> dict:
    """stepscope's reading of the traces in ``folder``, as a trace from elsewhere (no telemetry)."""
    from stepscope.report.front import analyze

    s = analyze(folder).spans[-1]
    rng = s.step_range
    return {"predicted_ms": s.metrics.step_ms, "profiled_ms": s.profiled.step_ms,
            "range_ms": [rng.low_ms, rng.high_ms] if rng else None, "loop_style_read": rng.band.style if rng else None,
            "verdict": s.verdict, "alternative": rng.alternative if rng else None, "gpu_busy_pct": s.metrics.gpu_busy_pct}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--table", type=Path, nargs="+", metavar="JSON",
                   help="print one table of the rows of these calibration.json files, and measure nothing")
    p.add_argument("--families", default="mlp,gru,transformer,resnet18")
    p.add_argument("--styles", default=",".join(STYLES))
    p.add_argument("--options", default=",".join(OPTIONS))
    p.add_argument("--steps", type=int, default=100, help="timed unprofiled steps")
    p.add_argument("--warmup", type=int, default=20, help="unprofiled steps before the timed ones")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    if a.table:
        runs = [json.loads(f.read_text()) for f in a.table]
        print(table([r for run in runs for r in run["rows"]], ", ".join(sorted({run["device"] for run in runs}))))
        return 0
    if a.out is None:
        p.error("--out is required unless --table is given")
    device = torch.device(a.device)
    fams = families()
    rows = []
    for fam in a.families.split(","):
        make, shape = fams[fam]
        for style in a.styles.split(","):
            torch.manual_seed(0)
            model = Loss(make())
            clock = Clock(device)
            try:
                run(style, model, shape, device, a.warmup + a.steps, clock, None)
                measured = clock.step_ms(a.warmup)
            except ImportError as e:
                print(f"{fam} {style}: skipped ({e})", file=sys.stderr)
                continue
            for option in a.options.split(","):
                folder = a.out / f"{fam}-{style}-{option}"
                run(style, model, shape, device, 0, Clock(device), {"dir": folder, "options": OPTIONS[option]})
                row = {"family": fam, "style": style, "recording": option, "measured_ms": measured,
                       **predicted(folder)}
                # a trace whose steps all measure 0 ms (a loaded machine's few steps) has no estimate
                row["ratio"] = measured / row["predicted_ms"] if row["predicted_ms"] > 0 else None
                row["in_range"] = bool(row["range_ms"] and row["range_ms"][0] <= measured <= row["range_ms"][1])
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                save(a.out, rows, device)
    save(a.out, rows, device)
    print(table(rows, _device_name(device)))
    return 0


def save(out: Path, rows: list[dict], device) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "calibration.json.partial"
    tmp.write_text(json.dumps({"device": _device_name(device), "torch": torch.__version__, "schedule": SCHEDULE,
                               "rows": rows}, indent=1) + "\n")
    tmp.replace(out / "calibration.json")


def _device_name(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def table(rows: list[dict], device: str) -> str:
    out = [f"Overhead model vs measured unprofiled step ({device}, torch {torch.__version__}; median step, ms)", "",
           "| family | loop | recording | profiled | predicted | range | measured | measured/predicted | in range "
           "| verdict | alternative |", "|---|---|---|---:|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        rng = f"{r['range_ms'][0]:.2f}-{r['range_ms'][1]:.2f}" if r["range_ms"] else "–"
        out.append(f"| {r['family']} | {r['style']} | {r['recording']} | {r['profiled_ms']:.2f} | "
                   f"{r['predicted_ms']:.2f} | {rng} | {r['measured_ms']:.2f} | {_num(r['ratio'])} | "
                   f"{'yes' if r['in_range'] else 'NO'} | {r['verdict']} | {r['alternative'] or ''} |")
    # grouped as the analysis reads them: by the loop style the trace shows (a Hugging Face loop reads as eager
    # without with_stack: no frames of its Trainer; a compiled one without record_shapes: no compiled-graph
    # ranges) and with_stack, as BANDS is keyed
    out += ["", "| loop read | with_stack | runs | measured/predicted min | max | suggested band | measured/profiled max |",
            "|---|---|---:|---:|---:|---|---:|"]
    groups: dict = {}
    for r in rows:
        stack = OPTIONS[r["recording"]].get("with_stack", False)
        groups.setdefault((r.get("loop_style_read") or r["style"], stack), []).append(r)
    for (style, stack), group in sorted(groups.items()):
        ratios = [r["ratio"] for r in group if r["ratio"] is not None]
        if not ratios:
            continue
        lo, hi = min(ratios), max(ratios)
        over = max((r["measured_ms"] / r["profiled_ms"] for r in group if r["profiled_ms"]), default=0.0)
        out.append(f"| {style} | {stack} | {len(ratios)} | {lo:.2f} | {hi:.2f} | "
                   f"({math.floor(lo * 95) / 100:.2f}, {math.ceil(hi * 105) / 100:.2f}) | {over:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

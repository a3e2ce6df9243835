"""The one-line integrations with the real libraries, on the CPU: Lightning's Trainer with StepscopeCallback,
Hugging Face's Trainer with its StepscopeCallback, accelerate with profile_kwargs. Each trains a tiny model for
a few steps; the folder then holds a diagnosis with a verdict, and `stepscope analyze` finds the trace.

    pytest tests/test_integrations.py -q        # about 40 s on 2 idle cores; needs pip install -e ".[integrations]"
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stepscope.analysis.findings import VERDICTS
from torch import nn

REPO = Path(__file__).resolve().parents[1]
WAIT, WARMUP, ACTIVE = 1, 1, 3


def assert_diagnosed(folder: Path, steps: int = ACTIVE) -> dict:
    """A diagnosis with a verdict was written, and `stepscope analyze` finds the trace and reads its steps."""
    md = (folder / "diagnosis.md").read_text()
    assert md.startswith("# stepscope diagnosis: `") and any(f"`{v}`" in md.splitlines()[0] for v in VERDICTS)
    assert list(folder.glob("raw/*/*.trace.json.gz")) and list(folder.glob("events.out.tfevents.*"))
    p = subprocess.run([sys.executable, "-m", "stepscope.cli.main", "analyze", str(folder), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines()[0].startswith("found 1 trace (1 stepscope)")
    d = json.loads(p.stdout)
    (span,) = d["spans"]
    # every recorded step, but steps that a busy machine stretched past 3x the others are left out as cold
    cold = [f for f in span["findings"] if f["id"] == "cold_start"]
    assert d["verdict"] in VERDICTS and (0 < span["metrics"]["steps"] <= steps if cold else
                                         span["metrics"]["steps"] == steps)
    # memory is recorded unless the user turns it off: the memory section sits beside the verdict
    (device,) = span["memory"]["devices"]
    assert device["device"] == "cpu" and len(device["steps"]) == span["metrics"]["steps"]
    assert "\n- memory cpu: peak " in md
    return d


def _data(n: int = 64):
    torch.manual_seed(0)
    return torch.randn(n, 16), torch.randint(0, 4, (n,))


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning")
    from stepscope.integrations.lightning import StepscopeCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x, y = _data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    trainer = L.Trainer(max_steps=WAIT + WARMUP + ACTIVE + 1, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StepscopeCallback(tmp_path / "run", wait=WAIT, warmup=WARMUP, active=ACTIVE)])
    trainer.fit(Tiny(), loader)
    assert_diagnosed(tmp_path / "run")


def test_hugging_face_trainer_callback(tmp_path):
    transformers = pytest.importorskip("transformers")
    from stepscope.integrations.hf import StepscopeCallback

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x, labels=None):
            logits = self.net(x)
            return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}

    x, y = _data()
    ds = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=WAIT + WARMUP + ACTIVE + 1,
                                          per_device_train_batch_size=8, report_to=[], save_strategy="no",
                                          logging_strategy="no", use_cpu=True, disable_tqdm=True,
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=Tiny(), args=args, train_dataset=ds,
                                   callbacks=[StepscopeCallback(tmp_path / "run", wait=WAIT, warmup=WARMUP,
                                                                active=ACTIVE)])
    trainer.train()
    assert_diagnosed(tmp_path / "run")


def test_accelerate_profile_kwargs(tmp_path, monkeypatch):
    accelerate = pytest.importorskip("accelerate")
    import stepscope
    from stepscope.integrations.accelerate import profile_kwargs

    scheduled = []  # the profiler accelerate builds takes its schedule from stepscope.schedule

    def schedule(**kw):
        scheduled.append(kw)
        return torch.profiler.schedule(**kw)

    monkeypatch.setattr(stepscope, "schedule", schedule, raising=False)

    kwargs = profile_kwargs(tmp_path / "run", wait=WAIT, warmup=WARMUP, active=ACTIVE, record_shapes=True)
    accelerator = accelerate.Accelerator(cpu=True, kwargs_handlers=[kwargs])
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with accelerator.profile() as prof:
        for i, (xb, yb) in enumerate(loader):
            if i == WAIT + WARMUP + ACTIVE + 1:
                break
            loss = nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            prof.step()
    kwargs.close()
    assert scheduled == [{"wait": WAIT, "warmup": WARMUP, "active": ACTIVE, "repeat": 1, "skip_first": 0}]
    d = assert_diagnosed(tmp_path / "run")
    assert d["spans"][0]["recording"]["record_shapes"] is True  # the recording options reach the profiler


def test_the_schedule_is_stepscopes_where_there_is_one(monkeypatch):
    import stepscope
    from stepscope.integrations.session import ScheduleArgs, make_schedule

    seen = {}

    def schedule(**kw):
        seen.update(kw)
        return torch.profiler.schedule(**kw)

    monkeypatch.setattr(stepscope, "schedule", schedule, raising=False)
    make_schedule(ScheduleArgs(wait=2, warmup=1, active=4, repeat=0, skip_first=5))
    assert seen == {"wait": 2, "warmup": 1, "active": 4, "repeat": 0, "skip_first": 5}

"""How the trace beside this file was recorded: Lightning 2.6.6's PyTorchProfiler on a CPU, 8 steps of a tiny MLP.

    pip install lightning && python record.py      # writes out/fit-profile-[Strategy]...pt.trace.json and
                                                   # out/fit-profile.txt, named as Lightning names them

A GPU recording of the same kind goes to tests/data/lightning/ (or any tests/data/lightning*/); the tests
run on every such folder.
"""

import lightning as L
import torch
from lightning.pytorch.profilers import PyTorchProfiler
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


ds = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
prof = PyTorchProfiler(dirpath="out", filename="profile",
                       schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1))
trainer = L.Trainer(max_steps=8, accelerator="cpu", profiler=prof, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), DataLoader(ds, batch_size=16))

"""One capture stack: the demonstration trainer and a user's loop under `stepscope.profile` write the same files,
with the same schema, and one diagnosis Text tag.

    pytest tests/test_one_capture_stack.py -q      # a trainer run of 6 steps on the CPU and a tiny loop

The trainer (scripts/train.py --profile --flamegraph, a real subprocess) and a plain torch loop inside `stepscope.profile`
each record one cycle. Their run folders are compared file by file, with worker and span names replaced by
placeholders (run.json is the trainer's alone), cycles.jsonl row by row (keys and the telemetry's keys), and
their TensorBoard event files read back with tensorboard's own EventAccumulator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import stepscope
import torch
from stepscope.report.telemetry import FIELDS
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from trainrun import PROFILED_RUN, shared_run

SPAN = re.compile(r"\d{16,}")


def shape(run: Path, worker: str) -> set[str]:
    """Every file under ``run``, its path with the worker and the span as placeholders."""
    out = set()
    for p in run.rglob("*"):
        if p.is_file():
            rel = SPAN.sub("<span>", p.relative_to(run).as_posix().replace(worker, "<worker>"))
            out.add(re.sub(r"^events\.out\.tfevents\..*$", "events.out.tfevents.*", rel))
    return out


def events(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return acc


def text_tags(acc: EventAccumulator) -> set[str]:
    return {t for t in acc.Tags()["tensors"]
            if acc.SummaryMetadata(t).plugin_data.plugin_name == "text"}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "cycles.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory) -> Path:
    """The session's shared PROFILED_RUN: 6 steps, one recording cycle (a warm-up and 2 active steps)."""
    run, r = shared_run(tmp_path_factory, *PROFILED_RUN)
    assert r.returncode == 0, r.stderr[-3000:]
    assert PROFILED_RUN[1][-3:] == ["--steps", "6", "--flamegraph"]  # the diagnosis steps, the export below
    return run


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory) -> Path:
    """A user's loop: a tiny model, `stepscope.profile` with the trainer's 3-step schedule, one cycle."""
    run = tmp_path_factory.mktemp("loop") / "u"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = [(torch.randn(16, 32), torch.randint(0, 10, (16,)))] * 12
        with stepscope.profile(run, skip_first=0, wait=0, warmup=1, active=2, repeat=1,
                               capture_on_slowdown=False) as prof:
            for x, y in stepscope.loader(data):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
    finally:
        torch.set_num_threads(threads)
    return run


def worker_of(run: Path) -> str:
    (row,) = rows(run)
    return row["worker"]


def test_the_trainer_and_a_users_loop_write_the_same_files(trainer_run, loop_run):
    trainer = shape(trainer_run, worker_of(trainer_run))
    # run.json is the trainer's alone; so is the flame graph, an export the run asked for (--flamegraph)
    flamegraphs = {f for f in trainer if f.endswith(".flamegraph.svg")}
    assert len(flamegraphs) == 1, trainer
    trainer -= {"run.json", *flamegraphs}
    loop = shape(loop_run, worker_of(loop_run))
    assert trainer == loop, (trainer, loop)
    assert {"<worker>.<span>.pt.trace.json.gz", "raw/<span>/<worker>.trace.json.gz", "diagnosis.md",
            "cycles.jsonl", "events.out.tfevents.*"} <= loop
    assert len(list(trainer_run.glob("events.out.tfevents.*"))) == 1  # one event writer for the whole run


def test_their_cycle_rows_have_the_same_schema(trainer_run, loop_run):
    (t,), (u,) = rows(trainer_run), rows(loop_run)
    assert t.keys() == u.keys() and "verdict" in t and t["trigger"] == u["trigger"] == "schedule"
    # the telemetry of the unprofiled steps around the cycle: one type, the same fields from the same producer
    assert t["telemetry"].keys() == u["telemetry"].keys() and set(t["telemetry"]) <= FIELDS
    assert {"steps", "step_ms", "data_ms"} <= set(t["telemetry"])
    run_telemetry = json.loads((trainer_run / "run.json").read_text())["final"]["telemetry"]
    assert set(run_telemetry) <= FIELDS and run_telemetry["steps"] > 0


def test_one_diagnosis_text_tag(trainer_run, loop_run):
    trainer, loop = events(trainer_run), events(loop_run)
    assert text_tags(trainer) == {"config", "diagnosis"} and text_tags(loop) == {"diagnosis"}
    # the trainer's run: its cycle's diagnosis (step = cycle number), then the whole run's at its last step
    assert [e.step for e in trainer.Tensors("diagnosis")] == [0, 6]
    assert [e.step for e in loop.Tensors("diagnosis")] == [0]
    final = trainer.Tensors("diagnosis")[-1].tensor_proto.string_val[0].decode()
    assert final == (trainer_run / "diagnosis.md").read_text()
    loop_scalars = {t for t in loop.Tags()["scalars"] if t.startswith("diagnosis/")}
    assert loop_scalars and loop_scalars <= set(trainer.Tags()["scalars"])

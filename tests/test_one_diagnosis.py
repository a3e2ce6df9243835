"""One diagnosis per run, from one place: what `stepscope tensorboard` publishes for a run shows the run's own
diagnosis when it has one, exactly one otherwise, with the figures that analyze and run.json give.

    pytest tests/test_one_diagnosis.py -q
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from stepscope.analysis import summary_scalars
from stepscope.report.front import analyze
from stepscope.tensorboard.diagnose import write_diagnosis
from stepscope.tensorboard.tb_events import EventLog
from stepscope.tensorboard.watch import WatchConfig, Watcher
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

DATA = Path(__file__).parent / "data"
TRACE = DATA / "eager_bs128" / "eager_bs128.1795259107760373831.pt.trace.json.gz"
SPAN = "1795259107760373831"
TELEMETRY = {"step_ms": 4.75, "steps": 20, "data_ms": 0.1}  # the run's own unprofiled timing


def stepscope_run(folder: Path, record: dict | None) -> None:
    """A stepscope run folder: the original under raw/, the adapted copy beside it, and (with ``record``) a
    trainer's run.json."""
    (folder / "raw" / SPAN).mkdir(parents=True)
    shutil.copy(TRACE, folder / "raw" / SPAN / "vm_1_rank0.trace.json.gz")
    shutil.copy(TRACE, folder / f"vm_1_rank0.{SPAN}.pt.trace.json.gz")
    if record is not None:
        (folder / "run.json").write_text(json.dumps(record))


def with_own_diagnosis(folder: Path, step: int) -> float:
    """The run writes its diagnosis into its own event file, as the trainer and the handler do."""
    report = analyze(folder)
    with EventLog(folder) as log:
        write_diagnosis(folder, report, log, step)
    return summary_scalars(report)["diagnosis/step_ms"]


def publish(src: Path, tmp: Path) -> Path:
    watcher = Watcher(WatchConfig(src, tmp / "logdir", tmp / "staging"))
    for _ in range(3):  # a trace is published once it looked the same twice
        watcher.poll()
    (run,) = watcher.runs
    return run


def entries(run: Path) -> tuple[list[str], list[float]]:
    """The Text entries whose tag starts with "diagnosis", and the diagnosis/step_ms points, of a published run."""
    texts, points = [], []
    for path in sorted(run.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "text" and v.tag.startswith("diagnosis"):
                    texts.append(v.tensor.string_val[0].decode())
                elif v.tag == "diagnosis/step_ms":  # the loader migrates simple_value to a tensor
                    points.append(v.tensor.float_val[0] if v.tensor.float_val else v.simple_value)
    return texts, points


COMPLETED = {"status": "completed", "final": {"telemetry": TELEMETRY}, "diagnosis": {"verdict": "x"}}


def test_a_trainer_run_shows_its_own_diagnosis_once(tmp_path):
    src = tmp_path / "src"
    stepscope_run(src / "run", COMPLETED)
    own = with_own_diagnosis(src / "run", step=40)
    texts, points = entries(publish(src, tmp_path))
    assert len(texts) == 1 and points == [pytest.approx(own)]
    assert own == pytest.approx(TELEMETRY["step_ms"], abs=1e-2)  # run.json's figure, as analyze says


def test_a_handler_run_shows_its_own_diagnosis_once(tmp_path):
    src = tmp_path / "src"
    stepscope_run(src / "run", None)  # stepscope.trace_handler: no run.json
    own = with_own_diagnosis(src / "run", step=0)
    texts, points = entries(publish(src, tmp_path))
    assert len(texts) == 1 and points == [pytest.approx(own)]


def test_a_trainer_run_without_a_diagnosis_gets_one_with_its_own_figures(tmp_path):
    src = tmp_path / "src"
    stepscope_run(src / "run", {"status": "interrupted", "final": {"telemetry": TELEMETRY}})
    texts, points = entries(publish(src, tmp_path))
    assert len(texts) == 1 and points == [pytest.approx(TELEMETRY["step_ms"], abs=1e-2)]


def test_a_plain_run_gets_exactly_one(tmp_path):
    src = tmp_path / "src" / "plain"
    src.mkdir(parents=True)
    shutil.copy(TRACE, src / TRACE.name)
    texts, points = entries(publish(src.parent, tmp_path))
    assert len(texts) == 1 and len(points) == 1

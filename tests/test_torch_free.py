"""The trace side works without torch: every module that reads or adapts traces imports, and analyses and
adapts a real trace, in a process where `import torch` fails.

One such process (a module fixture) does it all and reports on its lines: the torch-free modules, the analysis
and the export of a real trace, the blocker refusing a module that needs torch, and `stepscope.integrations`
reached from `import stepscope`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from trainrun import REPO

TORCH_FREE = ["trace.files", "trace.bounded_read", "trace.atomic", "trace.vocabulary", "trace.discover",
              "report.loaded", "report.engine", "report.front", "cli.analyze", "tensorboard.diagnose",
              "capture.flamegraph", "tensorboard.tb_events",
              "tensorboard.tbserver", "cli.tensorboard", "tensorboard.watch", "tensorboard.shadow",
              "tensorboard.mirror", "plugin_copy", "report.measure", "report.summary", "report.diff", "cli.diff",
              "tensorboard.tab.plugin", "analysis"]

SCRIPT = f"""
import sys
sys.modules["torch"] = None  # any import of torch now raises ImportError
import importlib
for name in {TORCH_FREE!r}:
    importlib.import_module("stepscope." + name)
from stepscope.report.front import analyze
import tempfile
from pathlib import Path
from stepscope.plugin_copy import export_tensorboard
from stepscope.trace.files import load_trace
run = {str(REPO / "tests" / "data" / "eager_bs32")!r}
with tempfile.TemporaryDirectory() as tmp:
    (adapted,) = export_tensorboard(Path(run), Path(tmp) / "out")
    print("analysis", analyze(run).verdict, len(load_trace(adapted)["traceEvents"]))
assert "torch" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
print("no torch")
"""

# `import stepscope` reaches stepscope.integrations and its torch-free session module as attributes
INTEGRATIONS = """
import stepscope
pkg = stepscope.integrations
assert pkg.__name__ == "stepscope.integrations" and "integrations" in dir(stepscope)
assert stepscope.integrations.session.ProfilingSession.__module__ == "stepscope.integrations.session"
assert "torch" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
print("integrations ok")
"""

# the blocker is real: a module that needs torch fails to import under it (last: it leaves torch half-imported)
BLOCKED = """
try:
    importlib.import_module("stepscope.capture.profiler")
except ImportError as e:
    print("blocked:", e)
"""


@pytest.fixture(scope="module")
def torch_free_process() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT + INTEGRATIONS + BLOCKED], capture_output=True, text=True,
                          timeout=120)


def lines(p: subprocess.CompletedProcess, first_word: str) -> list[str]:
    assert p.returncode == 0, p.stderr[-3000:]
    return [line.split(" ", 1)[1] for line in p.stdout.splitlines() if line.split(" ", 1)[0] == first_word]


def test_trace_side_imports_and_runs_without_torch(torch_free_process):
    (analysis,) = lines(torch_free_process, "analysis")
    verdict, events = analysis.split()
    assert verdict == "launch_bound" and int(events) > 10_000
    assert lines(torch_free_process, "no") == ["torch"]


def test_the_check_itself_fails_when_torch_is_imported(torch_free_process):
    """The blocker is real: a module that needs torch fails to import under it."""
    (blocked,) = lines(torch_free_process, "blocked:")
    assert "import of torch halted" in blocked


def test_integrations_are_reachable_from_import_stepscope_without_torch(torch_free_process):
    """``stepscope.integrations`` resolves after ``import stepscope`` (docs/integrations.md writes
    ``stepscope.integrations.lightning.StepscopeCallback``), and reaching the package imports no torch."""
    assert lines(torch_free_process, "integrations") == ["ok"]


# Imports Lightning and transformers (about 17 CPU-seconds). By default the torch-free process above walks the
# same attribute road (stepscope.__getattr__, then stepscope.integrations.__getattr__) to the session module,
# and tests/test_integrations.py's test_lightning_callback and test_hugging_face_trainer_callback import
# stepscope.integrations.lightning and .hf and train with their callbacks.
@pytest.mark.slow
def test_framework_integrations_are_attributes_of_import_stepscope():
    r = subprocess.run([sys.executable, "-c", "import stepscope; print(stepscope.integrations.lightning."
                        "StepscopeCallback.__name__, stepscope.integrations.hf.StepscopeCallback.__module__)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["StepscopeCallback", "stepscope.integrations.hf"], r.stderr

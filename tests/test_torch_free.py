"""The trace side works without torch: every module that reads or adapts traces imports, and analyses and
adapts a real trace, in a process where `import torch` fails."""

from __future__ import annotations

import subprocess
import sys

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
    print(analyze(run).verdict, len(load_trace(adapted)["traceEvents"]))
assert "torch" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
"""


def test_trace_side_imports_and_runs_without_torch():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    verdict, events = r.stdout.split()
    assert verdict == "launch_bound" and int(events) > 10_000


def test_the_check_itself_fails_when_torch_is_imported():
    """The blocker is real: a module that needs torch fails to import under it."""
    script = SCRIPT.replace("for name in", 'importlib.import_module("stepscope.capture.profiler")\nfor name in')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "import of torch halted" in r.stderr


def test_integrations_are_reachable_from_import_stepscope_without_torch():
    """``stepscope.integrations`` resolves after ``import stepscope`` (docs/integrations.md writes
    ``stepscope.integrations.lightning.StepscopeCallback``), and reaching the package imports no torch."""
    script = """
import sys
sys.modules["torch"] = None
import stepscope
pkg = stepscope.integrations
assert pkg.__name__ == "stepscope.integrations" and "integrations" in dir(stepscope)
assert "torch" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-c", "import stepscope; print(stepscope.integrations.lightning."
                        "StepscopeCallback.__name__, stepscope.integrations.hf.StepscopeCallback.__module__)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split() == ["StepscopeCallback", "stepscope.integrations.hf"], r.stderr


"""A window of steps of a run, written as its own small run beside it: for traces too large for the
PyTorch Profiler tab (or for Perfetto), whose own parser needs minutes for a gigabyte.

    name = write_window(Path("logs"), run, first=40, stop=43)    # "exp1.steps40-42": ProfilerStep#40..#42

Each trace of the run is cut to its steps [first, stop) by plugin_copy/excerpt.py's ``step_window`` (two streamed
passes, never holding the trace), then exported like any trace (plugin_copy/export.py ``export_file``): the
untouched window under ``raw/<span>/<worker>.trace.json.gz`` (the file for Perfetto), its adapted copy where
torch-tb-profiler lists it. The run appears in both tabs at their next rescan. The window run is written
into a temporary folder beside it and renamed into place once complete; a window already written is
reused. WindowError (one line) when no trace has steps in the window or the logdir is not writable.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from stepscope.plugin_copy.excerpt import step_window
from stepscope.plugin_copy.export import export_file
from stepscope.tensorboard.tab.runs import ROOT_RUN, Run
from stepscope.trace.files import find_plugin_traces


class WindowError(ValueError):
    """The window cannot be written; the message is the one line shown."""


def window_name(run: str, first: int, stop: int) -> str:
    base = "" if run == ROOT_RUN else run + "."
    return f"{base}steps{first}-{stop - 1}"


def write_window(logdir: Path, run: Run, first: int, stop: int) -> str:
    """Write steps [first, stop) of every trace of ``run`` as the run ``window_name(...)``; returns its name."""
    if stop <= first or first < 0:
        raise WindowError(f"steps {first}:{stop}: an empty window (use A:B with B > A >= 0)")
    name = window_name(run.name, first, stop)
    target = Path(logdir) / name
    if target.is_dir() and find_plugin_traces(target):
        return name
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise WindowError(f"{target.parent}: not writable, so the window cannot be written as a run there")
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        written = 0
        for t in run.traces:
            cut = staging / ".cut" / f"{t.worker}.trace.json"
            cut.parent.mkdir(exist_ok=True)
            if step_window(t.path, cut, first, stop) is None:
                continue
            span = t.span or str(t.path.stat().st_mtime_ns)
            export_file(staging, t.worker, span, cut, gz=True)
            cut.unlink()
            written += 1
        shutil.rmtree(staging / ".cut", ignore_errors=True)
        if not written:
            raise WindowError(f"run {run.name}: no trace has steps in {first}:{stop} (ProfilerStep#{first} to "
                              f"#{stop - 1})")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except OSError as e:
        raise WindowError(f"{target}: cannot write the window ({e.strerror or e})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return name

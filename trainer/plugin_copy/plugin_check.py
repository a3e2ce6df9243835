"""Load a written trace file the way torch-tb-profiler 0.4.3 does, to know that TensorBoard will show it.

    problem = plugin_problem(Path("out/w.1795259107760373831.pt.trace.json.gz"))   # None: the plugin loads it

The plugin loads each worker in a subprocess (``profiler/loader.py:_process_data``): it parses the file
(``RunProfileData.parse``), builds the views (``RunGenerator.generate_run_profile``) and the distributed
summary (``DistributedRunProfileData``); any exception there only logs a warning and the worker is missing
from the run (the plugin lists ``workers=[]``). ``plugin_problem`` runs the same three calls in-process and
returns that exception as one line, or None. The plugin is imported on first use; when it is not
installed, ``PluginMissing`` (a ValueError) says so in one line.

The plugin holds about 7 bytes per byte of trace while it loads (7.5 GB for a 1 GB file, several minutes on
2 cores). A file with more than ``WHOLE_UP_TO`` bytes of JSON is therefore checked through an excerpt of its
first ``EXCERPT_STEPS`` steps (excerpt.py), the same events byte for byte: every kind of event and edit the
copy holds, in a file the plugin loads in seconds. The export writes that excerpt while it writes the copy
(stream_write.py) and checks it as soon as it is written, while the copy's second half may still be written
(``plugin_problem(excerpt)``), or passes it in; otherwise it is made here from the copy, in two more passes.

    check = EarlyCheck.start(src, plan, header)    # None, or the check under way in a forked child
    problem = check.problem()                      # plugin_problem of the copy's excerpt, once it is made

Where the caller may fork (the command line) and the copy of a large trace is planned before it is written,
``EarlyCheck`` makes the excerpt from the original and the plan (stream_write.excerpt_events: the copy's
events up to the excerpt's last one, not the copy) and checks it in a child process, while the caller goes
on (the analysis of the same read, one_pass.py); the export then takes its answer instead of checking.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

from stepscope.plugin_copy.excerpt import excerpt, write_excerpt
from stepscope.trace.workers import Apart, json_size

WHOLE_UP_TO = 128 << 20
EXCERPT_STEPS = 3
EARLY_SHARE = 0.25  # the most of a file that EarlyCheck reads to make the excerpt (the export's writer reads it all)


class PluginMissing(ValueError):
    """torch_tb_profiler cannot be imported, so an export cannot be checked."""


def plugin_problem(path: Path, worker: str = "worker", span: str = "1",
                   excerpt_path: Path | None = None) -> str | None:
    """None if torch-tb-profiler loads the trace file at ``path``; else ``"<Exception>: <message>"``.
    ``excerpt_path``: the file's excerpt of its first EXCERPT_STEPS steps, already written (the export writes
    it while it writes the copy); otherwise a large file's excerpt is made here."""
    try:
        from torch_tb_profiler.profiler.data import DistributedRunProfileData, RunProfileData
        from torch_tb_profiler.profiler.run_generator import RunGenerator
    except Exception as e:  # ImportError, or the plugin failing while it imports
        raise PluginMissing(f"cannot check the export: torch_tb_profiler failed to import "
                            f"({type(e).__name__}: {e}); install torch-tb-profiler==0.4.3") from None
    log = logging.getLogger("pytorch_profiler")  # the plugin warns once per odd kernel
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="stepscope-plugin-cache-") as cache, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its pandas calls warn of deprecations: not about this trace
            if json_size(Path(path)) > WHOLE_UP_TO:
                path = excerpt_path or excerpt(Path(path), Path(cache) / "excerpt.pt.trace.json",
                                               EXCERPT_STEPS) or path
            data = RunProfileData.parse(worker, span, str(path), cache)
            RunGenerator(worker, span, data).generate_run_profile()
            DistributedRunProfileData(data)
    except MemoryError:  # the plugin holds the whole trace as Python objects, several times the file
        return "MemoryError: too large to load into the memory available here"
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
    finally:
        log.setLevel(level)
    return None


class EarlyCheck:
    """``plugin_problem`` of a planned copy's excerpt, made and loaded in a forked child (workers.Apart) while
    the caller works on. ``problem()`` waits for its answer; ``stop()`` ends it unasked (the copy is not
    written after all)."""

    def __init__(self, job: Apart) -> None:
        self._job = job

    @classmethod
    def start(cls, src: Path, plan, header: dict) -> EarlyCheck | None:
        """The check of the copy of ``src`` that ``plan`` (stream_plan.EditPlan, read in byte ranges) plans,
        under way; None where the export checks it otherwise: a trace small enough to load whole, a copy that
        is its own excerpt, a gzipped one (its pieces cannot be read apart without decompressing what comes
        before), or one whose excerpt lies in more than ``EARLY_SHARE`` of the file."""
        from stepscope.plugin_copy.stream_write import excerpt_pieces, special_of

        size = json_size(Path(src))
        if size <= WHOLE_UP_TO or Path(src).name.endswith(".gz") or not plan.pieces:
            return None
        pieces = excerpt_pieces(plan, EXCERPT_STEPS)
        if not pieces or sum((size if b is None else b) - a for (a, b), _ in pieces) > EARLY_SHARE * size:
            return None
        special_of(plan)  # made here, once: the child inherits it, and so do the copy's writers
        job = Apart.started(_check_planned, (Path(src), plan, header))
        return cls(job) if job is not None else None  # no child: the export checks the copy it writes

    def problem(self) -> str | None:
        """What ``plugin_problem`` says of the excerpt; raises what it raised (PluginMissing), or
        RuntimeError where the child died before it answered."""
        self._job.ready(None)
        return self._job.result()

    def stop(self) -> None:
        self._job.stop()


def _check_planned(src: Path, plan, header: dict) -> str | None:
    """In the child: the excerpt of the planned copy written to a temporary folder and checked there."""
    from stepscope.plugin_copy.stream_write import excerpt_events

    events = excerpt_events(src, plan, EXCERPT_STEPS)
    with tempfile.TemporaryDirectory(prefix="stepscope-excerpt-") as folder:
        path = Path(folder) / "excerpt.pt.trace.json"
        write_excerpt(path, events, header)
        return plugin_problem(path)

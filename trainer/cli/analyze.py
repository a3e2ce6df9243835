"""Say why training steps are slow, from the torch.profiler traces in a file or a directory.

    stepscope analyze logs/myrun                 # verdict + evidence + top findings per trace
    stepscope analyze trace.json --json          # the whole report as one JSON document
    stepscope analyze plain_run --export-tensorboard logs/plain_fixed   # + a plugin-ready copy
    stepscope analyze logs/myrun --steps 3:8     # only ProfilerStep#3 .. #7 (a half-open window)
    stepscope analyze logs/myrun --time-range 100:400   # only steps starting 100-400 ms in
    stepscope analyze logs/ddp --max-memory 2G   # ranks parsed in parallel within 2 GiB
    stepscope analyze logs/job --cluster tcp://HOST:8786   # each rank's work on a Dask cluster
    stepscope analyze logs/job --cluster local:4  # ... on a LocalCluster of 4 processes (docs/cluster.md)
    python scripts/analyze.py ...                # the same, from a checkout

PATH is a trace file or a directory holding traces from stepscope's trainer (``logs/<run>/``, whose
untouched originals under ``raw/`` are preferred, and whose ``run.json`` gives the unprofiled steps' timing:
the figures and the verdict are then those of the run without the profiler, as in its diagnosis.md; a
``stepscope.trace_handler`` folder's ``cycles.jsonl`` gives each cycle's, telemetry.py), plain
``tensorboard_trace_handler``, Lightning's ``PyTorchProfiler``, accelerate's
``ProfileKwargs(output_trace_dir=...)`` or ``export_chrome_trace`` (see discover.py). One run folder is one job: a folder holding several runs is
reported run by run, one section each (traces of different folders pair as ranks only when their own
distributedInfo says they are one job; see jobs.py). First, one line on stderr says what was found
and skipped, e.g. ``found 2 traces (1 Lightning, 1 export_chrome_trace); skipped 1 file: notes.json (not a
profiler trace)``, and, where traces are read without the compiled reader (trace/fastread.py), why. The console text on stdout looks like

    stepscope diagnosis: launch_bound
      eager_bs128 (span 1795259107760373831, NVIDIA H200): launch_bound: step 10.44 ms, GPU busy 29%
         48.4% (5.05 ms) GPU idle while the host dispatches ops / launches kernels
        ...

``--json`` prints ``{"verdict", "spans": [...], "distributed": [...]}``, or for a folder of several runs
``{"runs": [{"run": <folder>, "verdict", "spans", ...}, ...]}`` (schema in docs/json.md).
``--export-tensorboard OUT_DIR`` also writes the traces, rewritten so that torch-tb-profiler 0.4.3 shows true
numbers, to OUT_DIR (which must not exist or be empty), marked as an export (a ``.stepscope-export``
file naming the originals) so that analysing a folder that holds both, e.g. the analysed run itself, counts
each trace once; and lists the files it wrote: on stdout after the
console text, on stderr with ``--json`` so that stdout stays one JSON document. The export goes to a
temporary folder beside OUT_DIR that is renamed into place only once complete.

``--steps A:B`` and ``--time-range T0:T1`` (ms after the trace's first event; a step counts when its host
range starts inside) restrict the analysis of every trace to those steps; either side may be left empty.
The export always copies whole traces, streamed: the original byte for byte under raw/, the plugin copy
event by event (plugin_copy/stream_plan.py, stream_write.py), from the plan that the analysis' read of the
trace also made (plugin_copy/one_pass.py: one read feeds both; a trace large enough to be read in two
halves at once by two processes is read so for both, each process making the plan's columns of its half).
Traces are parsed streaming, never loaded whole;
several large traces (ranks) are parsed in parallel processes, as many as the CPUs and ``--max-memory``
(default: a quarter of RAM) allow. ``--cluster`` runs each trace's parse and report as a task of a Dask
cluster (trace/cluster.py) whose workers read the traces from a shared filesystem; the cross-rank analysis
runs here on the reports that come back, and the output is the same. It needs the ``cluster`` extra (``pip install -e '.[cluster]'``).

Bad input (a malformed or empty --steps/--time-range window, a bad --max-memory, a bad --cluster or one
that does not answer, no such path, no traces, an unreadable, corrupt or oversized trace, a non-empty
OUT_DIR, an exported copy that torch-tb-profiler cannot load): one line on stderr, exit code 2, nothing
written.
``--json`` output is strict JSON: a value that is not a finite number is ``null``. Torch-free.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from stepscope.analysis import StepSelection, TraceError, json_out
from stepscope.cli.analyze_args import memory_size, window
from stepscope.cli.oneline import OneLineParser
from stepscope.report.front import analyze
from stepscope.report.loaded import Loaded
from stepscope.report.runs import render_runs, telemetry_sources
from stepscope.trace import fastread
from stepscope.trace.cluster import ClusterError, check_spec, open_cluster
from stepscope.trace.errors import print_error
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.workers import Workers, keep_heap


class UsageError(ValueError):
    """Bad input to this command; the message is the one line printed."""


def check_run_dir(run_dir: Path) -> None:
    if run_dir.is_dir() and not os.access(run_dir, os.R_OK | os.X_OK):
        raise UsageError(f"RUN_DIR {run_dir}: permission denied; give a run directory you can read")


def check_out_dir(out_dir: Path) -> None:
    """OUT_DIR must be new or empty, and creatable: its nearest existing ancestor a writable directory."""
    ancestor = out_dir.absolute()
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor != out_dir.absolute() and not ancestor.is_dir():
        raise UsageError(f"--export-tensorboard {out_dir}: {ancestor} is a file, not a directory; give a new "
                         "or empty directory")
    if not os.access(ancestor if ancestor.is_dir() else ancestor.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--export-tensorboard {out_dir}: {ancestor} is not writable; give a directory you "
                         "can write to")
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--export-tensorboard {out_dir}: exists and is not a directory; "
                         "give a new or empty directory")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise UsageError(f"--export-tensorboard {out_dir}: directory is not empty; give a new or empty "
                         "directory")


def export(loaded: list[Loaded], out_dir: Path, workers: Workers, plans: dict | None = None) -> list[Path]:
    """plugin_copy.export_tensorboard of the analysed traces (streamed, through a temporary sibling folder renamed
    to ``out_dir`` only when complete), its errors as one line; returns the adapted copies' paths. ``plans``:
    the copies the analysis' read already planned (``analyze(..., copies=...)``)."""
    try:
        from stepscope.plugin_copy import export_tensorboard
        from stepscope.plugin_copy.plugin_check import PluginMissing
    except ImportError as e:
        raise UsageError(f"--export-tensorboard needs stepscope.plugin_copy, which failed to "
                         f"import: {e}") from None
    try:
        return export_tensorboard([(item.found.path, item.worker, item.span) for item in loaded], out_dir,
                                  workers=workers, plans=plans)
    except (ValueError, PluginMissing) as e:
        raise UsageError(f"--export-tensorboard: {e}") from None
    except (ArithmeticError, LookupError, TypeError, AttributeError, RecursionError) as e:
        # the analysis accepted these traces, so this is a defect of the adapter: still one line
        raise UsageError(f"--export-tensorboard: cannot adapt ({type(e).__name__}: {e})") from None


def _copies() -> dict:
    """What ``analyze(..., copies=...)`` fills for the export: its plans, each large copy's check by the plugin
    started as soon as it is planned (one_pass.Checked); a plain dict where plugin_copy does not import
    (``export`` then says why)."""
    try:
        from stepscope.plugin_copy.one_pass import Checked
    except ImportError:
        return {}
    return Checked()


def main(argv: list[str] | None = None, prog: str = "stepscope analyze") -> int:
    p = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                   help="a run directory (e.g. logs/<run>), any folder of traces, or one trace file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--export-tensorboard", type=Path, metavar="OUT_DIR",
                   help="also write a copy that torch-tb-profiler 0.4.3 reads correctly to OUT_DIR")
    p.add_argument("--steps", type=window(int), metavar="A:B",
                   help="analyse only ProfilerStep#A .. #B-1 of each trace")
    p.add_argument("--time-range", type=window(float), metavar="T0:T1",
                   help="analyse only the steps that start T0..T1 ms after the trace's first event")
    p.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                   help="memory for parallel parsing, e.g. 2G (default: a quarter of RAM)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run each trace's analysis on a Dask cluster: tcp://HOST:8786, or local:N for N "
                        "local worker processes (needs the cluster extra; docs/cluster.md)")
    a = p.parse_args(argv)
    try:
        check_run_dir(a.run_dir)
        if a.cluster is not None:
            check_spec(a.cluster)
        if a.export_tensorboard is not None:
            check_out_dir(a.export_tensorboard)
        selection = StepSelection(steps=a.steps, time_ms=a.time_range)
        workers = Workers.local(max_memory=a.max_memory)  # a short-lived command: local processes may help
        keep_heap()  # this process only reads traces: their pieces' memory is reused, not faulted in afresh
        # A short-lived process holding millions of events that form no cycles: the cyclic collector would
        # only walk them again and again (gc_paused.py); reference counting still frees what is dropped.
        with gc_paused(), open_cluster(a.cluster) as address:
            # each trace's report made where it is read (here, a local process, a Dask task), and only the
            # report kept: every trace is validated before anything is written; with the export, the same
            # read plans each trace's copy, which is then written from the plan
            copies = _copies() if a.export_tensorboard is not None else None
            try:
                report = analyze(a.run_dir, selection=selection,
                                 workers=workers if address is None else Workers.dask(address), copies=copies)
                written = (export(list(report.traces), a.export_tensorboard, workers, copies)
                           if a.export_tensorboard is not None else None)
            finally:
                if hasattr(copies, "stop"):
                    copies.stop()  # the plugin's checks that no export took (one_pass.Checked)
    except (TraceError, UsageError, ClusterError) as e:
        print_error(f"error: {e}")
        return 2
    except MemoryError:  # past the per-file checks: e.g. many traces that fit one by one but not together
        print_error(f"error: {a.run_dir}: too large to analyse in the memory available here")
        return 2
    except OSError as e:  # what the checks above cannot foresee: a file that vanished, a disk that filled up
        print_error(f"error: {e.filename or a.run_dir}: {e.strerror or e}")
        return 2
    slow_reader = fastread.why_not()  # the compiled trace reader is not used: said on the same line
    print(report.summary + (f"; {slow_reader}" if slow_reader else ""), file=sys.stderr)
    for record, what in telemetry_sources(a.run_dir, report):
        print(f"unprofiled figures from {record}: {what}", file=sys.stderr)
    print(json_out.dumps(report.to_dict(), indent=1) if a.json else render_runs(report))
    if written is not None:
        stream = sys.stderr if a.json else sys.stdout
        print(f"exported {len(written)} trace(s) to {a.export_tensorboard}, originals under raw/ "
              f"(tensorboard --logdir {a.export_tensorboard.parent}):", file=stream)
        for path in written:
            print(f"  {path}", file=stream)
    return 0

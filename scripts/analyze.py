"""Say why training steps are slow, from the torch.profiler traces in a run directory.

    python scripts/analyze.py logs/myrun                 # verdict + evidence + top findings per trace
    python scripts/analyze.py logs/myrun --json          # the whole report as one JSON document
    python scripts/analyze.py plain_run --export-tensorboard logs/plain_fixed   # + a plugin-ready copy

RUN_DIR holds traces from stepscope's trainer (``logs/<run>/``, whose untouched originals under ``raw/``
are preferred) or from plain ``torch.profiler.tensorboard_trace_handler``. The console text looks like

    stepscope diagnosis: launch_bound
      eager_bs128 (span 1795259107760373831, NVIDIA H200): launch_bound: step 10.44 ms, GPU busy 29%
         48.4% (5.05 ms) GPU idle while the host dispatches ops / launches kernels
        ...
        - 378 kernels per step, median 3.9 µs, ... [~5.05 ms/step]

``--json`` prints ``{"verdict", "spans": [...], "distributed": [...]}`` (schema in the README).
``--export-tensorboard OUT_DIR`` also writes the run, rewritten so that torch-tb-profiler 0.4.3 shows true
numbers, to OUT_DIR (which must not exist or be empty), and lists the files it wrote: on stdout after the
console text, on stderr with ``--json`` so that stdout stays one JSON document. The export goes to a
temporary folder beside OUT_DIR that is renamed into place only once complete.

Bad input (no such directory, an unreadable RUN_DIR, no traces, an unreadable trace, a non-empty OUT_DIR, an
OUT_DIR under a file or in a directory that cannot be written): one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys
import tempfile  # noqa: E402
from pathlib import Path

import _checkout  # noqa: E402,F401  this checkout's stepscope.trainer and stepscope.kernels
from stepscope.trainer.cli import OneLineParser  # noqa: E402
from stepscope.trainer.profiler.analysis import TraceError, analyze_run, render_console  # noqa: E402


class UsageError(ValueError):
    """Bad input to this command; the message is the one line printed."""


def check_run_dir(run_dir: Path) -> None:
    if not run_dir.is_dir():
        return  # analyze_run says what is wrong with it
    if not os.access(run_dir, os.R_OK | os.X_OK):
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


def export(run_dir: Path, out_dir: Path) -> list[Path]:
    """Export through a temporary sibling folder, renamed to ``out_dir`` only when complete."""
    try:
        from stepscope.trainer.profiler.tbfix import export_tensorboard
    except ImportError as e:
        raise UsageError(f"--export-tensorboard needs stepscope.trainer.profiler.tbfix, which failed to import: {e}") from None
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        target = staging / out_dir.name
        try:
            written = export_tensorboard(run_dir, target)
        except ValueError as e:
            raise UsageError(f"--export-tensorboard: {e}") from None
        os.replace(target, out_dir)  # out_dir is missing or empty (checked before): rename(2) replaces it
        return [_moved(Path(p), target, out_dir) for p in written]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _moved(path: Path, old_root: Path, new_root: Path) -> Path:
    try:
        return new_root / path.resolve().relative_to(old_root.resolve())
    except ValueError:  # not under the staging folder: report it as given
        return path


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="analyze.py", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory, e.g. logs/<run>")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--export-tensorboard", type=Path, metavar="OUT_DIR",
                   help="also write a copy that torch-tb-profiler 0.4.3 reads correctly to OUT_DIR")
    a = p.parse_args(argv)
    try:
        check_run_dir(a.run_dir)
        if a.export_tensorboard is not None:
            check_out_dir(a.export_tensorboard)
        report = analyze_run(a.run_dir)  # validates every trace before anything is written
        written = export(a.run_dir, a.export_tensorboard) if a.export_tensorboard is not None else None
    except (TraceError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # what the checks above cannot foresee: a file that vanished, a disk that filled up
        print(f"error: {e.filename or a.run_dir}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=1) if a.json else render_console(report))
    if written is not None:
        stream = sys.stderr if a.json else sys.stdout
        print(f"exported {len(written)} trace(s) to {a.export_tensorboard}, originals under raw/ "
              f"(tensorboard --logdir {a.export_tensorboard.parent}):", file=stream)
        for path in written:
            print(f"  {path}", file=stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())

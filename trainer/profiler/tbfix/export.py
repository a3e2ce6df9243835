"""Write plugin-ready traces next to their untouched originals, for our runs and for plain ones.

    from stepscope.profiler.tbfix import write_adapted_pair, export_tensorboard
    adapted, raw = write_adapted_pair(Path("logs/run"), "host_1234", "1795259107760373831", trace)
    adapted, raw = export_file(Path("logs/run"), "host_1234", "1795259107760373831", Path("t.pt.trace.json"))
    export_tensorboard(Path("plain_run"), Path("logs/plain_fixed"))   # then: tensorboard --logdir logs

``export_tensorboard`` streams each trace file (``export_file``): a 1 GB trace is rewritten in a few hundred
MB, its original copied byte for byte. The layout is ``trainer/profiler/trace/files.py``'s: ``<worker>.<span>.pt.trace.json.gz`` is the adapted copy the
plugin lists, ``raw/<span>/<worker>.trace.json.gz`` the original (for Perfetto and HTA), which the plugin
does not list.
"""

from __future__ import annotations

import shutil
import tempfile
import zlib
from pathlib import Path

import msgspec

from ..trace import files as trace_files
from ..trace.workers import Workers, json_size
from . import plugin_check
from .adapt import adapt_trace
from .plugin_check import plugin_problem
from .stream_plan import plan_edits
from .stream_write import copy_file_atomic, write_adapted_stream


def _check_names(worker: str, span: str) -> None:
    name = trace_files.plugin_name(worker, span, gz=False)
    m = trace_files.WORKER_PATTERN.match(name)
    if "/" in worker or not m or m.group(1) != worker or (m.group(2) or "")[1:] != span:
        raise ValueError(f"worker {worker!r} and span {span!r} do not round-trip through the plugin's file name "
                         f"{name!r}: use a non-empty worker without '/' and a span of digits (time.time_ns())")


def write_adapted_pair(run_dir: Path, worker: str, span: str, trace: dict, gz: bool = True) -> tuple[Path, Path]:
    """Write ``trace`` untouched under ``raw/`` and ``adapt_trace(trace)`` where the plugin lists it.

    The original is written first and the adapted copy last, each atomically, so the plugin never lists
    an adapted file whose original is missing. Nothing is written if adapting fails. Returns
    (adapted_path, raw_path).
    """
    _check_names(worker, span)
    run_dir = Path(run_dir)
    adapted = adapt_trace(trace)
    raw = trace_files.raw_path(run_dir, worker, span, gz)
    adapted_path = run_dir / trace_files.plugin_name(worker, span, gz)
    trace_files.write_trace_atomic(raw, trace)
    trace_files.write_trace_atomic(adapted_path, adapted)
    return adapted_path, raw


def export_file(run_dir: Path, worker: str, span: str, src: Path, gz: bool | None = None,
                excerpt: Path | None = None, workers: Workers | None = None) -> tuple[Path, Path]:
    """``write_adapted_pair`` for a trace file, streamed: the original is copied byte for byte under
    ``raw/`` (gzipped on the way when ``gz`` asks for it and ``src`` is plain), the plugin copy written event by
    event (``stream_plan.py``, ``stream_write.py``), so the trace is never in memory. ``gz`` (default: as
    ``src``) says whether both copies are gzipped. A file that msgspec cannot stream (e.g. NaN literals, which
    Python's json accepts) is loaded whole and written by ``write_adapted_pair``, which raises what loading it
    raises; nothing is written then.

    ``excerpt``: a path for the copy's excerpt of its first ``plugin_check.EXCERPT_STEPS`` steps, written in the
    same pass when ``src`` is larger than half of ``plugin_check.WHOLE_UP_TO`` (plugin_problem then loads it
    instead of making it from the copy; no file there: there is none, the copy is small or short).
    ``workers``: the worker policy (trace/workers.py; default: this process only); where it allows, a large
    trace is planned and written with a forked helper (stream_plan.py). A command's own process may fork, a
    training process must not."""
    _check_names(worker, span)
    src = Path(src)
    gz = src.name.endswith(".gz") if gz is None else gz
    workers = workers or Workers.inline()
    try:
        plan, header = plan_edits(src, workers)
    except (OSError, EOFError, zlib.error, msgspec.DecodeError, msgspec.ValidationError):
        return write_adapted_pair(run_dir, worker, span, trace_files.load_trace(src), gz)
    raw = trace_files.raw_path(Path(run_dir), worker, span, gz)
    adapted_path = Path(run_dir) / trace_files.plugin_name(worker, span, gz)
    copy_file_atomic(src, raw)
    wanted = excerpt is not None and json_size(src) > plugin_check.WHOLE_UP_TO // 2
    write_adapted_stream(src, adapted_path, plan, header, (excerpt, plugin_check.EXCERPT_STEPS) if wanted else None,
                         workers)
    return adapted_path, raw


def written_excerpt(path: Path) -> Path | None:
    """``path`` if export_file wrote an excerpt there, else None: the argument plugin_problem takes."""
    return path if path.is_file() else None


def _span_of(tf: trace_files.TraceFile) -> str:
    # A hand-named "<worker>.pt.trace.json" has no span; its mtime in ns has the width of time_ns().
    return tf.span or str(tf.path.stat().st_mtime_ns)


def export_tensorboard(src_run_dir: Path, out_dir: Path, workers: Workers | None = None) -> list[Path]:
    """Write the corrected copy of the run in ``src_run_dir`` to ``out_dir``; return the adapted paths.

    ``src_run_dir`` holds traces from plain ``torch.profiler.tensorboard_trace_handler`` or from our
    trainer (then its ``raw/`` originals are used). ``out_dir`` must be missing or empty. Each adapted copy
    is loaded back with torch-tb-profiler's own parser (plugin_check.py): a copy it cannot load is a
    ValueError. On any error nothing is left half-written in ``out_dir``. ``workers``: as ``export_file``.
    """
    src, out = Path(src_run_dir), Path(out_dir)
    if not src.is_dir():
        raise ValueError(f"{src}: not a directory; expected a run directory holding "
                         "<worker>.<span>.pt.trace.json[.gz] files from tensorboard_trace_handler")
    traces = trace_files.find_traces(src)
    if not traces:
        raise ValueError(f"{src}: no traces found; expected <worker>.<span>.pt.trace.json[.gz] files "
                         "(tensorboard_trace_handler) or raw/<span>/<worker>.trace.json[.gz]")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: exists and is not an empty directory; give a new or empty directory")
    created = not out.exists()
    written: list[Path] = []
    try:
        for tf in traces:
            with tempfile.TemporaryDirectory(prefix="stepscope-excerpt-") as tmp:
                part = Path(tmp) / "excerpt.pt.trace.json"
                adapted, raw = export_file(out, tf.worker, _span_of(tf), tf.path, excerpt=part, workers=workers)
                written += [raw, adapted]
                # a copy TensorBoard would drop is no export
                if problem := plugin_problem(adapted, excerpt_path=written_excerpt(part)):
                    raise ValueError(f"{tf.path}: torch-tb-profiler 0.4.3 cannot load the exported copy ({problem})")
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in written:
                p.unlink(missing_ok=True)
            shutil.rmtree(out / trace_files.RAW_DIR, ignore_errors=True)
        raise
    return written[1::2]

"""Write plugin-ready traces next to their untouched originals, for our runs and for plain ones.

    from stepscope.plugin_copy import export_file, export_tensorboard, write_adapted_pair
    adapted, raw = export_file(Path("logs/run"), "host_1234", "1795259107760373831", Path("t.pt.trace.json"))
    export_tensorboard(Path("plain_run"), Path("logs/plain_fixed"))   # then: tensorboard --logdir logs
    adapted, raw = write_adapted_pair(Path("logs/run"), "host_1234", "1795259107760373831", trace)   # a dict

``export_tensorboard`` streams each trace file (``export_file``): a 1 GB trace is rewritten in a few hundred
MB, its original kept byte for byte (a hard link where the file system allows, else a copy). The layout is
``trainer/trace/files.py``'s: ``<worker>.<span>.pt.trace.json.gz`` is the adapted copy the plugin lists,
``raw/<span>/<worker>.trace.json.gz`` the original (for Perfetto and HTA), which the plugin does not list.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from stepscope.plugin_copy import plugin_check
from stepscope.plugin_copy.plugin_check import plugin_problem
from stepscope.plugin_copy.stream_plan import plan_edits
from stepscope.plugin_copy.stream_write import link_or_copy_atomic, write_adapted_stream
from stepscope.trace import files as trace_files
from stepscope.trace.discover import EXPORT_MARKER, discover, export_marker
from stepscope.trace.workers import Workers, json_size


def _check_names(worker: str, span: str) -> None:
    name = trace_files.plugin_name(worker, span, gz=False)
    m = trace_files.WORKER_PATTERN.match(name)
    if "/" in worker or not m or m.group(1) != worker or (m.group(2) or "")[1:] != span:
        raise ValueError(f"worker {worker!r} and span {span!r} do not round-trip through the plugin's file name "
                         f"{name!r}: use a non-empty worker without '/' and a span of digits (time.time_ns())")


def write_adapted_pair(run_dir: Path, worker: str, span: str, trace: dict, gz: bool = True) -> tuple[Path, Path]:
    """Write a trace held in memory: ``trace`` untouched under ``raw/``, and its plugin copy, made from that
    file by the streamed rewrite (``export_file``'s), where the plugin lists it.

    The original is written first (under a name no plugin lists, renamed once the copy's plan is made) and
    the adapted copy last, each atomically, so the plugin never lists an adapted file whose original is
    missing. Nothing is written if planning the copy fails. Returns (adapted_path, raw_path). For traces
    already on disk, ``export_file`` copies the file instead of re-serialising a dict.
    """
    _check_names(worker, span)
    run_dir = Path(run_dir)
    raw = trace_files.raw_path(run_dir, worker, span, gz)
    adapted_path = run_dir / trace_files.plugin_name(worker, span, gz)
    raw.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial" + (".gz" if gz else ""), dir=raw.parent)
    os.close(fd)
    try:
        trace_files.write_trace_atomic(Path(tmp), trace)
        plan, header = plan_edits(Path(tmp))
        os.replace(tmp, raw)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_adapted_stream(raw, adapted_path, plan, header)
    return adapted_path, raw


def export_file(run_dir: Path, worker: str, span: str, src: Path, gz: bool | None = None,
                excerpt: Path | None = None, workers: Workers | None = None,
                planned: tuple | None = None,
                excerpt_done: Callable[[Path], None] | None = None) -> tuple[Path, Path]:
    """``write_adapted_pair`` for a trace file, streamed: the original is kept byte for byte under ``raw/``
    (a hard link to ``src`` where the file system allows, else a copy; gzipped on the way when ``gz`` asks for
    it and ``src`` is plain), the plugin copy written event by event (``stream_plan.py``,
    ``stream_write.py``), so the trace is never in memory. ``gz`` (default: as ``src``) says whether both
    copies are gzipped. A piece of the file that msgspec refuses but Python's json reads (NaN or Infinity
    literals) is normalised on the way (jsonstream.py's ``lenient``). Raises what reading the file raises
    (OSError, EOFError, zlib.error, msgspec.DecodeError); nothing is written then.

    ``excerpt``: a path for the copy's excerpt of its first ``plugin_check.EXCERPT_STEPS`` steps, written in the
    same pass when ``src`` is larger than half of ``plugin_check.WHOLE_UP_TO`` (plugin_problem then loads it
    instead of making it from the copy; no file there: there is none, the copy is small or short).
    ``workers``: the worker policy (trace/workers.py; default: this process only); where it allows, a large
    trace is planned and written with a forked helper (stream_plan.py). A command's own process may fork, a
    training process must not. ``planned``: (plan, header keys, ...) of ``src`` from the read that also parsed
    it for the analysis (one_pass.Planned, from read_both or read_in_halves); else the copy plans it here.
    ``excerpt_done(path)``: called with the excerpt once it is written, before the copy appears
    (write_adapted_stream: while a helper still writes the copy, where it can)."""
    _check_names(worker, span)
    src = Path(src)
    gz = src.name.endswith(".gz") if gz is None else gz
    workers = workers or Workers.inline()
    plan, header = planned[:2] if planned is not None else plan_edits(src, workers)
    raw = trace_files.raw_path(Path(run_dir), worker, span, gz)
    adapted_path = Path(run_dir) / trace_files.plugin_name(worker, span, gz)
    wanted = excerpt is not None and json_size(src) > plugin_check.WHOLE_UP_TO // 2
    # the original is kept (linked or copied) while a helper writes the copy's second half (one core would
    # wait), and before the copy appears: the plugin never lists a copy whose original is missing
    write_adapted_stream(src, adapted_path, plan, header, (excerpt, plugin_check.EXCERPT_STEPS) if wanted else None,
                         workers, meanwhile=lambda: link_or_copy_atomic(src, raw), excerpt_done=excerpt_done)
    return adapted_path, raw


def written_excerpt(path: Path) -> Path | None:
    """``path`` if export_file wrote an excerpt there, else None: the argument plugin_problem takes."""
    return path if path.is_file() else None


def _checking_into(problems: list) -> Callable[[Path], None]:
    """``excerpt_done`` for export_file: the plugin's check of the copy's excerpt, its finding kept."""
    return lambda excerpt: problems.append(plugin_problem(excerpt))


def export_tensorboard(sources: Path | list[tuple[Path, str, str]], out_dir: Path,
                       workers: Workers | None = None, plans: dict | None = None) -> list[Path]:
    """Write the corrected copy of some traces to ``out_dir``; return the adapted copies' paths.

    ``sources``: (trace file, worker, span) triples, or a folder whose traces trace/discover.py finds
    (a trace without a span in its name gets its file's mtime in ns, which has the width of time_ns()).
    ``out_dir`` must be missing or empty. Each trace is exported by ``export_file``, and each adapted copy
    loaded back with torch-tb-profiler's own parser (plugin_check.py): a copy it cannot load is a ValueError
    (PluginMissing, also a ValueError, when the plugin is not installed). The export is written to a
    temporary folder beside ``out_dir`` and renamed to ``out_dir`` only once complete: on any error nothing
    appears there. The folder holds discover.EXPORT_MARKER, naming the traces it copies. ``workers``: as
    ``export_file``. ``plans``: trace path -> (plan, header keys), the copies already planned by the read
    that analysed them (``stepscope.analyze(..., copies=plans)``; one_pass.Planned each); a trace missing there
    is planned here. Where a plan carries the plugin's check of the copy, already under way (one_pass.Checked:
    plugin_check.EarlyCheck), its answer is taken instead of checking the written copy."""
    out_dir = Path(out_dir)
    traces = _sources(sources)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ValueError(f"{out_dir}: exists and is not an empty directory; give a new or empty directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        target = staging / out_dir.name
        written = []
        for n, (path, worker, span) in enumerate(traces):
            part = staging / f"excerpt-{n}.pt.trace.json"  # for the plugin check of a large copy
            # the copy of a trace too large for the plugin to load whole is checked by its excerpt, as soon as
            # that is written (while the copy's second half still is, where the excerpt lies in the first)
            checked: list[str | None] = []
            planned = (plans or {}).pop(Path(path), None)
            check = getattr(planned, "check", None)  # one_pass.Planned
            try:
                early = _checking_into(checked) if json_size(path) > plugin_check.WHOLE_UP_TO else None
                adapted, _raw = export_file(target, worker, span, path, excerpt=part if check is None else None,
                                            workers=workers, planned=planned,
                                            excerpt_done=early if check is None else None)
                if check is not None:
                    try:
                        checked.append(check.problem())
                    except RuntimeError:  # its child died unanswered: the written copy is checked below
                        pass
            finally:
                if check is not None:
                    check.stop()
            # a copy TensorBoard would drop is no export
            problem = checked[0] if checked else plugin_problem(adapted, excerpt_path=written_excerpt(part))
            if problem:
                raise ValueError(f"{path}: torch-tb-profiler 0.4.3 cannot load the exported copy ({problem})")
            written.append(out_dir / adapted.name)
        # marks the folder as copies, so that analysing a folder above it does not count them twice
        (target / EXPORT_MARKER).write_text(export_marker([path for path, _, _ in traces]))
        os.replace(target, out_dir)  # out_dir is missing or empty (checked above): rename(2) replaces it
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _sources(sources) -> list[tuple[Path, str, str]]:
    if not isinstance(sources, (str, os.PathLike)):
        return [(Path(p), w, s) for p, w, s in sources]
    src = Path(sources)
    if not src.is_dir():
        raise ValueError(f"{src}: not a directory; expected a run directory holding "
                         "<worker>.<span>.pt.trace.json[.gz] files from tensorboard_trace_handler")
    found = discover(src).traces
    if not found:
        raise ValueError(f"{src}: no traces found; expected <worker>.<span>.pt.trace.json[.gz] files "
                         "(tensorboard_trace_handler) or raw/<span>/<worker>.trace.json[.gz]")
    return [(f.path, f.worker, f.span or str(f.path.stat().st_mtime_ns)) for f in found]

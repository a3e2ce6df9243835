"""Where traces live in a run directory, and how to read and write them safely.

Layout of ``logs/<run>/`` (one worker name per process, one span per profiler cycle):

    <worker>.<span>.pt.trace.json[.gz]      TensorBoard-adapted copy: what torch-tb-profiler lists
    raw/<span>/<worker>.trace.json[.gz]      the untouched original, for Perfetto and Holistic Trace Analysis
    cycles.jsonl                             stepscope.trace_handler's row per cycle (capture/cycle_summary.py)

The plugin lists a file only if its name matches ``WORKER_PATTERN`` (copied from torch-tb-profiler 0.4.3,
``consts.py``), so the originals' names deliberately do not end in ``.pt.trace.json``. HTA wants one file per
rank per directory, hence one ``raw/<span>/`` folder per cycle. ``<span>`` is ``time.time_ns()``, like
``tensorboard_trace_handler``: the plugin sorts spans as strings, so they must all have the same width.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

from stepscope.trace.atomic import write_bytes_atomic
from stepscope.trace.bounded_read import open_trace

WORKER_PATTERN = re.compile(
    r"""^(?P<worker>.*?)    # worker name
    (?P<span>\.\d+)?        # optional span (a timestamp), with its dot
    \.pt\.trace\.json       # the suffix
    (?:\.gz)?$""",
    re.X,
)
RAW_DIR = "raw"
CYCLES = "cycles.jsonl"


@dataclass(frozen=True)
class TraceFile:
    path: Path
    worker: str
    span: str  # "" when the file name carries no span


def plugin_name(worker: str, span: str, gz: bool) -> str:
    """File name that torch-tb-profiler lists as (worker, span)."""
    return f"{worker}.{span}.pt.trace.json" + (".gz" if gz else "")


def raw_path(run_dir: Path, worker: str, span: str, gz: bool) -> Path:
    """Where the untouched original of (worker, span) lives; invisible to the plugin."""
    return run_dir / RAW_DIR / span / (f"{worker}.trace.json" + (".gz" if gz else ""))


def gzipped_since(path: Path) -> Path | None:
    """The .gz copy of a stepscope original that is gone because the writer has since gzipped it (the whole
    copy is made before the plain file is removed), else None."""
    path = Path(path)
    if path.name.endswith(".trace.json") and path.parent.parent.name == RAW_DIR and not path.exists():
        gz = path.with_name(path.name + ".gz")
        return gz if gz.is_file() else None
    return None


def find_plugin_traces(run_dir: Path) -> list[TraceFile]:
    """The traces in ``run_dir`` itself that the plugin would list, sorted by (worker, span)."""
    out = []
    for p in sorted(Path(run_dir).iterdir()):
        m = WORKER_PATTERN.match(p.name)
        if m and p.is_file():
            out.append(TraceFile(p, m.group(1), (m.group(2) or ".")[1:]))
    return sorted(out, key=lambda t: (t.worker, t.span))


def find_raw_traces(run_dir: Path) -> list[TraceFile]:
    """The untouched originals under ``run_dir/raw/``, sorted by (worker, span)."""
    out = []
    raw = Path(run_dir) / RAW_DIR
    if raw.is_dir():
        for p in sorted(raw.glob("*/*.trace.json*")):
            name = p.name.removesuffix(".gz").removesuffix(".trace.json")
            out.append(TraceFile(p, name, p.parent.name))
    return sorted(out, key=lambda t: (t.worker, t.span))


def load_trace(path: Path) -> dict:
    """Parse a Chrome-trace JSON file, gzipped or not."""
    with open_trace(Path(path)) as f:  # refuses more bytes than this process can afford to parse
        return json.load(f)


def write_trace_atomic(path: Path, trace: dict) -> None:
    """Write ``trace`` as JSON (gzipped if the name ends in .gz) via a temporary name and a rename.

    The temporary name does not match the plugin's pattern, so a half-written file is never listed.
    """
    # json's default separators on purpose: Holistic Trace Analysis finds a trace's rank with the regex
    # '"rank":\s+(\d+)' on the raw text (hta/common/trace_file.py), which compact JSON never matches
    data = json.dumps(trace).encode("utf-8")
    if Path(path).name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    write_bytes_atomic(path, data)

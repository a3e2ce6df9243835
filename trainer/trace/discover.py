"""Find every torch.profiler trace under a file or directory, whatever wrote it and whatever its name.

    from stepscope.trace.discover import discover
    found = discover(Path("lightning_logs"))     # Discovery(traces=(Found, ...), skipped=(Skipped, ...))
    print(found.summary())   # found 2 traces (1 Lightning, 1 export_chrome_trace); skipped 1 file: notes.json (...)

Recognised, by kind (trace/sources.py's table, tried in its order):

    stepscope                  <run>/raw/<span>/<worker>.trace.json[.gz]   (our trainer and stepscope.trace_handler;
                               the adapted copies beside raw/ are the same traces and are not counted again)
    Lightning                  fit-<filename>-[Strategy]SingleDeviceStrategy.training_step.<span>.pt.trace.json
                               (PyTorchProfiler: tensorboard_trace_handler under a "<stage>-...[Owner]..." worker)
    tensorboard_trace_handler  <worker>.<span>.pt.trace.json[.gz]
    accelerate                 profile_<process_index>.json   (ProfileKwargs(output_trace_dir=...))
    export_chrome_trace        any other *.json / *.json.gz that is a Chrome trace from torch.profiler

Torch-free and cheap: names decide the first three kinds; any other JSON file is sniffed from its first
64 KiB (a JSON object holding "traceEvents"), never parsed whole here. Whether a sniffed file really holds
training steps is only known once it is loaded: `report/loaded.py` checks that (each source's ``steps``
policy) and skips it otherwise.
Hidden files and folders and temporary `.partial` files are ignored. An entry that cannot be read as a file (a
looping or dangling symbolic link, no permission, a FIFO or folder with a trace's name) is skipped with the
reason, and the rest is analysed. So is stepscope's own output below the
root: a folder written by ``stepscope analyze --export-tensorboard`` holds the EXPORT_MARKER file naming the
traces it copies, and is skipped when those originals lie under the root too (they are found there); an
export whose originals are elsewhere or gone is a run like any other, and so is the export folder itself.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from stepscope.trace.files import RAW_DIR, WORKER_PATTERN
from stepscope.trace.sources import STEPSCOPE, of_name

CHROME_COPY = re.compile(r"\.chrome_trace\.json(\.gz)?$")  # our trainer's --export-chrome-trace copies
SNIFF_BYTES = 64 * 1024
# written into every --export-tensorboard folder: its traces are copies, never counted again from above
EXPORT_MARKER = ".stepscope-export"
HEAD_OF_TRACE = re.compile(rb'^\s*\{.*"traceEvents"\s*:', re.S)


@dataclass(frozen=True)
class Found:
    path: Path
    kind: str
    worker: str  # a name the plugin round-trips: no "/" and no ".<digits>" tail
    span: str  # "" when the name carries none; the caller picks one (the file's mtime in ns)
    run: str  # the run this trace belongs to: its folder relative to the root ("" for the root itself)


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass(frozen=True)
class Discovery:
    root: Path
    traces: tuple[Found, ...]
    skipped: tuple[Skipped, ...]

    def summary(self) -> str:
        """One line: what was found, by kind, and what was skipped and why."""
        return summary_line(self.traces, self.skipped, self.root)


def summary_line(traces, skipped, root: Path) -> str:
    kinds = Counter(t.kind for t in traces)
    n = len(traces)
    line = f"found {n} trace{'s' if n != 1 else ''}"
    if kinds:
        line += " (" + ", ".join(f"{c} {k}" for k, c in sorted(kinds.items(), key=lambda kc: (-kc[1], kc[0]))) + ")"
    if skipped:
        names = ", ".join(f"{_rel(s.path, root)} ({s.reason})" for s in skipped)
        line += f"; skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''}: {names}"
    return line


def _rel(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root)
        return str(rel) if str(rel) != "." else path.name
    except ValueError:
        return str(path)


def discover(root: Path) -> Discovery:
    """Every trace under ``root`` (a trace file or a directory), sorted by (run, worker, span)."""
    root = Path(root)
    traces: list[Found] = []
    skipped: list[Skipped] = []
    if root.is_file():
        hit = classify(root, root.parent, run="")
        if isinstance(hit, Found):
            traces.append(hit)
        elif hit is not None:
            skipped.append(hit)
        else:
            skipped.append(Skipped(root, "not a .json or .json.gz file"))
        return Discovery(root, tuple(traces), tuple(skipped))
    for folder, dirs, files in os.walk(root):
        folder_path = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not copies_within(folder_path / d, root))
        run = "" if folder_path == root else str(folder_path.relative_to(root))
        raw = raw_traces(folder_path, run)
        if raw:  # a stepscope run: its originals are the traces; its other trace files are copies of them
            for t in raw:
                problem = unreadable(t.path)
                if problem:
                    skipped.append(Skipped(t.path, problem))
                else:
                    traces.append(t)
            dirs[:] = [d for d in dirs if d != RAW_DIR]
            continue
        for name in sorted(files):
            hit = classify(folder_path / name, folder_path, run)
            if isinstance(hit, Found):
                traces.append(hit)
            elif hit is not None:
                skipped.append(hit)
    traces.sort(key=lambda t: (t.run, t.worker, t.span, str(t.path)))
    return Discovery(root, tuple(traces), tuple(skipped))


def export_marker(sources: list[Path]) -> str:
    """The EXPORT_MARKER file's text for an export of the traces at ``sources``."""
    return json.dumps({"written_by": "stepscope analyze --export-tensorboard",
                       "copies_of": [str(Path(p).resolve()) for p in sources]}, indent=1) + "\n"


def copies_within(folder: Path, root: Path) -> bool:
    """Whether ``folder`` is one of stepscope's exports whose originals all still lie under ``root``."""
    try:
        sources = json.loads((folder / EXPORT_MARKER).read_text()).get("copies_of")
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(sources, list) or not sources:
        return False
    top = root.resolve()
    return all(isinstance(s, str) and Path(s).is_file() and Path(s).is_relative_to(top) for s in sources)


def raw_traces(folder: Path, run: str) -> list[Found]:
    """The untouched originals of a stepscope run: ``folder/raw/<span>/<worker>.trace.json[.gz]``, one per
    (span, worker). The writer gzips a plain original by making the whole .gz copy, then removing the plain
    one: while both exist, the .gz copy is the one that stays."""
    raw = folder / RAW_DIR
    if not raw.is_dir():
        return []
    chosen: dict[tuple[str, str], Path] = {}
    for p in sorted(raw.glob("*/*.trace.json*")):  # sorted: a worker's plain name comes before its .gz name
        if p.name.endswith((".trace.json", ".trace.json.gz")) and p.parent.name.isdigit():
            chosen[(p.parent.name, p.name.removesuffix(".gz"))] = p
    return [Found(p, STEPSCOPE, p.name.removesuffix(".gz").removesuffix(".trace.json"), p.parent.name, run)
            for p in chosen.values()]


def classify(path: Path, folder: Path, run: str) -> Found | Skipped | None:
    """What ``path`` is: a Found trace, a Skipped JSON file (with the reason), or None (not a JSON file,
    hidden, or temporary: not worth mentioning)."""
    name = path.name
    if name.startswith(".") or name.endswith(".partial") or not name.endswith((".json", ".json.gz")):
        return None
    problem = unreadable(path)
    if problem:
        return Skipped(path, problem)
    if path.parent.parent.name == RAW_DIR and path.parent.name.isdigit() and ".trace.json" in name:
        worker = name.removesuffix(".gz").removesuffix(".json").removesuffix(".trace")
        return Found(path, STEPSCOPE, worker, path.parent.name, run)
    named = of_name(name)  # a source told by its file names alone (trace/sources.py)
    if named:
        kind, worker, span = named
        return Found(path, kind, safe_worker(worker), span, run)
    if CHROME_COPY.search(name) and any(WORKER_PATTERN.match(p.name) for p in folder.glob("*.pt.trace.json*")):
        return None  # --export-chrome-trace's plain copy beside the trace it copies
    sniffed = of_name(name, sniffed=True)
    if sniffed is None or not looks_like_trace(path):
        return Skipped(path, "not a profiler trace")
    kind, worker, span = sniffed
    return Found(path, kind, safe_worker(worker), span, run)


def unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, in a few words, or None when it can: a looping or dangling
    symbolic link, no permission, something that is no regular file (never opened: a FIFO would block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "not a regular file"
        with open(path, "rb"):
            pass
    except OSError as e:
        return f"unreadable: {e.strerror or type(e).__name__}"
    return None


def safe_worker(worker: str) -> str:
    """A worker name that survives the plugin's file-name pattern: no "/" and no ".<digits>" parts, which
    the pattern would take for a span."""
    worker = worker.replace("/", "_") or "trace"
    return re.sub(r"\.(\d)", r"_\1", worker)


def looks_like_trace(path: Path) -> bool:
    """A JSON object with "traceEvents" near its start: read at most SNIFF_BYTES (decompressed)."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
        else:
            with open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return bool(HEAD_OF_TRACE.match(head))

"""Follow a directory of traces and publish each complete one to a shadow logdir (shadow.py).

    watcher = Watcher(WatchConfig(source=Path("runs"), logdir=shadow / "logdir", staging=shadow / "staging"))
    while True:
        for line in watcher.poll():     # e.g. "+ run exp1@2: 1 trace (tensorboard_trace_handler): cpu_bound"
            print(line)
        time.sleep(2)

A trace is published only once it is complete: its size and mtime must be the same at two consecutive polls,
and it must then parse completely (loaded.py, streamed, in this process). A file that stays unparsable is reported once and
retried only when it changes. A file that changes after it was published (accelerate rewrites
`profile_<rank>.json` each time) is published again, as a new run. Event files under the source (a trainer
run's loss, learning rate, ...) are mirrored into the run of the same name (mirror.py). The source
directory is only read.
Torch-free.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import TraceError
from ..analysis.report import parse_path
from ..loaded import Loaded, assign_spans, load_one
from ..trace.discover import Found, discover
from .mirror import EventsMirror
from .shadow import publish_run

Signature = tuple[int, int]  # (size, mtime_ns)


@dataclass(frozen=True)
class WatchConfig:
    source: Path  # the user's directory of traces (never written)
    logdir: Path  # what TensorBoard serves
    staging: Path  # where runs are built before they are renamed into logdir (same filesystem)


@dataclass
class _State:
    published: dict[Path, Signature] = field(default_factory=dict)
    pending: dict[Path, Signature] = field(default_factory=dict)  # last signature seen, not yet stable
    rejected: dict[Path, Signature] = field(default_factory=dict)  # complete-looking but not a usable trace


def signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class Watcher:
    def __init__(self, cfg: WatchConfig) -> None:
        self.cfg = cfg
        self.state = _State()
        self.runs: list[Path] = []  # every shadow run published so far
        self.mirror = EventsMirror(cfg.source, cfg.logdir)

    def run_name(self, run: str) -> str:
        """The shadow run of a source folder (relative to the source; "" is the source itself)."""
        return run or self.cfg.source.resolve().name

    def poll(self) -> list[str]:
        """One look at the source: publish every trace that has become stable. Returns one line per
        published run and per rejected file."""
        stable: dict[str, list[tuple[Found, Signature]]] = defaultdict(list)
        for found in discover(self.cfg.source).traces:
            sig = signature(found.path)
            if sig is None or sig in (self.state.published.get(found.path), self.state.rejected.get(found.path)):
                continue
            if self.state.pending.get(found.path) != sig:
                self.state.pending[found.path] = sig  # first sight, or it changed: look again next poll
                continue
            stable[found.run].append((found, sig))
        lines = []
        for run, items in sorted(stable.items()):
            lines += self._publish(run, items)
        self.mirror.poll(self.run_name)  # the source's own Scalars and Text, e.g. a trainer run's loss
        return lines

    def _publish(self, run: str, items: list[tuple[Found, Signature]]) -> list[str]:
        lines, loaded = [], []
        spans = assign_spans([f for f, _ in items])
        for found, sig in items:
            try:
                span = spans[found.path]
                item = load_one(found, span, parse_path(found.path, found.worker, span))
            except TraceError as e:
                lines.append(self._reject(found.path, sig, str(e)))
                continue
            if signature(found.path) != sig:  # rewritten while we read it: wait for it to settle again
                self.state.pending.pop(found.path, None)
                continue
            if not isinstance(item, Loaded):
                lines.append(self._reject(found.path, sig, f"{found.path}: skipped ({item.reason})"))
                continue
            loaded.append((item, sig))
        if not loaded:
            return lines
        path, verdict = publish_run([item for item, _ in loaded], self.cfg.logdir, self.cfg.staging,
                                    self.run_name(run), self.cfg.source / run if run else self.cfg.source)
        self.runs.append(path)
        for item, sig in loaded:
            self.state.published[item.found.path] = sig
            self.state.pending.pop(item.found.path, None)
        kinds = ", ".join(sorted({item.found.kind for item, _ in loaded}))
        n = len(loaded)
        lines.append(f"+ run {path.relative_to(self.cfg.logdir)}: {n} trace{'s' if n != 1 else ''} "
                     f"({kinds}): {verdict}")
        return lines

    def _reject(self, path: Path, sig: Signature, why: str) -> str:
        self.state.rejected[path] = sig
        self.state.pending.pop(path, None)
        return f"! {why}"

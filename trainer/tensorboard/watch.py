"""Follow a directory of traces and publish each complete one to a shadow logdir (shadow.py).

    watcher = Watcher(WatchConfig(source=Path("runs"), logdir=shadow / "logdir", staging=shadow / "staging"))
    while True:
        for line in watcher.poll():     # e.g. "+ run exp1@2: 1 trace (tensorboard_trace_handler): cpu_bound"
            print(line)
        time.sleep(2)

A trace is published only once it is complete: its size and mtime must be the same at two consecutive polls,
and it must then parse completely. A file that stays unparsable is reported once and retried only when it
changes. Each run is analysed once, through the door (``stepscope.analyze``), unless it diagnosed itself: the
fresh report.json of a trainer run or a trace handler's folder is read (front.read_report) and published
with it, and the tab reads the published one.

Each run is parsed, analysed and published in a child process of its own (trace/workers.py ``Apart``), a
few at once within the memory budget, the smallest runs first, so that one huge or pathological trace never
keeps the others from being shown. The child has ``time_bound(paths)`` seconds: a minute plus two per GB of
trace, as the stepscope tab's analysis (tab/cache.py), or exactly $STEPSCOPE_TB_BOUND_S seconds when that is
set. Past it the child is killed, the run is reported in one line ("! run NAME: ... stopped ...") and
retried only when one of its files changes; `stepscope analyze` on it has no time limit. ``poll(wait_s)``
waits up to ``wait_s`` seconds for the runs it started (None: until each has ended or passed its bound);
what is still running is reported by a later poll.

The ranks of one job written into sibling folders are one run, as `stepscope analyze` and the tab make them
(report/jobs.py): a folder whose trace headers say it may join others (``files_may_join``) is held until the
held folders of its world size hold every rank of it, or for ``HOLD_S`` seconds at most, and they are then
analysed together, in one child, as one call of the door. Each job that analysis makes is published as one
run named by its folders joined with "+" (``rank0+rank1``), carrying the job's report with its cross-rank
section; a held folder that is no rank of the others' job is published under its own name. The tab reads the
published report: each trace is analysed once. A folder that may join others is analysed even when it holds
its own report.json (that is one rank's; the job's cross-rank section needs every rank).

A file that changes after it was published (accelerate rewrites
`profile_<rank>.json` each time) is published again, as a new run. Event files under the source (a trainer
run's loss, learning rate, ...) are mirrored into the run of the same name (mirror.py). The source
directory is only read.
Torch-free.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from stepscope.analysis import TraceError
from stepscope.report.front import NothingAnalysed, Rejected, RunsReport, analyze, read_report
from stepscope.report.jobs import files_may_join, header_rank
from stepscope.report.loaded import assign_spans
from stepscope.tensorboard.child import die_with_parent
from stepscope.tensorboard.mirror import EventsMirror
from stepscope.tensorboard.shadow import own_diagnosis, publish_run
from stepscope.tensorboard.tab.cache import TIME_BASE_S, TIME_PER_GB_S
from stepscope.tensorboard.tab.runs import JOIN
from stepscope.trace.discover import Found, discover
from stepscope.trace.workers import Apart, default_budget, json_size, peak_bytes

Signature = tuple[int, int]  # (size, mtime_ns)
BOUND_ENV = "STEPSCOPE_TB_BOUND_S"
MAX_AT_ONCE = max(2, os.cpu_count() or 1)  # runs analysed at once (within the memory budget)
HOLD_S = 30.0  # the longest a folder that may join others waits for the rest of its job's ranks


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
    busy: set[Path] = field(default_factory=set)  # files of a run queued or being analysed


@dataclass
class _Batch:
    """One run's new traces, analysed together in a child process; or (``joint``) the traces of the held
    folders that may be one job, ``run`` then naming them all joined with "+"."""

    run: str
    items: list[tuple[Found, Signature]]
    size: int  # bytes of JSON
    joint: bool = False
    apart: Apart | None = None
    bound: float = 0.0
    deadline: float = 0.0


@dataclass(frozen=True)
class Built:
    """What a run's child did (``build_run``), for the parent's state."""
    lines: list[str]
    published: list[tuple[Path, Signature]]
    rejected: list[tuple[Path, Signature]]
    unsettled: list[Path]  # rewritten while read: looked at again once stable
    paths: list[Path]  # the published runs (one, or one per job of a joint batch)

    @property
    def path(self) -> Path | None:
        """The first published run, or None."""
        return self.paths[0] if self.paths else None


def signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def bound_override() -> float | None:
    """$STEPSCOPE_TB_BOUND_S as seconds; None when unset; ValueError (one line) when not a positive number."""
    text = os.environ.get(BOUND_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{BOUND_ENV}={text!r}: use a number of seconds above 0")
    return value


def time_bound(size: int) -> float:
    """Seconds a run with ``size`` bytes of JSON may take (module docstring)."""
    override = bound_override()
    return override if override is not None else TIME_BASE_S + TIME_PER_GB_S * size / 1e9


def _size(items: list[tuple[Found, Signature]]) -> int:
    total = 0
    for found, _ in items:
        try:
            total += json_size(found.path)
        except OSError:
            pass
    return total


def build_run(cfg: WatchConfig, name: str, source: Path, items: list[tuple[Found, Signature]]) -> Built:
    """Analyse ``items`` (one source run's stable traces) through the door, unless the source's own
    report.json is the fresh report on exactly them (a trainer run, a trace handler's folder: read, not
    analysed again), and publish the usable ones as the shadow run ``name`` (shadow.py); in the run's child
    process."""
    found = [f for f, _ in items]
    if own_diagnosis(source, found):
        own = read_report(source, found)
        if own is not None:
            return _publish(cfg, [(name, source, found, own, "")], [], {f.path: s for f, s in items},
                            assign_spans(found), [], found)
    return _analysed(cfg, source, items, lambda runs: (name, source))


def build_joint(cfg: WatchConfig, items: list[tuple[Found, Signature]]) -> Built:
    """Analyse the traces of several source folders that may be one job (``items``) in one call of the door,
    and publish each job it makes as one shadow run: a job of several folders under their names joined with
    "+", a folder on its own under its name (module docstring); in the batch's child process."""
    def where(runs: list[str]) -> tuple[str, Path | None]:
        if len(runs) == 1:
            return runs[0] or cfg.source.resolve().name, cfg.source / runs[0] if runs[0] else cfg.source
        return JOIN.join(runs), None
    return _analysed(cfg, cfg.source, items, where)


def _analysed(cfg: WatchConfig, root: Path, items: list[tuple[Found, Signature]], where) -> Built:
    """``items`` analysed through the door as traces under ``root``, and each job of the report published
    as the shadow run ``where(its run folders)`` gives: (name, source folder or None)."""
    found = [f for f, _ in items]
    sig = {f.path: s for f, s in items}
    lines, rejected, error = [], [], ""
    copies: dict = {}  # each trace's copy planned by the read that analyses it
    try:
        report = analyze(root, traces=found, keep_going=True, tables=True, copies=copies)
        skipped = list(report.skipped)
    except NothingAnalysed as e:
        report, skipped = None, list(e.skipped)
    except TraceError as e:  # the traces parse, and their analysis fails: published without a diagnosis
        report, skipped, error = None, [], str(e)
    for item in skipped:
        lines.append(f"! {item.reason}" if isinstance(item, Rejected) else f"! {item.path}: skipped ({item.reason})")
        rejected.append((item.path, sig[item.path]))
    gone = {item.path for item in skipped}
    usable = [f for f in found if f.path not in gone]
    if report is None and not error:
        usable = []
    if isinstance(report, RunsReport):
        jobs = [([item.found for item in r.traces], r) for _, r in report.runs]
    elif report is not None:
        jobs = [([item.found for item in report.traces], report)]
    else:  # no analysis to group them into jobs: each folder as itself
        jobs = [([f for f in usable if f.run == run], None) for run in sorted({f.run for f in usable})]
    runs = [(*where(sorted({f.run for f in job})), job, job_report, error) for job, job_report in jobs]
    return _publish(cfg, runs, lines, sig, assign_spans(found), rejected, found, copies)


def _publish(cfg: WatchConfig, runs: list, lines: list[str], sig: dict, spans: dict, rejected: list,
             found: list[Found], planned: dict | None = None) -> Built:
    """Publish each (name, source, traces, report, error) of ``runs`` (shadow.py), each trace under its span
    in ``spans``, unless a trace was rewritten while it was read: then nothing, and every trace of ``found``
    (the batch) is looked at again once stable. ``planned``: the copies' plans made by the analysis' read."""
    every = [f for _, _, job, _, _ in runs for f in job]
    if any(signature(f.path) != sig[f.path] for f in every):
        return Built([], [], [], [f.path for f in found], [])
    paths = []
    for name, source, job, report, error in runs:
        path, verdict = publish_run([(f, spans[f.path]) for f in job], report, cfg.logdir, cfg.staging, name,
                                    source, error, planned)
        kinds = ", ".join(sorted({f.kind for f in job}))
        n = len(job)
        lines.append(f"+ run {path.relative_to(cfg.logdir)}: {n} trace{'s' if n != 1 else ''} ({kinds}): {verdict}")
        paths.append(path)
    return Built(lines, [(f.path, sig[f.path]) for f in every], rejected, [], paths)


class Watcher:
    def __init__(self, cfg: WatchConfig) -> None:
        self.cfg = cfg
        self.state = _State()
        self.runs: list[Path] = []  # every shadow run published so far
        self.mirror = EventsMirror(cfg.source, cfg.logdir)
        self.queued: list[_Batch] = []
        self.running: list[_Batch] = []
        # folders that may be one job with others, waiting for the rest of its ranks: run -> (items, since)
        self.held: dict[str, tuple[list[tuple[Found, Signature]], float]] = {}
        self.budget = default_budget()

    def run_name(self, run: str) -> str:
        """The shadow run of a source folder (relative to the source; "" is the source itself)."""
        return run or self.cfg.source.resolve().name

    @property
    def busy(self) -> bool:
        """Whether a run is queued or being analysed."""
        return bool(self.queued or self.running)

    def poll(self, wait_s: float | None = None) -> list[str]:
        """One look at the source: start the analysis of every run whose traces have become stable, and
        wait up to ``wait_s`` seconds (None: until each is done or stopped) for those running. Returns one
        line per published run, per rejected file and per run stopped at its time bound."""
        stable: dict[str, list[tuple[Found, Signature]]] = defaultdict(list)
        for found in discover(self.cfg.source).traces:
            if found.path in self.state.busy:
                continue
            sig = signature(found.path)
            if sig is None or sig in (self.state.published.get(found.path), self.state.rejected.get(found.path)):
                continue
            if self.state.pending.get(found.path) != sig:
                self.state.pending[found.path] = sig  # first sight, or it changed: look again next poll
                continue
            stable[found.run].append((found, sig))
        now = time.monotonic()
        for run, items in stable.items():
            self.state.busy.update(f.path for f, _ in items)
            if files_may_join([f.path for f, _ in items]):
                before, since = self.held.get(run, ([], now))
                self.held[run] = (before + items, since)
            else:
                self.queued.append(_Batch(run, items, _size(items)))
        self._release(now)
        self.queued.sort(key=lambda job: (job.size, job.run))  # the smallest runs first
        lines = self._collect(wait_s)
        self.mirror.poll(self.run_name)  # the source's own Scalars and Text, e.g. a trainer run's loss
        return lines

    def _release(self, now: float) -> None:
        """Queue the held folders of each world size as one joint batch once they hold every rank of it, or
        once one of them has waited HOLD_S seconds."""
        worlds: dict[int, list[str]] = defaultdict(list)
        for run, (items, _) in self.held.items():
            worlds[header_rank(items[0][0].path)[1]].append(run)
        for size, runs in worlds.items():
            ranks = {header_rank(f.path)[0] for run in runs for f, _ in self.held[run][0]}
            if ranks < set(range(size)) and now - min(self.held[run][1] for run in runs) < HOLD_S:
                continue
            items = [item for run in sorted(runs) for item in self.held.pop(run)[0]]
            if len(runs) == 1:
                self.queued.append(_Batch(runs[0], items, _size(items)))
            else:
                self.queued.append(_Batch(JOIN.join(sorted(runs)), items, _size(items), joint=True))

    def _start(self) -> None:
        while self.queued and len(self.running) < MAX_AT_ONCE:
            job = self.queued[0]
            held = sum(peak_bytes(j.size) for j in self.running)
            if self.running and held + peak_bytes(job.size) > self.budget:
                return
            self.queued.pop(0)
            source = self.cfg.source / job.run if job.run else self.cfg.source
            job.bound = time_bound(job.size)
            work, args = (build_joint, (self.cfg, job.items)) if job.joint else (
                build_run, (self.cfg, self.run_name(job.run), source, job.items))
            job.apart = Apart(work, args, setup=die_with_parent(os.getpid()))
            job.deadline = time.monotonic() + job.bound
            self.running.append(job)

    def _collect(self, wait_s: float | None) -> list[str]:
        lines: list[str] = []
        until = None if wait_s is None else time.monotonic() + wait_s
        while True:
            self._start()
            for job in list(self.running):
                if job.apart.ready():
                    self.running.remove(job)
                    lines += self._finish(job)
                elif time.monotonic() > job.deadline:
                    job.apart.stop()
                    self.running.remove(job)
                    lines.append(self._stopped(job))
            if not self.busy or (until is not None and time.monotonic() >= until):
                return lines
            time.sleep(0.05)

    def _finish(self, job: _Batch) -> list[str]:
        for found, _ in job.items:
            self.state.busy.discard(found.path)
        try:
            built: Built = job.apart.result()
        except Exception as e:  # noqa: BLE001 (the child died or failed: the run is reported, the rest served)
            why = str(e) if isinstance(e, (TraceError, ValueError)) else f"{type(e).__name__}: {e}"
            return [self._reject_all(job, f"run {self.run_name(job.run)}: not published ({why})")]
        for path, sig in built.published:
            self.state.published[path] = sig
            self.state.pending.pop(path, None)
        for path, sig in built.rejected:
            self.state.rejected[path] = sig
            self.state.pending.pop(path, None)
        for path in built.unsettled:
            self.state.pending.pop(path, None)
        self.runs += built.paths
        return built.lines

    def _stopped(self, job: _Batch) -> str:
        for found, _ in job.items:
            self.state.busy.discard(found.path)
        n, disk = len(job.items), sum(sig[0] for _, sig in job.items)
        return self._reject_all(job, f"run {self.run_name(job.run)} ({n} trace{'s' if n != 1 else ''}, "
                                     f"{disk / 1e6:.1f} MB): the analysis took more than {job.bound:.0f} s "
                                     "and was stopped, so that the other runs are served; it is tried again "
                                     "when a file changes, and `stepscope analyze` on it has no time limit")

    def _reject_all(self, job: _Batch, why: str) -> str:
        for found, sig in job.items:
            self.state.rejected[found.path] = sig
            self.state.pending.pop(found.path, None)
        return f"! {why}"

    def close(self) -> None:
        """Stop every analysis still running."""
        for job in self.running:
            job.apart.stop()
        self.running.clear()
        self.queued.clear()
        self.held.clear()

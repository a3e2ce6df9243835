"""Each run analysed once: the report and per-step times (measure.py), kept beside the run and in memory.

    cache = AnalysisCache(root)  # root: a folder of the user's cache, or None: beside each run
    state = cache.get(run)       # Ready(jobs) | Pending() | Failed(message); Pending starts the analysis
    state.measured               # a Ready run's Measured (a run is one job; see below for several)
    cache.seed(run, job)         # a job (JobMeasured) from the analysis of the folders it was found in

A run that was diagnosed where it was written (its fresh report.json, front.read_report: a trainer run, a
trace handler's folder, a run `stepscope tensorboard` published) is read, never analysed here; only folders
nobody diagnosed are. The run folders that may be one job (runs.py) are analysed together as one Run, whose
result is each job `stepscope analyze` makes of them (analyse.py), with the folders it joins: the tab then
shows each job as a run, seeded with its Measured, and analyses none of them again.

The analysis runs in one background thread, a run at a time, so a page never waits on a large trace: it
asks again. The thread hands each run to a process of its own (analyse.py), so TensorBoard's process never
forks and never holds a large trace. That process is given ``time_bound(run)`` seconds (a minute, plus two
minutes per GB of trace: four times the 1 GB trace's measured 31 s on a busy 2-core machine, BENCHMARKS.md),
then killed, and the run shows the error, so no run keeps the others waiting. The result is written with the
fingerprint of the traces it came from (runs.py: paths, sizes, mtimes); a later TensorBoard reads it back
instead of parsing the traces again, as long as the fingerprint holds. Where it is written (``cache_file``):
under a plain `tensorboard`, whose logdir is the user's and never written, in ``root`` (a folder of the
user's cache, plugin.py), one file per run named by a hash of the run's path; under `stepscope tensorboard`,
whose logdir is its own shadow copy (root None), in ``<run>/.stepscope/analysis.json`` (hidden, so
discovery and the PyTorch Profiler tab ignore it; for folders analysed together, in the logdir's
``.stepscope/`` by a hash of their names). Where that cannot be written the result stays in memory
only.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from stepscope.report.front import read_report
from stepscope.report.measure import Measured, measured_from_json
from stepscope.tensorboard.tab.runs import Run
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.workers import json_size, one_blas_thread

CACHE_DIR = ".stepscope"
CACHE_FILE = "analysis.json"
FORMAT = 3  # 2: Measured holds the full operator tables and the run's config (ops_ms, setup); 3: jobs
TIME_BASE_S = 60.0
TIME_PER_GB_S = 120.0


@dataclass(frozen=True)
class JobMeasured:
    """One job of an analysed run: the run folders it joins (``Found.run``: relative to the logdir, "" for
    the logdir itself) and its Measured."""
    folders: tuple[str, ...]
    measured: Measured

    def to_dict(self) -> dict:
        return {"folders": list(self.folders), "measured": self.measured.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> JobMeasured:
        return cls(tuple(d["folders"]), Measured.from_dict(d["measured"]))


@dataclass(frozen=True)
class Ready:
    jobs: tuple[JobMeasured, ...]  # one for a run; one per job for run folders analysed together

    @property
    def measured(self) -> Measured:
        """The run's Measured (a run the tab shows is one job)."""
        return self.jobs[0].measured


@dataclass(frozen=True)
class Pending:
    pass


@dataclass(frozen=True)
class Failed:
    message: str


def _version() -> str:
    try:
        return version("stepscope")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


VERSION = _version()  # a new stepscope may analyse differently: its cache entries are its own


def _key(run: Run) -> dict:
    return {"format": FORMAT, "stepscope": VERSION, "traces": run.fingerprint()}


def _id(run: Run) -> str:
    """What tells runs apart in memory: the folder, and the name of a run of several folders."""
    return f"{run.folder}\n{run.name}" if run.folders else str(run.folder)


def time_bound(run: Run) -> float:
    """Seconds the analysis of ``run`` may take (module docstring)."""
    size = 0
    for t in run.traces:
        try:
            size += json_size(t.path)
        except OSError:
            pass
    return TIME_BASE_S + TIME_PER_GB_S * size / 1e9


def measure_apart(run: Run) -> tuple[JobMeasured, ...]:
    """The run's jobs, each with its Measured, from analyse.py in a process of its own; ValueError (one
    line) when it fails or takes more than ``time_bound(run)`` seconds."""
    traces = [{"path": str(t.path), "kind": t.kind, "worker": t.worker, "span": t.span, "run": t.run,
               "folder": str(run.folder / t.run if run.folders else run.folder)} for t in run.traces]
    bound = time_bound(run)
    try:
        r = subprocess.run([sys.executable, "-m", "stepscope.tensorboard.tab.analyse", str(run.folder)],
                           input=json.dumps(traces), capture_output=True, text=True, timeout=bound,
                           env=one_blas_thread(dict(os.environ)))
    except subprocess.TimeoutExpired:
        raise ValueError(f"run {run.name}: the analysis took more than {bound:.0f} s and was stopped, so that "
                         "the other runs are analysed; `stepscope analyze` on it has no time limit") from None
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        raise ValueError(lines[-1] if lines else f"the analysis exited with code {r.returncode}")
    return tuple(JobMeasured.from_dict(job) for job in json.loads(r.stdout)["jobs"])


def diagnosed(run: Run) -> Measured | None:
    """The run's Measured from the report.json its writer left beside its traces (the trainer, the trace
    handler, `stepscope tensorboard`), when that is fresh and covers exactly its traces (front.read_report);
    None: the run is analysed, as is always a run of several folders (nobody writes its report)."""
    if run.folders:
        return None
    doc = read_report(run.folder, run.traces)
    return None if doc is None else measured_from_json(doc, run.folder)


def cache_file(folder: Path, root: Path | None, name: str | None = None) -> Path:
    """Where the analysis of the run in ``folder`` is kept (module docstring); ``name``: that of a run of
    several folders under ``folder`` (the logdir)."""
    what = str(Path(folder).resolve()) + (f"\n{name}" if name is not None else "")
    digest = hashlib.sha256(what.encode()).hexdigest()[:16]
    if root is None:
        return Path(folder) / CACHE_DIR / (CACHE_FILE if name is None else f"{digest}.json")
    return Path(root) / f"{digest}.json"


def _cache_file(run: Run, root: Path | None) -> Path:
    return cache_file(run.folder, root, run.name if run.folders else None)


def read_cached(run: Run, key: dict, root: Path | None = None) -> tuple[JobMeasured, ...] | None:
    path = _cache_file(run, root)
    try:
        doc = json.loads(path.read_text())
        if doc.get("key") == key:
            return tuple(JobMeasured.from_dict(job) for job in doc["jobs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def write_cached(run: Run, key: dict, jobs: tuple[JobMeasured, ...], root: Path | None = None) -> bool:
    """Write the cache file (``cache_file``); False when its folder is not writable."""
    path = _cache_file(run, root)
    try:
        if root is None:
            path.parent.mkdir(exist_ok=True)  # in the run folder, which exists
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"key": key, "jobs": [job.to_dict() for job in jobs]},
                                           allow_nan=False))
        return True
    except (OSError, ValueError):
        return False


class AnalysisCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root  # where results are written (cache_file)
        self._lock = threading.Lock()
        self._results: dict[str, tuple[dict, Ready | Failed]] = {}  # _id(run) -> (key, result)
        self._queued: set[str] = set()
        self._todo: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None

    def get(self, run: Run) -> Ready | Pending | Failed:
        key = _key(run)
        where = _id(run)
        with self._lock:
            held = self._results.get(where)
            if held is not None and held[0] == key:
                return held[1]
        own = diagnosed(run)
        cached = (JobMeasured(tuple(sorted({t.run for t in run.traces})), own),) if own is not None else \
            read_cached(run, key, self.root)
        if cached is not None:
            with self._lock:
                self._results[where] = (key, Ready(cached))
            return Ready(cached)
        self._enqueue(run)
        return Pending()

    def seed(self, run: Run, job: JobMeasured) -> None:
        """``run`` is ``job``, found by the analysis of the folders it lies in: ready, never analysed again."""
        with self._lock:
            self._results[_id(run)] = (_key(run), Ready((job,)))

    def wait(self, run: Run, timeout_s: float) -> Ready | Pending | Failed:
        """``get``, waiting up to ``timeout_s`` for a pending analysis."""
        deadline = time.monotonic() + timeout_s
        state = self.get(run)
        while isinstance(state, Pending) and time.monotonic() < deadline:
            time.sleep(0.1)
            state = self.get(run)
        return state

    def _enqueue(self, run: Run) -> None:
        with self._lock:
            if _id(run) in self._queued:
                return
            self._queued.add(_id(run))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="stepscope-tab-analysis", daemon=True)
                self._worker.start()
        self._todo.put(run)

    def _work(self) -> None:
        while True:
            run = self._todo.get()
            key = _key(run)
            try:
                jobs = measure_apart(run)
                result: Ready | Failed = Ready(jobs)
                write_cached(run, key, jobs, self.root)
            except Exception as e:  # noqa: BLE001 (a failed run shows its message; the thread lives on)
                result = Failed(str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}")
            with self._lock:
                self._results[_id(run)] = (key, result)
                self._queued.discard(_id(run))

"""Which loaded traces form one job: one run folder is one job, unless the traces themselves say otherwise.

    jobs = group_jobs(loaded)          # [Job(folders=("exp1",), loaded=(...)), Job(folders=("exp2",), ...)]

Every trace belongs to the run folder that holds it (discover.py's ``Found.run``). Traces of different run
folders never pair as ranks because of their names (every single-process run of the trainer names its
worker ``<host>_<pid>_rank0``): two separate runs side by side are two reports, not a 2-rank job. Run folders
are joined into one job only when the traces' own ``distributedInfo`` says they are one: every trace of each
folder carries a rank and a world size, the world sizes are equal, the ranks of the folders are distinct,
and their profiled windows overlap in time (ranks of one job profile the same steps). A joined job is named
by its folders, joined with "+".

    may_join([(0, 2), (1, 2)])         # False: these ranks fill their world; True for [(0, 4), (1, 4)]
    files_may_join([path, ...])        # may_join on the (rank, world size) each trace file's header gives
    header_rank(path)                  # (rank, world size) from its header, once per version of the file

``may_join`` is the part of the rule that a trace's header decides (each trace names its rank and world
size, one world, distinct ranks that do not fill it): a folder for which it is False is a job of its own
whatever lies beside it. The stepscope tab (tensorboard/tab/runs.py) and the `stepscope tensorboard` watcher
(tensorboard/watch.py) analyse the folders for which it is True together, through the door, so that the jobs
they show are the ones this rule makes. A header gives the rank and world size its ``distributedInfo`` holds
before ``traceEvents``, where torch writes it; a trace that gives them only after its events is taken as a
run of its own.
Torch-free.
"""

from __future__ import annotations

import threading
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec
from stepscope.analysis.events import distributed_rank
from stepscope.report.loaded import Loaded
from stepscope.trace.jsonstream import read_header


@dataclass(frozen=True)
class Job:
    folders: tuple[str, ...]  # its run folders, relative to the analysed path ("" for the path itself)
    loaded: tuple[Loaded, ...]

    @property
    def run(self) -> str:
        """The job's name: its run folder, or its folders joined with "+"."""
        return "+".join(self.folders)


@dataclass(frozen=True)
class _Ranks:
    """What a run folder's traces say about the job they belong to."""
    world_size: int
    ranks: frozenset[int]
    start_us: float
    end_us: float


def group_jobs(loaded: list[Loaded]) -> list[Job]:
    """The traces grouped into jobs, in the order of their run folders (see the module docstring)."""
    by_run: dict[str, list[Loaded]] = defaultdict(list)
    for item in loaded:
        by_run[item.found.run].append(item)
    groups: list[tuple[list[str], _Ranks | None]] = []
    for run in sorted(by_run):
        ranks = _ranks(by_run[run])
        for i, (runs, joined) in enumerate(groups):
            if ranks is not None and joined is not None and _one_job(joined, ranks):
                groups[i] = ([*runs, run], _join(joined, ranks))
                break
        else:
            groups.append(([run], ranks))
    return [Job(tuple(runs), tuple(item for run in runs for item in by_run[run])) for runs, _ in groups]


def may_join(ranks: list[tuple[int | None, int | None]]) -> bool:
    """Whether a run folder whose traces say they are these (rank, world size) may be joined with another
    folder (module docstring): every trace names both, the world is one, and its ranks are distinct, within
    it, and leave a rank of it to another folder."""
    if not ranks or any(r is None or w is None for r, w in ranks):
        return False
    sizes = {w for _, w in ranks}
    held = [r for r, _ in ranks]
    if len(sizes) != 1 or len(set(held)) != len(held):
        return False
    (size,) = sizes
    return all(0 <= r < size for r in held) and len(held) < size


_HEADERS: dict[tuple[str, int, int], tuple[int | None, int | None]] = {}
_HEADERS_LOCK = threading.Lock()


def header_rank(path: Path) -> tuple[int | None, int | None]:
    """(rank, world size) from the trace's header, once per version of the file; (None, None) when the
    header gives none or cannot be read (the analysis then says what is wrong)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None, None
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _HEADERS_LOCK:
        if key in _HEADERS:
            return _HEADERS[key]
    try:
        rank = distributed_rank(read_header(path))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, RecursionError, msgspec.DecodeError,
            msgspec.ValidationError):
        rank = None, None
    with _HEADERS_LOCK:
        _HEADERS[key] = rank
    return rank


def files_may_join(paths: Iterable[Path]) -> bool:
    """``may_join`` for a run folder holding the trace files ``paths``, from their headers."""
    return may_join([header_rank(p) for p in paths])


def _one_job(a: _Ranks, b: _Ranks) -> bool:
    return a.world_size == b.world_size and not (a.ranks & b.ranks) and a.start_us < b.end_us \
        and b.start_us < a.end_us


def _join(a: _Ranks, b: _Ranks) -> _Ranks:
    return _Ranks(a.world_size, a.ranks | b.ranks, min(a.start_us, b.start_us), max(a.end_us, b.end_us))


def _ranks(items: list[Loaded]) -> _Ranks | None:
    """The folder's world size, ranks and profiled window; None unless every trace has steps and the folder
    ``may_join`` others."""
    facts = [_facts(item) for item in items]
    if not facts or any(f is None for f in facts) or not may_join([(f[0], f[1]) for f in facts]):
        return None
    return _Ranks(facts[0][1], frozenset(f[0] for f in facts), min(f[2] for f in facts), max(f[3] for f in facts))


def _facts(item: Loaded) -> tuple[int, int, float, float] | None:
    """(rank, world size, first step's start, last step's end in the trace's µs) or None when the trace does
    not say which rank of which world it is."""
    p = item.parsed
    if p.rank is None or p.world_size is None or not p.steps:
        return None
    return p.rank, p.world_size, p.base_us + p.steps[0].start, p.base_us + p.steps[-1].end

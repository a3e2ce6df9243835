"""Which loaded traces form one job: one run folder is one job, unless the traces themselves say otherwise.

    jobs = group_jobs(loaded)          # [Job(folders=("exp1",), loaded=(...)), Job(folders=("exp2",), ...)]

Every trace belongs to the run folder that holds it (discover.py's ``Found.run``). Traces of different run
folders never pair as ranks because of their names (every single-process run of the trainer names its
worker ``<host>_<pid>_rank0``): two separate runs side by side are two reports, not a 2-rank job. Run folders
are joined into one job only when the traces' own ``distributedInfo`` says they are one: every trace of each
folder carries a rank and a world size, the world sizes are equal, the ranks of the folders are distinct,
and their profiled windows overlap in time (ranks of one job profile the same steps). A joined job is named
by its folders, joined with "+".
Torch-free.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stepscope.report.loaded import Loaded


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


def _one_job(a: _Ranks, b: _Ranks) -> bool:
    return a.world_size == b.world_size and not (a.ranks & b.ranks) and a.start_us < b.end_us \
        and b.start_us < a.end_us


def _join(a: _Ranks, b: _Ranks) -> _Ranks:
    return _Ranks(a.world_size, a.ranks | b.ranks, min(a.start_us, b.start_us), max(a.end_us, b.end_us))


def _ranks(items: list[Loaded]) -> _Ranks | None:
    """The folder's world size, ranks and profiled window; None unless every trace names its rank and world
    size, all alike, with distinct ranks below the world size."""
    facts = [_facts(item) for item in items]
    if not facts or any(f is None for f in facts):
        return None
    sizes = {f[1] for f in facts}
    ranks = [f[0] for f in facts]
    (size,) = sizes if len(sizes) == 1 else (None,)
    if size is None or len(set(ranks)) != len(ranks) or not all(0 <= r < size for r in ranks):
        return None
    return _Ranks(size, frozenset(ranks), min(f[2] for f in facts), max(f[3] for f in facts))


def _facts(item: Loaded) -> tuple[int, int, float, float] | None:
    """(rank, world size, first step's start, last step's end in the trace's µs) or None when the trace does
    not say which rank of which world it is."""
    p = item.parsed
    if p.rank is None or p.world_size is None or not p.steps:
        return None
    return p.rank, p.world_size, p.base_us + p.steps[0].start, p.base_us + p.steps[-1].end

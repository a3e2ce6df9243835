"""Why a rank straggles: its time per step, phase by phase, against the other ranks' median.

    why = straggler_why(straggler_span, other_spans)
    why.causes          # ("host_outside_ops",): the phases that account for the difference
    why.text()          # one line for the reports

A step's breakdown (breakdown.py) partitions it into buckets; the phases here are those buckets under the
names a person asks about:

    phase             GPU trace bucket       CPU trace bucket   what it is
    data              data                   data               waiting for the next batch
    host_outside_ops  other_host             other_host         host code outside torch ops and, on a GPU,
                                                                outside the model's own work (Python, sleeps)
    host_dispatch     launch                 cpu_ops            inside torch ops (on a GPU, also the model's
                                                                own Python between them): dispatching
    sync              sync                   -                  the host blocked until the GPU caught up
    gpu_kernels       gpu_busy               -                  kernels (and memsets) running
    device_idle       device_idle            -                  the GPU pausing between work already queued
    copies            transfer               -                  host<->device copies no kernel overlaps
    exposed_comm      communication          communication      collectives with nothing else running

Each phase of the straggler is compared with the median of that phase over the other ranks, in the
profiled steps (the ranks as the trace measured them, like the cross-rank table). The straggler's excess
time outside communication is the sum of its phases' excesses outside ``exposed_comm`` (the other ranks'
extra exposed communication is their waiting for it, an effect, never a cause). A phase is named as a
cause when its excess is at least ``CAUSE_SHARE`` of the total positive excess; the largest always is.
The names that differ most within the named phases (by_name.py) say where: the kernels of slower GPU work,
the ops of slower dispatch, the ``record_function`` range (or the op after the gap) of host work outside
ops, the DataLoader range of a longer data wait. When by name the causes hold about as much work as on the
median rank (``same_work``), no name accounts for the difference and the report says so: the rank's GPU
waits on the same host work longer, which is how the rank that reaches the collective last looks even when
it does nothing more than the others.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from stepscope.analysis.span import SpanReport
from stepscope.analysis.vocabulary import EXPOSED_COMM
from stepscope.analysis.vocabulary import PHASES as PHASE_TABLE

PHASES = {p.name: p.label for p in PHASE_TABLE}  # phase -> its label, in the registry's order
BUCKET_OF = {p.name: p.buckets for p in PHASE_TABLE}  # phase -> the buckets it sums
CAUSE_SHARE = 0.25  # of the straggler's whole excess outside communication: a phase this large is a cause
TOP_NAMES = 5
NAME_SHARE = 0.05  # a name is listed when it differs by this share of the excess (noise otherwise)
SAME_WORK = 0.5  # the causes' work by name grew less than this share of their excess: no name accounts for it


@dataclass(frozen=True)
class Delta:
    """A time per step of the straggler against the other ranks' median of it: one phase's (``name`` None),
    or that of one kernel, op or range within the phase (by_name.py)."""
    phase: str
    straggler_ms: float
    median_ms: float
    name: str | None = None

    @property
    def delta_ms(self) -> float:
        return self.straggler_ms - self.median_ms

    def to_dict(self) -> dict:
        named = {} if self.name is None else {"name": self.name}
        return {"phase": self.phase, **named, "straggler_ms": round(self.straggler_ms, 4),
                "median_ms": round(self.median_ms, 4), "delta_ms": round(self.delta_ms, 4)}


@dataclass(frozen=True)
class StragglerWhy:
    rank: int
    worker: str
    excess_ms: float  # per step outside communication, over the other ranks' phase medians
    phases: tuple[Delta, ...]  # every phase the trace has, in PHASES order
    causes: tuple[str, ...]  # phase ids, the largest excess first
    names: tuple[Delta, ...]  # within the causes, the largest excess first
    work: tuple[Delta, ...]  # per cause with names: the total time of all its names (by_name.py)

    @property
    def same_work(self) -> bool:
        """No kernel, op or range accounts for the difference: by name, the causes hold about as much work
        as on the median rank; the rank differs in when the work runs (what its GPU waits on), not in how
        much of it there is."""
        by = {p.phase: p for p in self.phases}
        return bool(self.work) and all(w.delta_ms < SAME_WORK * by[w.phase].delta_ms for w in self.work)

    def to_dict(self) -> dict:
        return {"rank": self.rank, "worker": self.worker, "excess_ms": round(self.excess_ms, 4),
                "causes": list(self.causes), "phases": [p.to_dict() for p in self.phases],
                "top_differing": [n.to_dict() for n in self.names],
                "work_by_name": [w.to_dict() for w in self.work], "same_work": self.same_work,
                "text": self.text()}

    def text(self) -> str:
        by = {p.phase: p for p in self.phases}
        parts = [f"{PHASES[c]} {by[c].straggler_ms:.2f} ms per step vs {by[c].median_ms:.2f} ms median "
                 f"(+{by[c].delta_ms:.2f})" for c in self.causes]
        line = (f"rank {self.rank} is {self.excess_ms:.2f} ms per step slower outside communication than the "
                "median rank; " + (f"the difference is {'; '.join(parts)}" if parts else
                                   "no phase of its profiled steps is longer than the median rank's"))
        if self.same_work:
            line += ("; no kernel, op or range accounts for it: by name the rank does as much work as the "
                     "median rank (" + ", ".join(f"{PHASES[w.phase]} {w.straggler_ms:.2f} vs {w.median_ms:.2f} ms"
                                                for w in self.work)
                     + " per step), it differs in when that work runs")
        elif self.names:
            line += "; the largest differences: " + ", ".join(
                f"`{_short(n.name)}` (+{n.delta_ms:.2f} ms)" for n in self.names[:3])
        return line


def _short(name: str, n: int = 80) -> str:
    """A kernel's name in a line of text: its templates and arguments can run to hundreds of characters."""
    return name if len(name) <= n else name[: n - 1] + "…"


def straggler_why(s: SpanReport, others: list[SpanReport], rank: int) -> StragglerWhy:
    mine = _phases(s)
    rows = tuple(_against_median(mine, [_phases(o) for o in others], [p for p in PHASES if p in mine]))
    excess = [r for r in rows if r.phase != EXPOSED_COMM and r.delta_ms > 0]
    total = sum(r.delta_ms for r in excess)
    ranked = sorted(excess, key=lambda r: r.delta_ms, reverse=True)
    causes = tuple(r.phase for i, r in enumerate(ranked) if i == 0 or r.delta_ms >= CAUSE_SHARE * total)
    excess_ms = sum(r.delta_ms for r in rows if r.phase != EXPOSED_COMM)
    return StragglerWhy(rank, s.worker, excess_ms, rows, causes, tuple(_names(s, others, causes, excess_ms)),
                        tuple(_work(s, others, causes)))


def _against_median(mine: dict[str, float], theirs: list[dict[str, float]], keys: Iterable[str],
                    phase: str | None = None) -> list[Delta]:
    """Each key's time per step on the straggler (``mine``) against its median over the other ranks
    (``theirs``; a rank without the key counts 0): phases when ``phase`` is None, else names within it."""
    return [Delta(k if phase is None else phase, mine.get(k, 0.0),
                  statistics.median(t.get(k, 0.0) for t in theirs), None if phase is None else k)
            for k in keys]


def _phases(s: SpanReport) -> dict[str, float]:
    bd = s.breakdown_profiled or s.breakdown
    return {p: sum(bd.ms_per_step(b) for b in buckets if b in bd.buckets)
            for p, buckets in BUCKET_OF.items() if any(b in bd.buckets for b in buckets)}


def _work(s: SpanReport, others: list[SpanReport], causes: tuple[str, ...]) -> list[Delta]:
    if s.names is None:
        return []
    return _against_median(s.names.totals, [o.names.totals if o.names is not None else {} for o in others],
                           [p for p in causes if p in s.names.totals])


def _names(s: SpanReport, others: list[SpanReport], causes: tuple[str, ...], excess_ms: float) -> list[Delta]:
    if s.names is None:
        return []
    out = []
    for phase in causes:
        mine = s.names.of(phase)
        theirs = [o.names.of(phase) if o.names is not None else {} for o in others]
        out += [d for d in _against_median(mine, theirs, set(mine).union(*theirs), phase)
                if d.delta_ms > 0 and d.delta_ms >= NAME_SHARE * excess_ms]
    return sorted(out, key=lambda d: (-d.delta_ms, d.name))[:TOP_NAMES]

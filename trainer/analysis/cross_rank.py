"""Cross-rank analysis of one profiling cycle of a multi-process (torchrun/DDP) run.

Traces of one cycle are matched the way torch-tb-profiler does it: by the index of the span within each
worker's sorted spans (``tensorboard_trace_handler`` stamps each rank's file with its own time, so the span
strings differ between ranks), by the one rule of cycles.py that every caller numbering cycles uses;
``span_index`` is the plugin's 1-based number of the same cycle. Each rank comes from the trace's ``distributedInfo.rank``, else from
``rank<N>`` in the worker name (our trainer's ``<host>_<pid>_rank<N>``). A worker with neither is not a rank:
two runs of a plain ``tensorboard_trace_handler`` script in one directory are two processes named by host and
PID, not a distributed job, and get no cross-rank section. Nor does a cycle in which two workers claim the
same rank: the ranks of one job are distinct, so those are separate processes (e.g. two single-process runs
whose workers are both named ``..._rank0``).

For each straggler, ``stragglers_why`` compares its step phase by phase with the median of the ranks
that do not straggle and names the phases, and the kernels, ops or ranges, that make the difference
(straggler_why.py).

Per rank: step time; compute (kernels or torch ops that are not collectives), communication (nccl kernels on
a GPU; gloo/nccl collectives and c10d ops on the host for CPU runs) and their overlap, all in ms per step;
``exposed_comm_ms`` is the part of the step where communication runs and nothing else does (the span's
``communication`` bucket).

Straggler. Collectives make every rank's step equally long: the ranks that arrive first wait inside the
collective for the last one. So the step time cannot single out the slow rank; the time a rank spends
*outside* exposed communication (``outside_comm_ms`` = step - exposed communication) can. A rank is a
straggler when that time, as the step runs without the profiler, exceeds ``STRAGGLER_RATIO`` x the median of
the other ranks, by at least ``STRAGGLER_MIN_SHARE`` of the median step, and by more than the profiler's own
host cost on that rank (its modelled inflation): profiling slows ranks unevenly, and a difference it alone
could make names nobody. 1.2 is a judgment call: a
rank 20% slower than its peers makes each of them wait a sixth of its own work every step, which is worth
fixing, while the smallest spread we measured between ranks that were balanced by construction (2-rank gloo,
this recorder without its delay, a quiet run) was 1.09x. Over only a few profiled steps, scheduling noise on
an oversubscribed host is larger (2 ranks on 2 cores: 2x to 3x in 2 of 3 runs); the flag reports what
happened in the profiled window, so profile more steps to tell a persistent straggler from a transient one.
With no collectives in the trace, outside_comm_ms is the step time, and the rule compares step times.

The job's verdict is what bounds the job: a straggler's own verdict when there is one (fixing it frees every
rank), else the verdict of the ranks' median breakdown (each time bucket's median share of the step over the
ranks). Without a straggler the ranks are alike within the rule above, so which one happens to spend a little
more time outside communication in the profiled window says nothing, and must not flip a near tie. Its
communication share is the smallest over the ranks, not the median: a collective's kernel runs on each rank
from that rank's arrival to the last rank's, so only the last to arrive times the collective itself, and the
rest of the others' time in it is waiting for a peer. Profiling slows the ranks' hosts unevenly, so in the
profiled window that wait can fill most of a launch-bound rank's step (a balanced 2-rank job on 2 H200s: rank
1 97% in its all-reduce, rank 0 under 1%, and the job's step 19x its CUDA-graph replay, collectives
included): the median would call the job communication-bound where removing its launches is what pays.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, replace

from stepscope.analysis.breakdown import Breakdown
from stepscope.analysis.cycles import cycles
from stepscope.analysis.findings import Finding, remedies, verdict
from stepscope.analysis.memory import rank_imbalance
from stepscope.analysis.span import SpanReport
from stepscope.analysis.straggler_why import StragglerWhy, straggler_why
from stepscope.analysis.verdicts import BALANCE_RANKS, COMM
from stepscope.analysis.vocabulary import COMMUNICATION, STRAGGLER

STRAGGLER_RATIO = 1.2
STRAGGLER_MIN_SHARE = 0.05
EXPOSED_COMM_PCT = 10.0  # a cross-rank communication finding from this median share of the step
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)


@dataclass(frozen=True)
class RankRow:
    rank: int
    worker: str
    span: str
    verdict: str
    step_ms: float
    compute_ms: float
    comm_ms: float
    overlap_ms: float
    exposed_comm_ms: float
    outside_comm_ms: float
    straggler: bool

    def to_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class CrossRankReport:
    span_index: int  # 1-based, as in the plugin; ``cycle`` is the number stepscope shows
    ranks: tuple[RankRow, ...]
    median_step_ms: float
    stragglers: tuple[int, ...]
    verdict: str
    findings: tuple[Finding, ...]
    remedies: tuple[str, ...]
    why: tuple[StragglerWhy, ...] = ()  # one per straggler, in rank order (straggler_why.py)
    memory: dict | None = None  # each rank's peak allocated and their imbalance (memory.rank_imbalance)
    # the reference a straggler is shown against: each bucket's median over the ranks that keep pace (all of
    # them when every rank straggles), ms per step as the step runs without the profiler
    median_breakdown: dict[str, float] | None = None

    @property
    def cycle(self) -> int:
        """The cycle's number from 0, as ``cycles``, cycles.jsonl, diagnosis.md and the tab number it."""
        return self.span_index - 1

    def to_dict(self) -> dict:
        out = {"span_index": self.span_index, "world_size": len(self.ranks),
               "ranks": [r.to_dict() for r in self.ranks], "median_step_ms": round(self.median_step_ms, 4),
               "median_breakdown_ms_per_step": {k: round(v, 4) for k, v in (self.median_breakdown or {}).items()},
               "straggler_ratio": STRAGGLER_RATIO, "stragglers": list(self.stragglers),
               "stragglers_why": [w.to_dict() for w in self.why],
               "verdict": self.verdict, "findings": [f.to_dict() for f in self.findings],
               "remedies": list(self.remedies)}
        if self.memory is not None:
            out["memory"] = self.memory
        return out


def cross_rank(spans: list[SpanReport]) -> list[CrossRankReport]:
    """One report per profiling cycle that several workers took part in; [] for a single-process run."""
    ranked = [s for s in spans if rank_of(s) is not None]  # a bare host/PID name is a separate process, not a rank
    grouped = cycles(ranked, lambda s: s.worker, lambda s: s.span)
    return [_cycle(i + 1, members) for i, members in enumerate(grouped)
            if len(members) > 1 and len({rank_of(s) for s in members}) == len(members)]


def rank_of(span: SpanReport) -> int | None:
    if span.rank is not None:
        return span.rank
    m = RANK_IN_NAME.search(span.worker)
    return int(m.group(1)) if m else None


def _cycle(index: int, members: list[SpanReport]) -> CrossRankReport:
    members = sorted(members, key=lambda s: s.worker)
    rows = []
    for s in members:
        # ranks are compared as the trace measured them: the profiler slows every rank's host alike
        m, bd = s.profiled or s.metrics, s.breakdown_profiled or s.breakdown
        exposed = bd.ms_per_step(COMMUNICATION)
        rows.append(RankRow(rank_of(s), s.worker, s.span, s.verdict, m.step_ms, m.compute_ms_per_step,
                            m.comm_ms_per_step, m.overlap_ms_per_step, exposed, m.step_ms - exposed, False))
    flagged = [s.worker for s in _stragglers(members)]
    rows = sorted((replace(r, straggler=r.worker in flagged) for r in rows),
                  key=lambda r: r.rank)
    found = _findings(rows, members)
    return CrossRankReport(index, tuple(rows), statistics.median(r.step_ms for r in rows),
                           tuple(sorted(r.rank for r in rows if r.straggler)), _verdict(rows, members), tuple(found),
                           tuple(remedies(found)), tuple(_why(members, flagged)),
                           rank_imbalance({rank_of(s): s.memory for s in members}),
                           _median_breakdown([s for s in members if s.worker not in flagged] or members))


def _median_breakdown(steady: list[SpanReport]) -> dict[str, float]:
    buckets = list(dict.fromkeys(b for s in steady for b in s.breakdown.buckets))
    return {b: statistics.median(s.breakdown.ms_per_step(b) if b in s.breakdown.buckets else 0.0 for s in steady)
            for b in buckets}


def _why(members: list[SpanReport], flagged: list[str]) -> list[StragglerWhy]:
    """Each straggler (``flagged``: their workers) against the median of the ranks that do not straggle (of
    all the others when every rank does)."""
    out = []
    for s in sorted(members, key=rank_of):
        if s.worker not in flagged:
            continue
        peers = [o for o in members if o.worker not in flagged] or [o for o in members if o is not s]
        out.append(straggler_why(s, peers, rank_of(s)))
    return out


def _outside_comm(s: SpanReport) -> float:
    """ms per step outside exposed communication, as the step runs without the profiler."""
    return s.metrics.step_ms - s.breakdown.ms_per_step(COMMUNICATION)


def _stragglers(members: list[SpanReport]) -> list[SpanReport]:
    """The members that straggle: each more than STRAGGLER_RATIO x the others' median time outside
    communication, by at least STRAGGLER_MIN_SHARE of the median step, and by more than the profiler's own
    host cost on that rank could explain (every rank's host is slowed by the profiler, and not always
    alike)."""
    outside = [_outside_comm(s) for s in members]
    profiled = [_profiled_outside_comm(s) for s in members]
    others, others_profiled = medians_without_each(outside), medians_without_each(profiled)
    median_step = statistics.median(o.metrics.step_ms for o in members)
    out = []
    for s, mine, theirs, mine_profiled, theirs_profiled in zip(members, outside, others, profiled, others_profiled,
                                                                strict=True):
        excess = mine - theirs
        noise = s.inflation.ms_per_step if s.inflation is not None else 0.0
        # the finding's cost is the excess as profiled (what the others measurably wait): a rank that is not
        # also ahead as profiled holds nobody back in this trace
        if mine > STRAGGLER_RATIO * theirs and excess >= STRAGGLER_MIN_SHARE * median_step and excess > noise \
                and mine_profiled > theirs_profiled:
            out.append(s)
    return out


def medians_without_each(values: list[float]) -> list[float]:
    """For each value, ``statistics.median`` of all the others (exactly: the same middle elements, averaged
    the same way), in O(n log n) rather than a median per value. At least two values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranked = [values[i] for i in order]
    m = len(values) - 1  # the others of each value
    out = [0.0] * len(values)
    hi = m // 2  # the others' middle (odd m), or the upper of their two middles (even m)
    for pos, i in enumerate(order):  # the others: the ranked list without position pos
        upper = ranked[hi if hi < pos else hi + 1]
        out[i] = upper if m % 2 else (ranked[hi - 1 if hi - 1 < pos else hi] + upper) / 2
    return out


def _profiled_outside_comm(s: SpanReport) -> float:
    """ms per step outside exposed communication, as profiled (the rows' outside_comm_ms)."""
    m, bd = s.profiled or s.metrics, s.breakdown_profiled or s.breakdown
    return m.step_ms - bd.ms_per_step(COMMUNICATION)


def _verdict(rows: list[RankRow], members: list[SpanReport]) -> str:
    """The slowest straggler's verdict, else that of the ranks' median breakdown (see the module docstring)."""
    stragglers = [r for r in rows if r.straggler]
    if stragglers:
        return max(stragglers, key=lambda r: r.outside_comm_ms).verdict
    # no rank holds the others back: each bucket's median share over the ranks, so that which rank happens to
    # be a little slower in the window cannot flip a near tie; communication's, the share every rank pays
    # (the module docstring)
    shares = {b: (min if b == COMMUNICATION else statistics.median)(s.breakdown.pct(b) for s in members)
              for b in members[0].breakdown.buckets}
    return verdict(Breakdown(shares, 100.0, 1), members[0].gpu, all(s.loader_paced for s in members))


def _findings(rows: list[RankRow], members: list[SpanReport]) -> list[Finding]:
    out = []
    by_worker = {s.worker: s for s in members}
    for r in rows:
        if not r.straggler:
            continue
        med = statistics.median(o.outside_comm_ms for o in rows if o is not r)
        assert r.outside_comm_ms > med, f"straggler {r.worker} is not slower than the other ranks as profiled"
        own = by_worker[r.worker]
        out.append(Finding(
            STRAGGLER,
            f"rank {r.rank} is a straggler: {r.outside_comm_ms:.2f} ms per step outside communication vs "
            f"{med:.2f} ms median on the other ranks, which wait about {r.outside_comm_ms - med:.2f} ms per "
            f"step for it in collectives; rank {r.rank} itself is {own.verdict}",
            r.outside_comm_ms - med, (BALANCE_RANKS, *own.remedies)))
    med_exposed = statistics.median(r.exposed_comm_ms for r in rows)
    med_step = statistics.median(r.step_ms for r in rows)
    if med_step > 0 and 100.0 * med_exposed / med_step >= EXPOSED_COMM_PCT:
        comm = statistics.median(r.comm_ms for r in rows)
        overlap = statistics.median(r.overlap_ms for r in rows)
        out.append(Finding(
            COMMUNICATION,
            f"communication {comm:.2f} ms per step (median over ranks), {overlap:.2f} ms of it overlapped "
            f"with compute; {med_exposed:.2f} ms per step ({100.0 * med_exposed / med_step:.0f}%) exposed"
            + ("; most of it is waiting for the straggler" if any(r.straggler for r in rows) else ""),
            med_exposed, (BALANCE_RANKS, COMM) if any(r.straggler for r in rows) else (COMM,)))
    return sorted(out, key=lambda f: f.cost_ms_per_step, reverse=True)

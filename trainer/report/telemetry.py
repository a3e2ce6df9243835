"""`Telemetry`: the unprofiled steps of a loop, as the loop runs without the profiler. One type, whoever measured it.

    t = sched.telemetry()                  # stepscope.schedule: every kept step so far (or cycle.telemetry())
    t = thr.telemetry()                    # the demonstration trainer's Throughput (stepscope.demo.timing)
    t.step_ms, t.data_ms, t["step_ms"], "copy_ms" in t      # a field that was not measured is None / absent
    t.to_dict()                            # {"steps", "step_ms", ...}: run.json, cycles.jsonl, stepscope.analyze

Every figure is in ms per step over the kept steps (``steps`` of them): a mean over the middle half of their
blocks of consecutive steps (``middle_blocks``: a few stalled steps cannot drag it), except where a source says
otherwise; a field is None where its source did not measure it, and `to_dict()` leaves it out. One producer
per source fills each field:

    steps, step_ms           the step clock: stepscope.schedule's (time between prof.step() calls), or the
                             trainer's StepClock (CUDA events at each step boundary)
    data_ms                  the wait for the next batch: stepscope.loader, or the trainer's StepClock.batch_ready
    copy_ms                  the input copy on the GPU's stream: stepscope.input_copy, or StepClock.copy
    step_ms_mean/median/p25/p75
                             the spread: the plain mean of every kept step, and quartiles of single steps
                             (the trainer's StepClock, and the schedule's scheduled cycles)
    copy_host_ms, dispatch_ms, cpu_ms
                             the trainer's StepClock only (the host's share of each step)
    mem_*                    the caching allocator's counters at window edges (memory_stats.MemoryWindows)

It is a read-only mapping of the fields that were measured, so code written for the dict it replaces
(``t["step_ms"]``, ``t.get("data_ms")``) reads it unchanged; `stepscope.analyze(..., telemetry=)` takes it or
such a dict.

Which unprofiled steps' timing each trace of a run is analysed with: the one policy, and where it is read.

    each = trace_telemetry(traces, run_dir)          # one telemetry (or None) per discovered trace, in order
    t = run_telemetry(run_dir)                       # a trainer run's run.json ``final.telemetry``, or None
    rows = cycle_telemetry(run_dir)                  # a trace handler's cycles.jsonl, by (worker, span) and span

The policy (``trace_telemetry``): a telemetry the caller gives is every trace's; else the run folder's run.json
(stepscope's trainer: one figure for the whole run); else, in a folder written by ``stepscope.trace_handler``
under ``stepscope.schedule``, each trace's own cycle's row of the cycles.jsonl beside it, matched by span and
worker (by span alone where the row names no worker); else none, and the analysis models the profiler's cost.
A handler's trace is then analysed with the figures the handler diagnosed it with, alone or among others.
The engine behind the door (engine.py ``resolve_telemetry``) applies it once per trace, before any trace is
read, from where the traces lie: the analysed folder's run when they lie in one run folder, else each run
folder's own (a job joined from several folders keeps each folder's figures).

A telemetry is the JSON form of a ``Telemetry`` (``{"steps", "step_ms", "data_ms"?, ...}``).
One without a positive finite ``step_ms`` is none; only its finite non-negative numbers are kept. A record
that cannot be read, or a row that is not one, gives none, never an error. Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from stepscope.trace.discover import Found
from stepscope.trace.files import CYCLES
from stepscope.trace.sources import by_kind

RUN_RECORD = "run.json"


@dataclass(frozen=True)
class Telemetry(Mapping):
    steps: int
    step_ms: float
    data_ms: float | None = None
    copy_ms: float | None = None
    copy_host_ms: float | None = None
    dispatch_ms: float | None = None
    cpu_ms: float | None = None
    step_ms_mean: float | None = None
    step_ms_median: float | None = None
    step_ms_p25: float | None = None
    step_ms_p75: float | None = None
    mem_peak_allocated_mib: float | None = None
    mem_peak_reserved_mib: float | None = None
    mem_allocated_mib: float | None = None
    mem_reserved_mib: float | None = None
    mem_alloc_retries: float | None = None
    mem_ooms: float | None = None
    mem_creep_mib_per_step: float | None = None

    def to_dict(self) -> dict:
        """The measured fields, in the order above (the JSON form: run.json, cycles.jsonl)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, d: Mapping) -> Telemetry:
        """A telemetry from its JSON form (or the dict a caller wrote by hand); other keys are left out."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def with_memory(self, memory: Mapping) -> Telemetry:
        """The same, with the allocator's counters (memory_stats.MemoryWindows.telemetry) added."""
        return replace(self, **memory) if memory else self

    # the mapping of the measured fields
    def __getitem__(self, key: str):
        v = getattr(self, key, None) if key in FIELDS else None
        if v is None:
            raise KeyError(key)
        return v

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


FIELDS = frozenset(f.name for f in fields(Telemetry))

BLOCK_STEPS = 8  # consecutive kept steps per block of the robust step: whole cycles of a few loader workers' pattern


def middle_blocks(means: list[float]) -> list[int]:
    """The robust unprofiled step's rule, for every producer: given the mean step time of each block of
    consecutive steps (BLOCK_STEPS of them, fewer at a window's end), the indices of the blocks whose steps the
    telemetry's figures are means over: the middle half of the blocks by mean step time (the interquartile
    mean), or every block where there are fewer than 4.

    Means over blocks, not medians of steps: the share of the run's time a phase takes is its total over the
    total, and a DataLoader whose workers each finish a batch at the same moment makes every other step wait
    for two batches' time and the rest not at all (a median of steps then reads as if they never waited). But
    not the mean of every step either: a few steps stalled by the machine's other load would drag it (a run's
    mean of 439 ms where its median was 246 ms)."""
    order = sorted(range(len(means)), key=means.__getitem__)
    if len(order) < 4:
        return sorted(order)
    quarter = len(order) // 4
    return sorted(order[quarter:len(order) - quarter])

MEMORY_FIELDS = tuple(f.name for f in fields(Telemetry) if f.name.startswith("mem_"))


def as_dict(telemetry: Mapping | None) -> dict | None:
    """The JSON form of a Telemetry, or of a dict standing for one (as it is); None stays None."""
    if telemetry is None or isinstance(telemetry, dict):
        return telemetry
    if isinstance(telemetry, Telemetry):
        return telemetry.to_dict()
    return dict(telemetry)


def trace_telemetry(traces: list[Found] | tuple[Found, ...], run_dir: Path | None,
                    telemetry: dict | None = None) -> list[dict | None]:
    """Each trace's telemetry (module docstring): ``telemetry`` when given; else ``run_dir``'s run.json
    (``run_dir``: the one folder of the run these traces form, None when they come from several); else the
    row for its worker and span in the cycles.jsonl of its own folder (``records_folder``)."""
    if telemetry is not None:
        return [telemetry] * len(traces)
    whole = run_telemetry(run_dir) if run_dir is not None else None
    if whole is not None:
        return [whole] * len(traces)
    rows = {folder: cycle_telemetry(folder) for folder in {records_folder(t) for t in traces}}
    return [row_of(rows[records_folder(t)], t.worker, t.span) for t in traces]


def records_folder(trace: Found) -> Path:
    """The folder whose records describe ``trace``, as its source says (trace/sources.py's ``records_up``): the
    run folder above raw/<span>/ for a stepscope original, else the trace's own folder (a trace handler's
    TensorBoard copy lies beside cycles.jsonl)."""
    return trace.path.parents[by_kind(trace.kind).records_up]


def row_of(rows: dict, worker: str, span: str) -> dict | None:
    """The telemetry of (worker, span) in ``cycle_telemetry``'s rows."""
    if not span:
        return None
    return rows.get((worker, span), rows.get(span))


def run_telemetry(path: Path) -> dict | None:
    """The unprofiled steps' telemetry of a stepscope trainer run (``run.json``'s ``final.telemetry``: the
    mean step and its phases in ms) when ``path`` is such a run's directory; None otherwise, or when the
    record is unreadable or holds no timed step (the traces are then read as anyone's)."""
    record = path / RUN_RECORD if path.is_dir() else None
    if record is None or not record.is_file():
        return None
    try:
        final = json.loads(record.read_text()).get("final") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return valid(final.get("telemetry") if isinstance(final, dict) else None)


def cycle_telemetry(path: Path) -> dict:
    """The telemetry of each cycle that ``stepscope.trace_handler`` recorded in ``path/cycles.jsonl``, keyed
    by (worker, span) for a row that names its worker, and by span for one that does not (written before rows
    named it). A span that two such rows give different figures is dropped (whose it is cannot be told).
    Empty when ``path`` holds no readable cycles.jsonl; a line that is not a row with a valid telemetry (a
    cycle diagnosed without stepscope.schedule, a line cut short) gives nothing."""
    record = path / CYCLES if path.is_dir() else None
    if record is None or not record.is_file():
        return {}
    try:
        lines = record.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    out: dict = {}
    ambiguous = set()
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("span"), str) or not row["span"]:
            continue
        telemetry = valid(row.get("telemetry"))
        if telemetry is None:
            continue
        worker = row.get("worker")
        if isinstance(worker, str) and worker:
            out[(worker, row["span"])] = telemetry
        elif out.setdefault(row["span"], telemetry) != telemetry:
            ambiguous.add(row["span"])
    for span in ambiguous:
        del out[span]
    return out


def valid(telemetry) -> dict | None:
    """``telemetry`` when it holds a positive finite ``step_ms``, with only its finite non-negative numbers,
    as floats; else None."""
    if not isinstance(telemetry, dict):
        return None
    step_ms = telemetry.get("step_ms")
    if not _number(step_ms) or not 0 < step_ms < math.inf:
        return None
    return {k: float(v) for k, v in telemetry.items() if _number(v) and 0 <= v < math.inf}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)

"""The engine behind the one door (front.py): found traces in, one Report out. Only front.py calls it.

    report = analyze_traces(found, root, selection, telemetry, workers)   # Report | RunsReport | None

Three stages, each trace passing through each once:

1. Telemetry (telemetry.py's policy, ``resolve_telemetry``): each trace's unprofiled steps' figures, decided
   from where the trace lies before anything is read.
2. Each trace parsed and analysed where ``workers`` says (this process, a local process, a Dask task), with
   that telemetry (``analyze_trace``); only its SpanReport comes back, with the little that jobs.py groups
   jobs by and, when asked (``tables``), its profiled step windows and full operator table.
   A trace whose plugin copy the same read plans, in two halves at once (one_pass.read_in_halves), is
   analysed in a child forked after the read, while this process plans the copy: the child's parse and
   evidence stay there, and only what the report takes comes back (``Made``).
3. The traces grouped into jobs (jobs.py), and each job's spans joined by the cross-rank analysis into one
   Report; several jobs make a RunsReport.

A ``Memo`` given by the caller keeps each trace's evidence (span.SpanEvidence: all the report takes from the
trace's events) after its analysis in this process: a later analysis of the same file, with other telemetry,
reads none of it again and only finishes the report (the trainer's end of run, after its trace handler's
cycles: each trace is analysed once).

When $STEPSCOPE_ANALYSIS_LOG names a file, each trace analysed appends one line to it (its path): a count
of real analyses, across processes, that a test or a user can read.
Torch-free.
"""

from __future__ import annotations

import os
import statistics
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.metrics import op_table
from stepscope.analysis.report import Report, evidence_of_file, parse_path, report_of_file, run_report
from stepscope.analysis.select import StepSelection
from stepscope.analysis.span import SpanEvidence, SpanReport
from stepscope.analysis.steps import step_windows
from stepscope.report.jobs import Job, group_jobs
from stepscope.report.loaded import Loaded, assign_spans, light, load_one
from stepscope.report.runs import RunsReport, run_dir
from stepscope.report.telemetry import trace_telemetry
from stepscope.trace.discover import Found, Skipped
from stepscope.trace.errors import TraceError
from stepscope.trace.workers import Workers

ANALYSIS_LOG = "STEPSCOPE_ANALYSIS_LOG"


@dataclass(frozen=True)
class Analysed:
    """What one trace's analysis brings back: the trace without its events, its report and, when asked,
    its profiled step windows (ms), its full operator table (name -> ms per step) and its evidence (for a
    Memo)."""
    loaded: Loaded
    report: SpanReport
    traced_ms: tuple[float, ...] = ()
    ops_ms: dict | None = None
    evidence: SpanEvidence | None = None
    copy: tuple | None = None  # (the plugin copy's plan, the trace's header keys) from the same read


class Memo:
    """The evidence of the traces analysed through it, by file: ``analyze(..., memo=memo)`` reports such a
    trace again from its evidence, with the telemetry of that call, without reading it. A file is the same
    while its size and mtime are; one rewritten in another form (the trace handler gzips a cycle's raw trace
    once it is analysed) is renamed with ``moved``. Holds the newest ``limit`` traces; ``entries`` and ``add``
    carry them to another process (the ranks of a training job, to the rank that diagnoses the job)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._by: OrderedDict[tuple, tuple[tuple[int, int], Analysed]] = OrderedDict()

    @staticmethod
    def _key(path: Path, span: str, selection: StepSelection | None) -> tuple:
        return str(Path(path).resolve()), span, selection or StepSelection()

    @staticmethod
    def _stat(path: Path) -> tuple[int, int] | None:
        try:
            st = Path(path).stat()
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def get(self, path: Path, span: str, selection: StepSelection | None, tables: bool) -> Analysed | None:
        """What the analysis of ``path`` as ``span`` on ``selection`` left, if the file is unchanged since
        (and its tables were kept, when ``tables``)."""
        got = self._by.get(self._key(path, span, selection))
        if got is None or got[0] != self._stat(path) or (tables and got[1].ops_ms is None):
            return None
        return got[1]

    def put(self, path: Path, span: str, selection: StepSelection | None, analysed: Analysed) -> None:
        stat = self._stat(path)
        if stat is None or analysed.evidence is None:
            return
        key = self._key(path, span, selection)
        self._by.pop(key, None)
        self._by[key] = (stat, analysed)
        self._trim()

    def moved(self, old: Path, new: Path) -> None:
        """The trace at ``old`` is now the file ``new`` (the same events, e.g. gzipped)."""
        old_name = str(Path(old).resolve())
        for key in [k for k in self._by if k[0] == old_name]:
            _, analysed = self._by.pop(key)
            self.put(new, key[1], key[2], analysed)

    def entries(self) -> list[tuple]:
        """Everything held, to hand to ``add`` in another process (picklable)."""
        return [(key, stat, analysed) for key, (stat, analysed) in self._by.items()]

    def add(self, entries: list[tuple]) -> None:
        for key, stat, analysed in entries:
            self._by[key] = (stat, analysed)
        self._trim()

    def _trim(self) -> None:
        while len(self._by) > self.limit:  # the oldest go first
            self._by.popitem(last=False)

    def __len__(self) -> int:
        return len(self._by)


@dataclass(frozen=True)
class Rejected(Skipped):
    """A trace skipped because it cannot be read (``keep_going``); ``reason`` is its one-line TraceError."""


def resolve_telemetry(found: list[Found], root: Path, telemetry: dict | None = None) -> dict[Path, dict | None]:
    """Each trace's telemetry, decided once from where the traces lie (telemetry.py's policy): the caller's
    when given; else, when the traces lie in one run folder, as for that folder's run (``root``'s run.json,
    else each trace's cycle row); else as for one run per run folder."""
    folders = {f.run for f in found}
    if telemetry is not None or len(folders) < 2:
        return dict(zip((f.path for f in found), trace_telemetry(found, root, telemetry), strict=True))
    out: dict[Path, dict | None] = {}
    for run in sorted(folders):
        group = [f for f in found if f.run == run]
        out.update(zip((f.path for f in group), trace_telemetry(group, root / run if run else root),
                       strict=True))
    return out


def analyze_trace(path: Path, found: Found, span: str, telemetry: dict | None = None,
                  selection: StepSelection | None = None, tables: bool = False, keep_going: bool = False,
                  parsed: ParsedTrace | None = None, keep: bool = False, copy: bool = False,
                  check: bool = False, parts: int = 1) -> Analysed | Skipped:
    """One found trace parsed (in ``parts`` byte ranges; or ``parsed``, its parse already made by the read
    that wrote its plugin copy) and analysed with its telemetry; or why it is skipped. A trace that cannot be
    read raises its one-line TraceError, or with ``keep_going`` is skipped with it as the reason. ``keep``:
    the result carries the trace's evidence, for a Memo. ``copy``: the same read also plans the trace's
    plugin copy (plugin_copy/one_pass.py), which the result carries (None where that read fails: the
    analysis then reads the trace itself, and says why it cannot); ``check``: and starts the plugin's check
    of it meanwhile, where it reads in halves (one_pass.Checked)."""
    planned = None
    handed = False  # the copy's plan, and its check under way, are the caller's
    try:
        made = None  # the analysis made beside the copy's plan (one_pass.read_in_halves), or a Skipped
        try:
            if parsed is None and copy:
                planned = _read_both(path, found.worker, span, parts, check,
                                     partial(_made_from_parse, found, span, selection, tables))
                parsed = planned.parsed if planned is not None else None
                made = planned.analysed if planned is not None else None
            if made is None:
                if parsed is None:
                    parsed = parse_path(path, found.worker, span, parts)
                made = load_one(found, span, parsed)
        except TraceError as e:
            if not keep_going:
                raise
            return Rejected(found.path, str(e))
        if isinstance(made, Skipped):
            return made
        if isinstance(made, Loaded):
            made = _made(made, selection, parts, tables)
        _log(path)
        report = report_of_file(made.evidence, found.path, telemetry)
        result = Analysed(made.loaded, report, made.traced_ms, made.ops_ms, made.evidence if keep else None,
                          _planned(planned))
        handed = True
        return result
    finally:
        if not handed and planned is not None and planned.check is not None:
            planned.check.stop()  # no copy follows: its check is not waited for


class Made(NamedTuple):
    """What a trace's analysis takes from its parse, before its report (which adds the telemetry): the trace
    without its events, its evidence and, when asked (``tables``), its step windows (ms) and operator table."""
    loaded: Loaded
    evidence: SpanEvidence
    traced_ms: tuple[float, ...] = ()
    ops_ms: dict | None = None


def _made(item: Loaded, selection: StepSelection | None, parts: int, tables: bool) -> Made:
    evidence = evidence_of_file(item.parsed, item.found.path, selection, parts)
    if not tables:
        return Made(light(item), evidence)
    windows = step_windows(item.parsed)
    return Made(light(item), evidence, tuple((w.end - w.start) / 1e3 for w in windows),
                op_table(item.parsed, windows))


def _made_from_parse(found: Found, span: str, selection: StepSelection | None, tables: bool,
                     parsed: ParsedTrace) -> Made | Skipped:
    """``_made`` of a parse, in the child that one_pass.read_in_halves forks to analyse the trace while it
    plans the copy (a TraceError raised there is said by this process's own parse of the trace). The child
    forks no helper of its own: it and the plan already take the two processes that ``parts`` allows."""
    item = load_one(found, span, parsed)
    return item if isinstance(item, Skipped) else _made(item, selection, 1, tables)


def _planned(both):
    """The copy's part of one_pass.read_both's result, as ``copies`` holds it (one_pass.Planned)."""
    if both is None:
        return None
    from stepscope.plugin_copy.one_pass import Planned

    return Planned(both.plan, both.header, both.check)


def _read_both(path: Path, worker: str, span: str, parts: int, check: bool = False, analyse=None):
    """The copy's plan and the analysis' parse from one read: one_pass.read_in_halves for a file the export
    reads in halves (``Workers.halves``: the analysis' two byte ranges, the second by a helper; and
    ``analyse(parse)`` made in a forked child while the copy is planned, where the memory holds both:
    ``Workers.two_parses_fit``), else one_pass.read_both (one process). None where that read fails: the
    analysis' own read then says why, and the copy plans the file itself."""
    from stepscope.plugin_copy.one_pass import read_both, read_in_halves  # only a caller that writes copies

    try:
        workers = Workers.local(parts)
        if workers.halves(path):
            return read_in_halves(path, worker, span, workers, check,
                                  analyse if workers.two_parses_fit(path) else None)
        return read_both(path, worker, span)
    except Exception:  # the analysis' read of the same file names what is wrong, in its words
        return None


def _checks(copies: dict | None) -> bool:
    """Whether the caller checks the copies it asks for (one_pass.Checked)."""
    if copies is None:
        return False
    from stepscope.plugin_copy.one_pass import Checked

    return isinstance(copies, Checked)


def reported_again(was: Analysed, found: Found, span: str, telemetry: dict | None, tables: bool,
                   keep_going: bool) -> Analysed | Skipped:
    """A trace a Memo holds, reported from its evidence with ``telemetry``: analyze_trace without the read."""
    try:
        report = report_of_file(was.evidence, found.path, telemetry)
    except TraceError as e:
        if not keep_going:
            raise
        return Rejected(found.path, str(e))
    loaded = replace(was.loaded, found=found, span=span)
    return Analysed(loaded, report, was.traced_ms if tables else (), was.ops_ms if tables else None)


def _log(path: Path) -> None:
    where = os.environ.get(ANALYSIS_LOG)
    if where:
        with open(where, "a") as f:  # one short write in append mode: lines of processes do not mix
            f.write(f"{path}\n")


def analyze_traces(found: list[Found], root: Path, selection: StepSelection | None = None,
                   telemetry: dict | None = None, workers: Workers | None = None, tables: bool = False,
                   keep_going: bool = False, parsed: Mapping[Path, ParsedTrace] | None = None,
                   memo: Memo | None = None, copies: dict | None = None,
                   ) -> tuple[Report | RunsReport | None, list[Loaded], list[Skipped]]:
    """The Report on ``found`` (traces discovered under ``root``; None when none was analysed), the traces
    analysed (without their events) and those skipped. Each trace is analysed once (module docstring)."""
    found = list(found)
    spans = assign_spans(found)
    each = resolve_telemetry(found, root, telemetry)
    parsed = parsed or {}
    results: list[Analysed | Skipped | None] = [None] * len(found)
    for i, f in enumerate(found):
        was = memo.get(f.path, spans[f.path], selection, tables) if memo is not None else None
        if was is not None:
            results[i] = reported_again(was, f, spans[f.path], each[f.path], tables, keep_going)
    read = [i for i, r in enumerate(results) if r is None]
    jobs = [(f.path, f, spans[f.path], each[f.path], selection, tables, keep_going, parsed.get(f.path),
             memo is not None, copies is not None, _checks(copies)) for f in (found[i] for i in read)]
    for i, result in zip(read, (workers or Workers.inline()).map(analyze_trace, jobs), strict=True):
        if copies is not None and isinstance(result, Analysed) and result.copy is not None:
            copies[found[i].path] = result.copy
            result = replace(result, copy=None)  # first: a memo keeps no copy's plan
        if memo is not None and isinstance(result, Analysed):
            memo.put(found[i].path, spans[found[i].path], selection, result)
            result = replace(result, evidence=None)
        results[i] = result
    done: list[Analysed] = []
    skipped: list[Skipped] = []
    for result in results:
        (skipped if isinstance(result, Skipped) else done).append(result)
    if not done:
        return None, [], skipped
    by_path = {a.loaded.found.path: a for a in done}
    loaded = [a.loaded for a in done]
    groups = group_jobs(loaded)
    if len(groups) == 1:
        return _job_report(str(root), groups[0], by_path), loaded, skipped
    if telemetry is not None:
        raise TraceError(f"{root}: holds {len(groups)} runs ({', '.join(j.run or '.' for j in groups)}); "
                         "telemetry belongs to one run: give that run's folder")
    runs = tuple((job.run or root.name, _job_report(str(run_dir(root, job) or root / job.run), job, by_path))
                 for job in groups)
    return RunsReport(str(root), runs), loaded, skipped


def _job_report(label: str, job: Job, by_path: dict[Path, Analysed]) -> Report:
    """One job's spans joined (cross-rank), with its traces (without their events: which folders the job
    joins) and their step windows and mean operator table."""
    done = [by_path[item.found.path] for item in job.loaded]
    report = replace(run_report(label, [a.report for a in done]), traces=job.loaded)
    if any(a.ops_ms is None for a in done):
        return report
    tables: dict[str, list[float]] = defaultdict(list)
    for a in done:
        for name, ms in a.ops_ms.items():
            tables[name].append(ms)
    return replace(report, traced_ms=tuple(ms for a in done for ms in a.traced_ms),
                   ops_ms={name: statistics.fmean(ms) for name, ms in tables.items()})

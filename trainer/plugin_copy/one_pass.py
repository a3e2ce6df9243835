"""One read of a trace file for a caller that needs both its analysis and its plugin copy (the trace
handler's cycle, ``stepscope analyze --export-tensorboard``).

    both = read_both(path, "w", "1")      # the copy's plan and header, and the analysis' parse
    write_adapted_stream(path, adapted, both.plan, both.header)   # the copy (stream_write.py)
    both.parsed                           # a ParsedTrace, as parse_trace_file gives it; or None

Each piece of ``traceEvents`` is read once, into the one event schema's fields (trace/schema.py: as numpy
columns by the compiled reader where it is built, else as msgspec structs), and handed to both the copy's
planning columns (plan_columns.py) and the analysis' collector (analysis/stream_collect.py): the plan and the
parse are those of ``plan_edits`` and ``parse_trace_file``, from one read instead of two.
The copy is then written by stream_write.py's pass, which copies unchanged events as their bytes.

A large file that the worker policy reads in two byte ranges at once (``read_in_halves``) is read so for
both as well: the analysis' ranges (stream_ranges.collect_ranges) hand each piece to the copy's planning
columns too (plan_columns.RangeReader), in this process and in the helper that reads the second range. The
caller's analysis of the parse is then made in a child forked once the read is done (``analyse``), while
this process joins the columns and plans the copy: the two take about as long, and ran one after the other.

``both.parsed`` is None where the analysis has something to say about the file (an event or a header it
refuses, no steps, a field that is no number): ``analysis.report.parse_path`` on the file then says it in
its own words, so the error is the same whichever way the file was read. A file that cannot be read at all
raises what ``plan_edits`` raises. ``read_both`` uses one process, no helper: a training process may call
it. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.stream_collect import Collector
from stepscope.analysis.stream_parse import in_ranges, parsed_trace
from stepscope.plugin_copy.plan_columns import (
    Columns,
    RangeReader,
    add_piece,
    from_objects,
    plain_size,
    read_piece,
)
from stepscope.plugin_copy.plugin_check import EarlyCheck
from stepscope.plugin_copy.stream_plan import EditPlan, plan_of
from stepscope.trace import schema
from stepscope.trace.bounded_read import read_limit
from stepscope.trace.fastread import Columns as FastColumns
from stepscope.trace.fastread import releasing
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.jsonstream import BLOCK, TraceStream
from stepscope.trace.workers import Apart, Workers


@dataclass
class Both:
    plan: EditPlan  # stream_plan.plan_edits' plan
    header: dict  # the trace's top-level keys other than traceEvents
    parsed: ParsedTrace | None  # None: parse_path says why there is none (module docstring)
    check: EarlyCheck | None = None  # read_in_halves(check=True): the plugin's check of the copy, under way
    analysed: Any = None  # read_in_halves(analyse=...): what the caller's analysis of the parse returned


class Planned(NamedTuple):
    """A trace's copy as the read that analysed it planned it (``stepscope.analyze(..., copies=...)``)."""
    plan: EditPlan
    header: dict
    check: EarlyCheck | None = None  # the plugin's check of its excerpt, under way (``Checked``)


class Checked(dict):
    """``copies`` for ``stepscope.analyze`` (path -> Planned) from a caller that also checks each copy with
    torch-tb-profiler before it keeps it (``export_tensorboard``): where the read is in halves (the command
    line may fork), the check of a large copy's excerpt starts as soon as the copy is planned
    (plugin_check.EarlyCheck), in a forked child, while this process analyses the trace. ``stop()`` ends the
    checks that no export took (the caller's work failed on the way)."""

    def stop(self) -> None:
        for planned in self.values():
            if planned.check is not None:
                planned.check.stop()


@releasing
@gc_paused()
def read_both(path: Path, worker: str, span: str) -> Both:
    """The plan of the copy and the parse of the analysis of the trace in ``path``, from one streamed read
    (module docstring)."""
    path = Path(path)
    c = Columns()
    cats: dict = {}
    collector: Collector | None = Collector(f"{worker}.{span}")
    pending: list[list] = []  # pieces before the first with a time (the collector's base)
    with TraceStream(path, lenient=from_objects) as stream:
        for events in stream.decode_events(_read):
            add_piece(c, events, cats)
            if collector is not None:
                try:
                    _collect(collector, pending, events)
                except Exception:  # an event refused, a field that is no number, an entry that is no event
                    collector = None  # (a msgspec.Raw, which has no fields): parse_path says which
        header = stream.header
    plan = plan_of(c)  # first, so that the columns are dropped before the parse's events are made tuples
    del c
    parsed = None
    if collector is not None:
        try:
            if collector.base is None:  # no event with a time: as parse_trace_file
                collector.base = 0.0
                for piece in pending:
                    collector.add(piece)
            parsed = parsed_trace(path, collector.where, worker, span, collector, header)
        except Exception:
            parsed = None
    return Both(plan, header, parsed)


def _read(text) -> list | FastColumns:
    """``read_piece`` whose msgspec fallback decodes whole events: the analysis' collector reads them too."""
    return read_piece(text, schema.decode_each)


def _collect(collector: Collector, pending: list[list], events: list) -> None:
    """``events`` to the collector, as parse_trace_file hands them: held until the trace's base is known."""
    if collector.base is None:
        pending.append(events)
        if not collector.find_base(events):
            return
        for piece in pending:
            collector.add(piece)
        pending.clear()
    else:
        collector.add(events)


@releasing
@gc_paused()
def read_in_halves(path: Path, worker: str, span: str, workers: Workers, check: bool = False,
                   analyse: Callable[[ParsedTrace], Any] | None = None) -> Both | None:
    """``read_both`` of a file read in two byte ranges at once, the second by a forked helper (``workers``
    allows it): the analysis' ranges, whose pieces the copy's planning columns read too
    (plan_columns.RangeReader).
    None where the ranges are not read so (too small, or what stream_parse.in_ranges falls back on):
    the analysis and the copy's plan then read the file each, and say what is wrong. ``check``: start the
    plugin's check of the copy once it is planned (``Checked``), before the parse is made. ``analyse``: the
    caller's analysis of the parse, made in a forked child (workers.Apart) while this process plans the copy,
    and returned as ``Both.analysed`` (its parse then stays in the child); where the child fails or dies, the
    parse is made here instead (``Both.parsed``), and the caller analyses it."""
    path = Path(path)
    side = RangeReader(_read)  # the msgspec fallback's events whole: the analysis reads them too
    got = in_ranges(path, 2, BLOCK, read_limit() if path.name.endswith(".gz") else None, side)
    if got is None or not side.joinable():
        return None
    collector, header = got
    apart = None  # no child (none asked for, or none could start): the parse is then made here
    if analyse is not None:
        apart = Apart.started(_analysed, (analyse, path, worker, span, collector, header))
    try:
        c = side.columns(plain_size(path))  # joinable: the file's columns
        del side
        plan = plan_of(c, workers)  # first, as read_both: the columns dropped before the parse's events are built
        del c
        early = EarlyCheck.start(path, plan, header) if check else None
        analysed = _answer(apart)
        parsed = None
        if apart is None or analysed is None:
            try:
                parsed = _parsed(path, worker, span, collector, header)
            except Exception:  # as read_both: parse_path says it in its own words
                parsed = None
        return Both(plan, header, parsed, early, analysed)
    finally:
        if apart is not None:
            apart.stop()


def _parsed(path: Path, worker: str, span: str, collector: Collector, header: dict) -> ParsedTrace:
    """The parse of what the read in halves collected (raises what parsed_trace raises)."""
    return parsed_trace(path, f"{worker}.{span}", worker, span, collector, header)


def _analysed(analyse: Callable, path: Path, worker: str, span: str, collector: Collector, header: dict):
    """In the child: the parse, then ``analyse`` of it."""
    return analyse(_parsed(path, worker, span, collector, header))


def _answer(apart: Apart | None):
    """What the child's ``analyse`` returned; None where there is no child, or it raised or died (this
    process then parses the trace itself, and the caller's own analysis says what is wrong)."""
    if apart is None:
        return None
    apart.ready(None)
    try:
        return apart.result()
    except Exception:
        return None

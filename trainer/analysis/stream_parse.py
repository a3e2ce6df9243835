"""Parse a trace file straight from disk into a ``ParsedTrace``, streaming, without the whole JSON in memory.

    parsed = parse_trace_file(Path("w.1.pt.trace.json.gz"), worker="w", span="1")

This is the one parse of the analysis. The file is cut into pieces of whole events (jsonstream.py); each
piece is decoded into small structs of the fields the analysis reads and collected into events.py's
HostEvent/DeviceEvent objects by stream_collect.py's rules, then dropped. A piece that msgspec refuses but
that is JSON to Python (NaN or Infinity literals, an event that is not an object) is normalised to the same
structs first (stream_collect.from_objects), so every readable file takes this path.

Errors, each one line (``TraceError``, a ValueError): validate.py's, for a document or an event it refuses
(the event named by its index in ``traceEvents``); ``NoSteps`` for a trace without a step, saying what its
ProfilerStep#N events lack; ``Unreadable`` (naming the file) for a file that is not JSON, not gzip, or too
large. A field that should be a number and is not raises int()'s ValueError/TypeError. Torch-free.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import msgspec
from stepscope.analysis.events import ParsedTrace, Step, device_memory, distributed_rank
from stepscope.analysis.inferred_steps import FROM_PROFILER, infer_steps
from stepscope.analysis.stream_collect import UNSET, Collector, decode, from_objects, read
from stepscope.analysis.stream_ranges import RANGE_FAILURES, collect_ranges, first_base
from stepscope.analysis.validate import STEP_NAME, check_document, steps_missing_error
from stepscope.trace import schema
from stepscope.trace.bounded_read import TraceTooLarge, open_trace, read_limit
from stepscope.trace.errors import TraceError
from stepscope.trace.fastread import releasing
from stepscope.trace.files import load_trace
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.jsonstream import BLOCK, HEADER_LIMIT, NotJSON, TraceStream, split_near
from stepscope.trace.vocabulary import STEP_PREFIX
from stepscope.trace.workers import json_size

# This process collects the first byte range and, between its own pieces, rebuilds the helpers' pieces from
# the columns they send, so its range is this much of theirs. Each weight is the one at which neither process
# waits long for the other at the read's end, measured on the 1 GB replica on two cores (BENCHMARKS.md: the
# median of how much later the helper ended, over 6 to 8 runs; the machine's state moves it by a tenth of a
# second either way): 0.9 left +0.06 and +0.15 s (0.85: +0.26 s; 0.95 and 1.0: -0.18 and -0.16 s).
FIRST_RANGE_WEIGHT = 0.9
# A gzipped file's helper decompresses the file up to the cut to start there (gzopen.py), yet this process
# takes more: 1.1 left -0.04 and +0.08 s (0.9: +0.47 s; 1.2: -0.20 s).
FIRST_RANGE_WEIGHT_GZ = 1.1


class Unreadable(TraceError):
    """The file cannot be read as a JSON object (the message names it)."""


class NoSteps(TraceError):
    """A trace without a step. ``step_names``: whether any event is named ProfilerStep#... at all (a file
    that is not known to come from a training loop is skipped, rather than refused, without one)."""

    def __init__(self, message: str, step_names: bool) -> None:
        super().__init__(message, step_names)

    def __str__(self) -> str:
        return self.args[0]

    @property
    def step_names(self) -> bool:
        return self.args[1]


@releasing
@gc_paused()
def parse_trace_file(path: Path, worker: str, span: str, limit: int | None = None,
                     block: int = BLOCK, parts: int = 1) -> ParsedTrace:
    """The ParsedTrace of the trace in ``path``, streamed (module docstring) in pieces of about ``block``
    bytes. ``parts`` > 1: the file is cut into that many byte ranges of whole events, parsed at once by this
    process and ``parts - 1`` forked ones (the result is the same); a .gz file only when the JSON its trailer
    records is within the bound of the one-range read (a small file may inflate to anything). When the
    ranges fail for a reason of the file or the machine (stream_ranges.RANGE_FAILURES: a bad event, whose
    index in the file a range does not know; an unreadable range; a helper that could not start or died;
    memory), the file is parsed again in this process alone, which gives the result or the error of
    ``parts=1``. Any other exception of the range path (TypeError, AttributeError, NameError ...: a defect,
    or int()'s TypeError of a field that is no number, which the one-process parse raises alike) is raised
    as it is, never hidden behind the slower parse; report.parse_path then names it in the trace's one-line
    error. Raises the errors of the module docstring; TraceTooLarge past bounded_read's ceiling
    (``limit`` bytes)."""
    path = Path(path)
    where = f"{worker}.{span}"
    bound = limit if limit is not None else read_limit() if path.name.endswith(".gz") else None
    ranged = in_ranges(path, parts, block, bound) if parts > 1 else None
    if ranged is not None:
        return parsed_trace(path, where, worker, span, *ranged)
    c = Collector(where)
    pending: list[list] = []
    try:
        with TraceStream(path, block, opener=lambda p: open_trace(p, limit), lenient=from_objects) as ts:
            for events in ts.decode_events(read):
                if c.base is None:
                    pending.append(events)
                    if not c.find_base(events):
                        continue
                    for piece in pending:
                        c.add(piece)
                    pending = []
                else:
                    c.add(events)
            header = ts.header
    except (TraceTooLarge, TraceError, MemoryError):
        raise
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, RecursionError, msgspec.DecodeError,
            msgspec.ValidationError) as e:
        raise _unreadable(path, where, e) from None
    if c.base is None:
        c.base = 0.0
        for piece in pending:
            c.add(piece)
    return parsed_trace(path, where, worker, span, c, header)


def in_ranges(path: Path, parts: int, block: int, bound: int | None,
              side=None) -> tuple[Collector, dict] | None:
    """The file's events collected in ``parts`` byte ranges at once (stream_ranges.py) and its header keys;
    None when it is not cut (too small; a .gz whose JSON may pass ``bound``, or that cannot be read from the
    middle) or cannot be (RANGE_FAILURES, met while cutting it or reading a range: the one-process parse
    then says what is wrong, or parses what the ranges could not). Any other exception is raised. ``side``:
    another reader of the same pieces (stream_ranges.collect_ranges)."""
    try:
        if bound is not None and json_size(path) > bound:
            return None
        weight = FIRST_RANGE_WEIGHT_GZ if path.name.endswith(".gz") else FIRST_RANGE_WEIGHT
        near = split_near(path, parts, decode, weight)
        base = first_base(path) if near else None
        return collect_ranges(path, near, base, block, side) if base is not None else None
    except RANGE_FAILURES:  # a bad event, an unreadable range or .gz, a helper that could not start or died
        return None


def parsed_trace(path: Path, where: str, worker: str, span: str, c: Collector, header: dict) -> ParsedTrace:
    """The ParsedTrace of the events collected in ``c`` from the file ``path`` (its top-level keys: ``header``);
    raises validate.py's TraceError for the header, NoSteps for a trace without a step."""
    check_document({**header, "traceEvents": []}, where)
    steps, steps_from = c.steps, FROM_PROFILER
    if not steps:
        # a trace without a schedule: its steps are inferred (inferred_steps.py), unless it holds
        # ProfilerStep# events that are no host step ranges (no_steps says what they lack)
        count, first, step_names = _step_events(path)
        if step_names:
            raise NoSteps(str(steps_missing_error(count, first, where)), True)
        inferred, steps_from = infer_steps(c.annotations, (c.ops, c.runtime, c.data_spans))
        steps = [Step(*s) for s in inferred]
        if not steps:
            raise NoSteps(str(steps_missing_error(0, None, where)), False)
    rank, world_size = distributed_rank(header)
    props = header.get("deviceProperties") or []
    return ParsedTrace(
        worker=worker, span=span, base_us=c.base,
        rank=rank, world_size=world_size,
        device_name=props[0].get("name") if props and isinstance(props[0], dict) else None,
        steps=tuple(sorted(steps, key=lambda s: s.start)),
        ops=c.ops.build(), annotations=tuple(c.annotations), runtime=c.runtime.build(),
        device=c.device.build().by_start(),
        data_spans=tuple(c.data_spans), memory=c.memory, python_calls=c.python_calls.build(),
        python_builtins=c.python_builtins.build(), long_frames=tuple(sorted(c.long_frames)),
        model_spans=tuple(sorted(c.model_spans)), module_frames=tuple(c.module_frames), recorded_shapes=c.shapes, steps_from=steps_from,
        device_memory=device_memory(props))


def _unreadable(path: Path, where: str, error: Exception) -> TraceError:
    """The error for a file the stream could not read: what Python's json says of it (the same words for the
    same file, whichever reader met the trouble first), or what validate.py says of its top level. A file of
    more than ``HEADER_LIMIT`` bytes of JSON, or one the stream saw is no JSON text (a NUL byte), is not read
    again, whole: the stream's own words then (bounded work on any input, jsonstream.py)."""
    try:
        if isinstance(error, NotJSON) or json_size(path) > HEADER_LIMIT:
            return Unreadable(f"{path}: unreadable trace ({error})")
        document = load_trace(path)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
        return Unreadable(f"{path}: unreadable trace ({type(e).__name__}: {e})")
    except RecursionError:
        return Unreadable(f"{path}: unreadable trace (JSON nested too deeply to parse)")
    if not isinstance(document, dict):
        return Unreadable(f"{path}: unreadable trace (a JSON {type(document).__name__}, not an object)")
    try:
        check_document(document, where)
    except TraceError as e:
        return e
    return Unreadable(f"{path}: unreadable trace ({type(error).__name__}: {error})")


_Named = schema.view("name", "cat", "ph")
_NAMED = msgspec.json.Decoder(list[_Named])


def _decode_named(text) -> list:
    return _NAMED.decode(bytes(text))


def _named(entries: list) -> list:
    return [_Named(e.get("name", UNSET), e.get("cat", UNSET), e.get("ph")) if type(e) is dict else _Named()
            for e in entries]


def has_step_names(path: Path) -> bool:
    """Whether any event of the trace in ``path`` is named ProfilerStep#... (what a foreign file that does not
    parse must have to be reported, rather than skipped); False when the file cannot be read."""
    try:
        return _step_events(path)[2]
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, RecursionError, msgspec.DecodeError,
            msgspec.ValidationError):
        return False


def _step_events(path: Path) -> tuple[int, tuple[int, dict] | None, bool]:
    """(how many events are named ProfilerStep#N, the first of them: its index and cat/ph, whether any name
    starts with ProfilerStep#)."""
    count, first, step_names = 0, None, False
    with TraceStream(path, lenient=_named) as ts:
        for i, e in enumerate(e for events in ts.decode_events(_decode_named) for e in events):
            name = e.name
            if type(name) is str and name.startswith(STEP_PREFIX):
                step_names = True
                if STEP_NAME.match(name):
                    count += 1
                    if first is None:
                        first = (i, {"cat": None if e.cat is UNSET else e.cat, "ph": e.ph})
    return count, first, step_names

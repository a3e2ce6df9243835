"""One large uncompressed trace parsed in byte ranges by several processes at once (stream_parse.py's
``parse_trace_file(..., parts=N)``), with the same result as the one-process parse. Torch-free.

    near = jsonstream.split_near(path, 2, decode)          # where to cut, without reading the file
    collector, header = collect_ranges(path, near, first_base(path), BLOCK)

This process collects the first range while forked processes (trace/workers.py) collect the others; each
process finds the event boundaries that end its range where they lie (jsonstream.Near), so nothing is read
before they start (a .gz file: decompressed up to the cut once less). Each
sends its events back as columns (numpy arrays of times, names as codes into a table of distinct names),
piece by piece as it goes. A piece that the compiled reader read is encoded straight from its columns
(stream_columns.encoded), without an event tuple; one read by msgspec is collected as tuples and encoded
(``encode``), so that a helper never holds more than one piece's tuples: pickling the tuples themselves
would cost about as much as parsing them, and holding them would double the parse's memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path

import numpy as np
from stepscope.analysis import stream_columns
from stepscope.analysis.events import HostEvent, NameTable
from stepscope.analysis.stream_collect import Collector, from_objects, read
from stepscope.analysis.stream_columns import rows_of
from stepscope.trace.fastread import Columns, as_list, as_objects
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.jsonstream import Near, TraceStream
from stepscope.trace.workers import sending

HOST_LISTS = ("ops", "annotations", "runtime", "data_spans", "module_frames")
COLUMN_LISTS = ("ops", "runtime")  # the Collector's lists kept as columns (events.HostEventsBuilder)

# What reading a file in byte ranges meets that the one-process parse then says properly, naming the file or
# the event by its index in the whole file (which a range does not know), or does not meet at all: a bad
# event (TraceError, the ValueError of int() of a field that is no number), a file that cannot be read
# (OSError, EOFError, zlib.error; decode errors are ValueErrors),
# JSON nested too deeply (RecursionError, a RuntimeError), a helper that could not start or died (OSError,
# concurrent.futures.BrokenExecutor, a RuntimeError), and running out of memory (the one-process parse holds
# no helper's columns). Anything else (TypeError, AttributeError, NameError, KeyError ...) is a defect, or
# int()'s TypeError of a bad field that the one-process parse raises alike: it is raised, not hidden behind
# the slower parse.
RANGE_FAILURES = (ValueError, OSError, EOFError, zlib.error, RuntimeError, MemoryError)


BASE_BLOCK = 64 << 10  # the first event with a time is at the array's start: 8 MiB blocks took 0.07-0.14 s


def first_base(path: Path, block: int = BASE_BLOCK) -> float | None:
    """The base (``events._base``) of the file's events, from its first pieces; None if none has a time or
    the file cannot be read (``RANGE_FAILURES``: the one-process parse then says why)."""
    c = Collector()
    try:
        with TraceStream(path, block, lenient=from_objects) as ts:
            for events in ts.decode_events(read):
                if c.find_base(events):
                    return c.base
    except RANGE_FAILURES:
        return None
    return None


def _stream_range(path: Path, byte_range: tuple[int, int | None], block: int, take, near: Near,
                  side=None) -> dict:
    """``take(events, at)`` for each decoded piece of one byte range, in order (``at``: where its first entry
    lies, TraceStream.piece_at); returns the range's header keys.
    Raises what reading or collecting them raises: the caller then parses the file in one process, which
    says where the trouble is (an event's index in the whole file is not known here). ``side``:
    ``collect_ranges``'."""
    decode, lenient = (read, from_objects) if side is None else (side.decode, side.lenient)
    with TraceStream(path, block, span=byte_range, lenient=lenient, near=near) as ts:
        for events in ts.decode_events(decode):
            take(events, ts.piece_at)
        if side is not None:
            side.first_done(ts)
        return ts.header


def _collector(base: float, names: NameTable | None = None, kinds: dict | None = None) -> Collector:
    c = Collector(names=names, kinds=kinds)
    c.base = base
    return c


def _codes(names: list[str], table: dict[str, int]) -> np.ndarray:
    for name in dict.fromkeys(names):  # a piece repeats a few hundred names
        if name not in table:
            table[name] = len(table)
    return np.fromiter(map(table.__getitem__, names), dtype=np.int64, count=len(names))


def encode(c: Collector) -> dict:
    """A range's events as columns, for the trip back to the parsing process."""
    table: dict[str, int] = {}
    out: dict = {"steps": c.steps, "shapes": c.shapes, "header": c.header,
                 "python_calls": c.python_calls.array(), "python_builtins": c.python_builtins.array(),
                 "long_frames": list(c.long_frames),
                 "model_spans": np.asarray(c.model_spans, dtype=np.float64).reshape(-1, 2),
                 "memory": c.memory.columns}  # MemoryColumns' columns: arrays, and the threads' list
    for name in HOST_LISTS:  # HostEvent fields by position: name, tid, start, end, correlation (None: all None)
        ev = getattr(c, name)
        out[name] = (_codes([e[0] for e in ev], table), [e[1] for e in ev],
                     np.array([e[2] for e in ev], dtype=np.float64),
                     np.array([e[3] for e in ev], dtype=np.float64), [e[4] for e in ev])
    d = c.device  # DeviceEvent: name, kind, device, stream, start, end, correlation
    out["device"] = (_codes([e[0] for e in d], table), [e[1] for e in d], [e[2] for e in d],
                     [e[3] for e in d], np.array([e[4] for e in d], dtype=np.float64),
                     np.array([e[5] for e in d], dtype=np.float64), [e[6] for e in d])
    out["names"] = list(table)
    return out


def decode_into(c: Collector, part: dict) -> None:
    """Append an encoded range's events to ``c``, as the tuples ``encode`` took them from."""
    names = as_objects(part["names"])  # codes -> the names they stand for, gathered (fastread.as_objects)
    c.steps.extend(part["steps"])
    c.shapes = c.shapes or part["shapes"]
    c.header.update(part["header"])
    c.python_calls.extend_array(part["python_calls"])
    c.python_builtins.extend_array(part["python_builtins"])
    c.long_frames.update(part["long_frames"])
    c.model_spans.extend(map(tuple, part["model_spans"].tolist()))
    c.memory.add_columns(part["memory"])
    table = c.name_table.codes_of(part["names"])  # the piece's names' codes in the collector's table
    for name in COLUMN_LISTS:  # HostEventsBuilders: the columns as they came
        codes, tids, starts, ends, corr = part[name]  # corr: None, int64 (every id an integer) or a list
        if isinstance(corr, list) and all(x is None for x in corr):
            corr = None
        getattr(c, name).extend_columns(None, tids, starts, ends, corr, table[codes], c.name_table.names)
    for name in HOST_LISTS:
        if name in COLUMN_LISTS:
            continue
        codes, tids, starts, ends, corr = part[name]
        getattr(c, name).extend(rows_of(HostEvent, names[codes].tolist(), as_list(tids),
                                        starts.tolist(), ends.tolist(), repeat(None) if corr is None else corr))
    codes, kind, dev, stream, starts, ends, corr = part["device"]  # kinds: codes (stream_columns), or a list
    coded = isinstance(kind, np.ndarray)
    c.device.extend_columns(None, None if coded else kind, dev, stream, starts, ends, corr, table[codes],
                            c.name_table.names, kind if coded else None)


def _encoded_pieces(path: Path, byte_range: tuple[int, int | None], base: float, block: int,
                    near: Near, side=None) -> Iterator:
    """The events of one byte range as a helper sends them: each decoded piece's events collected apart (with
    the file's base), encoded and yielded at once; then the range's header keys, as a piece without events.
    With a ``side`` (``collect_ranges``), each is yielded as a pair: (that, what ``side`` made of it)."""
    decode, lenient = (read, from_objects) if side is None else (side.decode, side.lenient)
    kinds: dict = {}  # what each category is, asked once per range rather than once per piece
    with gc_paused(), TraceStream(path, block, span=byte_range, lenient=lenient, near=near) as ts:
        for events in ts.decode_events(decode):
            piece = _collector(base, kinds=kinds)
            part = stream_columns.encoded(piece, events) if type(events) is Columns else None
            if part is None:  # msgspec's events, or columns that must be collected event by event
                piece.add(events)
                part = encode(piece)
            yield part if side is None else (part, side.piece(events, ts.piece_at))
        tail = _collector(base)
        tail.header = ts.header
        end = None if side is None else side.range_end(ts)
    yield encode(tail) if side is None else (encode(tail), end)  # no events: the range's header keys


def collect_ranges(path: Path, near: Near, base: float, block: int, side=None) -> tuple[Collector, dict]:
    """The events of ``near``'s ranges (jsonstream.split_near: each range's reader finds its ends) in file
    order, and the file's header keys. The caller's worker policy granted the helper processes (``parts`` >
    1, trace/workers.py). Each helper sends its pieces as it goes; this process rebuilds them between pieces
    of its own range, each helper's range in a collector of its own, which follow this process's range at the
    end.

    ``side``: another reader of the same pieces, so that one read serves both (the plugin copy's planning
    columns: plugin_copy/plan_columns.RangeReader, one_pass.py). Its ``decode`` and ``lenient`` decode the
    pieces for both (what they give, Collector.add takes); this process hands it each piece of its own range
    and where it lies (``side.add(events, at)``) and the range's stream at its end (``side.first_done(stream)``);
    a helper sends ``side.piece(events, at)`` with
    each piece and ``side.range_end(stream)`` with its range's header keys, which this process hands on as
    ``side.add_later(k, ...)``, k the range's index."""
    ranges = near.ranges
    jobs = [(path, r, base, block, near, side) for r in ranges[1:]]
    with sending(_encoded_pieces, jobs) as inboxes:
        c = _collector(base)
        later = [_collector(base, c.name_table) for _ in inboxes]  # their names coded in this one's table

        def receive(k: int, d: Collector, part) -> None:
            if side is not None:
                part, extra = part
                side.add_later(k, extra)
            decode_into(d, part)

        def take(events, at: int) -> None:
            c.add(events)
            if side is not None:
                side.add(events, at)
            for k, (inbox, d) in enumerate(zip(inboxes, later), 1):
                for part in inbox.take():
                    receive(k, d, part)

        c.header = _stream_range(path, ranges[0], block, take, near, side)
        for k, (inbox, d) in enumerate(zip(inboxes, later), 1):
            for part in inbox.rest():
                receive(k, d, part)
    for d in later:
        c.extend(d)
    return c, c.header

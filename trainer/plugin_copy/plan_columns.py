"""The columns of a trace file's events that the export's planning pass reads (stream_plan.py).

    c = read_columns(path)     # Columns: per complete event, its position, category, name, thread, times, ids

One streamed pass reads each piece of events into the one event schema's fields (trace/schema.py: as numpy
columns by the compiled reader where it is built, ``read_piece``, else as msgspec structs) and appends the
fields the rules read to columns: times in typed arrays, repeated values (names, categories, threads) as
ids; a 1 GB trace has millions of complete events. Where the worker policy allows (trace/workers.py), a
large file is read in two byte ranges at once, the second by a forked helper, and the two sets of columns
joined: the same columns either way.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from stepscope.trace import schema
from stepscope.trace.fastread import (
    T_FALSE,
    T_INT,
    T_MISSING,
    T_NULL,
    T_OTHER,
    T_REAL,
    T_STR,
    T_TRUE,
    ColumnReader,
    releasing,
)
from stepscope.trace.fastread import Columns as FastColumns
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.jsonstream import Near, NoCut, TraceStream, split_near
from stepscope.trace.vocabulary import STEP_PREFIX
from stepscope.trace.workers import Workers, sending

UNSET = schema.UNSET
NAN = float("nan")
# the fields the rules read: a view of the one event schema (read_events also takes schema.Event)
_Event = schema.view("ph", "cat", "name", "pid", "tid", "ts", "dur",
                     args=("correlation", "ext_upper", "ext_lower", "module", "call_stack"))
_decode = schema.each_decoder(_Event)  # an entry that is no event stays its msgspec.Raw


def from_objects(entries: list) -> list:
    """``_decode`` for a piece that Python's json read (NaN or Infinity literals, see jsonstream.py)."""
    # an entry that is no event (not an object, or args that is not one) is kept as its JSON text
    return [e if e is not None else msgspec.Raw(json.dumps(o).encode())
            for o, e in zip(entries, map(schema.from_object, entries))]


_INT64 = 2**63


class _Chunks:
    """A column of the complete events appended piece by piece without copying what came before: a piece's
    numpy chunk as it is, values appended one by one into a list chunk (``Flags``, ``Ids``)."""

    __slots__ = ("_chunks",)

    def __init__(self) -> None:
        self._chunks: list = []

    def append(self, value) -> None:
        if not self._chunks or type(self._chunks[-1]) is not list:
            self._chunks.append([])
        self._chunks[-1].append(value)

    def extend(self, values) -> None:
        """Another column's chunks (not copied), or one piece's chunk."""
        self._chunks += values._chunks if isinstance(values, _Chunks) else [values]


class Flags(_Chunks):
    """A yes or no per complete event: a bool array per piece read as columns, a list where events were read
    one by one; ``array()`` joins them once."""

    __slots__ = ()

    def __len__(self) -> int:
        return sum(map(len, self._chunks))

    def array(self) -> np.ndarray:
        joined = (np.concatenate([np.asarray(k, dtype=bool) for k in self._chunks]) if self._chunks
                  else np.zeros(0, dtype=bool))
        self._chunks = [joined]
        return joined

    def tolist(self) -> list:
        return self.array().tolist()


class Ids(_Chunks):
    """An id per complete event (its correlation, its External id): (int64 values, where the id is null) per
    piece read as columns whose ids are integers or null, a list of the values (None for null) where a piece
    holds others (a string) or was read event by event. ``coded()`` joins the column as (values, null) where
    every id is an integer or null; ``tolist()`` gives the values as the rules compare them."""

    __slots__ = ()

    def __len__(self) -> int:
        return sum(len(k) if type(k) is list else len(k[0]) for k in self._chunks)

    def coded(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(int64 values, null) of the whole column; None where an id is neither an integer nor null."""
        values, null = [], []
        for k in self._chunks:
            if type(k) is list:
                if not all(v is None or (type(v) is int and -_INT64 <= v < _INT64) for v in k):
                    return None
                null.append(np.array([v is None for v in k], dtype=bool))
                values.append(np.array([0 if v is None else v for v in k], dtype=np.int64))
            else:
                values.append(k[0])
                null.append(k[1])
        if not values:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
        joined = np.concatenate(values), np.concatenate(null)
        self._chunks = [joined]
        return joined

    def tolist(self) -> list:
        out: list = []
        for k in self._chunks:
            if type(k) is list:
                out += k
            else:
                values = np.array(k[0].tolist(), dtype=object)
                values[k[1]] = None
                out += values.tolist()
        return out


@dataclass
class Columns:
    """The complete (``ph`` X) events, one entry each per column, and the entries the rules touch otherwise.
    Times are kept in typed arrays, repeated values (names, categories, threads) as ids, and the events' own ids
    and flags as numpy chunks (``Ids``, ``Flags``; Python values only where a piece holds other types): a 1 GB
    trace has millions of complete events, whose Python objects a helper would pickle and this process rebuild
    and join."""

    index: array = field(default_factory=lambda: array("q"))  # position in traceEvents
    cat_id: array = field(default_factory=lambda: array("q"))  # the lower-cased category's id in categories
    name_id: array = field(default_factory=lambda: array("q"))
    thread: array = field(default_factory=lambda: array("q"))  # the (pid, tid)'s id in threads
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    corr: Ids = field(default_factory=Ids)
    ext: Ids = field(default_factory=Ids)
    module: Flags = field(default_factory=Flags)
    has_stack: Flags = field(default_factory=Flags)
    names: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)  # lower-cased category ("" for none) -> its id
    threads: dict[tuple, int] = field(default_factory=dict)  # (pid, tid) -> its id
    missing_name: list[int] = field(default_factory=list)  # positions of entries without "name"
    missing_cat: set[int] = field(default_factory=set)  # positions of complete events without a str "cat"
    not_objects: list[int] = field(default_factory=list)
    ts_all: array = field(default_factory=lambda: array("d"))  # every entry's numeric ts, else NaN
    step_rows: list[int] = field(default_factory=list)  # entries named ProfilerStep#... with a numeric ts
    count: int = 0
    ranges: list | None = None  # EditPlan.ranges
    # (where its first entry lies in the text, its position) of each piece read in byte ranges: where a byte
    # range may start (EditPlan.pieces)
    pieces: list[tuple[int, int]] = field(default_factory=list)
    span: tuple | None = None  # the byte range read (TraceStream.start, .end), None for one pass
    header: dict = field(default_factory=dict)


def export_ranges(path: Path, workers: Workers) -> Near | None:
    """Where ``path`` is cut in two near its middle (each half's reader finds the event boundary there,
    jsonstream.split_near), when ``workers`` has the export read and write it in halves (the second by a
    helper); else None: one range, here."""
    return split_near(path, 2, _decode) if workers.halves(path) else None


@releasing
def read_columns(path: Path, workers: Workers | None = None) -> Columns:
    """The columns of the trace in ``path``; where ``workers`` allows (default: this process only), a large
    one is read in two byte ranges at once, the second by a forked helper (the columns are the same).
    ``ranges`` then holds the byte ranges as their readers found them."""
    workers = workers or Workers.inline()
    near = export_ranges(path, workers)
    if near is not None:
        try:
            c = _read_halves(path, near)
            if c is not None:
                return c
        except (OSError, RuntimeError, BrokenProcessPool, NoCut):  # no helper, or no cut: one pass below
            pass
    return _read_range(path, None)


# The share of a file the export writes in this process, the rest by a helper: this process also appends the
# helper's part to the copy (in a thread). This process writes around the page cache (trace/direct_file.py)
# and the helper through it, so this process's bytes cost less: on the 1 GB replica on two cores, 0.62 of
# the file took 0.94 times as long as 0.55, 0.68 0.97 times as long as 0.62, and 0.75 0.99 times as long as
# 0.68 (5 pairs each).
WRITE_FIRST_SHARE = 0.68


class RangeReader:
    """The columns of a file read in byte ranges, piece by piece: each piece's columns made apart (``piece``),
    in this process for its own range (``add`` each piece, then ``first_done``) and in a helper for another
    (``piece``, then ``range_end``), whose pieces this process keeps as they come (``add_later``); they are
    joined once, at the end (``join_columns``: ``own()`` for this process's range, ``columns()`` for two),
    rather than appended piece by piece (each append would grow, and copy, every column again).
    The export's own read in halves uses it, and so does the analysis' (the ``side`` of
    stream_ranges.collect_ranges, one_pass.py), with ``decode``: how a piece is read (``read_piece``, or a
    reader whose msgspec fallback gives whole events, which the analysis reads too)."""

    lenient = staticmethod(from_objects)

    def __init__(self, decode=None) -> None:
        self.decode = decode or read_piece
        self._own: list[Columns] = []
        self._own_end = Columns()
        self._later: dict[int, list[Columns]] = {}
        self._cats: dict[Any, str] = {}

    def add(self, events, at: int | None = None) -> None:
        self._own.append(self.piece(events, at))

    def first_done(self, stream: TraceStream) -> None:
        self._own_end = self.range_end(stream)

    def piece(self, events, at: int | None = None) -> Columns:
        """One piece's columns on their own (entries counted from 0); ``at``: where its first entry lies."""
        c = Columns(pieces=[] if at is None else [(at, 0)])
        add_piece(c, events, self._cats)
        return c

    def range_end(self, stream: TraceStream) -> Columns:
        """A range's header keys and span, as columns without entries."""
        return Columns(header=stream.header, span=(stream.start, stream.end))

    def add_later(self, k: int, c: Columns) -> None:
        self._later.setdefault(k, []).append(c)

    def own(self) -> Columns:
        """This process's range's columns, with its header keys and span."""
        return join_columns([*self._own, self._own_end])

    def joinable(self) -> bool:
        """Whether ``columns()`` gives the file's columns: exactly two ranges read, that meet (where they do
        not, the same event was found by both: a defect)."""
        if list(self._later) != [1]:
            return False
        span, later_span = self._own_end.span, self._later[1][-1].span
        return span is not None and later_span is not None and span[1] == later_span[0]

    def columns(self, size: int | None = None) -> Columns | None:
        """The file's columns, both ranges joined, with ``ranges``: the two to write the copy in, as their
        readers found them, or, given the file's ``size`` (an uncompressed file: any byte range of it is
        read from where it starts), cut at the piece nearest ``WRITE_FIRST_SHARE`` of it. None unless
        exactly two ranges were read, or where they do not meet (a defect): ``joinable()``."""
        if not self.joinable():
            return None
        later = self._later.pop(1)
        first_of_rest = sum(p.count for p in self._own)
        span, later_span = self._own_end.span, later[-1].span
        c = join_columns([*self._own, self._own_end, *later])
        self._own = []
        c.span = span
        c.ranges = [((0, span[1]), 0), ((later_span[0], None), first_of_rest)]
        if size is not None and len(c.pieces) > 1:
            at, first = min(c.pieces[1:], key=lambda piece: abs(piece[0] - WRITE_FIRST_SHARE * size))
            c.ranges = [((0, at), 0), ((at, None), first)]
        return c

    def read(self, path: Path, byte_range: tuple[int, int | None] | None, near: Near | None = None,
             between=None) -> None:
        """This process's range (None: the whole file); ``between()`` after each piece."""
        with TraceStream(path, span=byte_range, lenient=self.lenient, near=near) as stream:
            for events in stream.decode_events(self.decode):
                self.add(events, stream.piece_at)
                if between is not None:
                    between()
            self.first_done(stream)

    def pieces(self, path: Path, byte_range: tuple[int, int | None], near: Near) -> Iterator[Columns]:
        """In a helper: each piece's columns of its range, then the range's end (``range_end``)."""
        with gc_paused(), TraceStream(path, span=byte_range, lenient=self.lenient, near=near) as stream:
            for events in stream.decode_events(self.decode):
                yield self.piece(events, stream.piece_at)
            end = self.range_end(stream)
        yield end


def _read_halves(path: Path, near: Near) -> Columns | None:
    """The columns of ``path`` read in ``near``'s two ranges, the second by a forked helper that sends its
    columns piece by piece as it goes (appended between this process's own pieces, not all at its end)."""
    reader = RangeReader()

    def take() -> None:
        for part in inbox.take():
            reader.add_later(1, part)

    with sending(reader.pieces, [(path, near.ranges[1], near)]) as (inbox,):
        reader.read(path, near.ranges[0], near, take)
        for part in inbox.rest():
            reader.add_later(1, part)
    return reader.columns(plain_size(path))


def plain_size(path: Path) -> int | None:
    """The size of an uncompressed file, whose copy may be written in ranges cut anywhere
    (``RangeReader.columns``); None for a gzipped one, written in the ranges it was read in."""
    return None if path.name.endswith(".gz") else path.stat().st_size


def _read_range(path: Path, byte_range: tuple[int, int | None] | None) -> Columns:
    """The columns of one byte range (None: the whole file)."""
    reader = RangeReader()
    reader.read(path, byte_range)
    return reader.own()


_COLUMNS = ColumnReader(schema.Event)


def read_piece(text, decode=None) -> list | FastColumns:
    """A piece of ``traceEvents`` as columns of schema.Event's fields where the compiled reader is built and
    takes it, else decoded by msgspec with ``decode`` (default: the view of the fields the rules read; an
    entry that is no event kept as its msgspec.Raw)."""
    cols = _COLUMNS.read(text)
    return (decode or _decode)(text) if cols is None else cols


def add_piece(c: Columns, events: list | FastColumns, cats: dict) -> None:
    """A piece that ``read_piece`` (or Python's json, ``from_objects``) read, appended to ``c``: by numpy
    where the compiled reader read it and its values allow (``read_column_piece``), else event by event."""
    if type(events) is not FastColumns:
        read_events(c, events, cats)
    elif not read_column_piece(c, events, cats):
        read_events(c, schema.decode_each(events.text), cats)
    c.count += len(events)


def join_columns(parts: list[Columns]) -> Columns:
    """The columns of consecutive pieces (``parts``, each counted from 0) as one: each typed column made by
    one concatenation; each part's names, categories and threads given ids in one table, in order of first
    appearance, as one pass over the whole would give them; its positions shifted by the entries before it.
    Header keys: a later part's replace an earlier's (a key after the events array follows those before it,
    as JSON reads it); span: the first given."""
    c = Columns()
    typed: dict[str, list[np.ndarray]] = {name: [] for name in _TYPED}
    shift = 0
    for p in parts:
        if p.count:
            typed["index"].append(np.frombuffer(p.index, dtype=np.int64) + shift)
            for name, table, theirs in (("name_id", c.names, p.names), ("cat_id", c.categories, p.categories),
                                        ("thread", c.threads, p.threads)):
                ids = np.array([table.setdefault(value, len(table)) for value in theirs], dtype=np.int64)
                if len(getattr(p, name)):  # the part's ids as the joined table's
                    typed[name].append(ids[np.frombuffer(getattr(p, name), dtype=np.int64)])
            for name in ("start", "end", "ts_all"):
                typed[name].append(np.frombuffer(getattr(p, name), dtype=np.float64))
        for name in ("corr", "ext", "module", "has_stack"):
            getattr(c, name).extend(getattr(p, name))
        for mine, theirs in ((c.missing_name, p.missing_name), (c.not_objects, p.not_objects),
                             (c.step_rows, p.step_rows)):
            mine += [i + shift for i in theirs]
        c.missing_cat |= {i + shift for i in p.missing_cat}
        c.pieces += [(at, i + shift) for at, i in p.pieces]
        shift += p.count
        c.header.update(p.header)
        c.span = p.span if c.span is None else c.span
    c.count = shift
    for name, chunks in typed.items():
        if chunks:
            getattr(c, name).frombytes(memoryview(np.concatenate(chunks)).cast("B"))
    return c


_TYPED = ("index", "cat_id", "name_id", "thread", "start", "end", "ts_all")


def _raw(values: np.ndarray) -> memoryview:
    """A contiguous array's bytes, for ``array.frombytes``, without the copy that ``tobytes`` makes."""
    return memoryview(np.ascontiguousarray(values)).cast("B")


_NUMBER = (int, float)
Raw, NO_ARGS = msgspec.Raw, schema.NO_ARGS


def read_events(c: Columns, events: list, cats: dict) -> None:
    """The columns of one piece of entries, an entry at a time, whatever they hold."""
    names, threads = c.names, c.threads
    for i, e in enumerate(events, c.count):
        if e.__class__ is Raw:
            c.not_objects.append(i)
            c.ts_all.append(NAN)
            continue
        if isinstance(e.ts, _NUMBER):
            c.ts_all.append(e.ts)
            if e.name.__class__ is str and e.name.startswith(STEP_PREFIX):
                c.step_rows.append(i)
        else:
            c.ts_all.append(NAN)
        if e.name is UNSET:
            c.missing_name.append(i)
        if e.ph != "X":
            continue
        cat = e.cat
        try:
            lc = cats[cat]
        except (KeyError, TypeError):
            lc = cat.lower() if isinstance(cat, str) else ""
            if not isinstance(cat, str):
                c.missing_cat.add(i)
            else:
                cats[cat] = lc
        name = e.name if e.name.__class__ is str else ("" if e.name is UNSET else str(e.name))
        nid = names.get(name)
        if nid is None:
            nid = names[name] = len(names)
        a = e.args or NO_ARGS
        ts, dur = e.ts, e.dur
        ts = 0.0 if ts is None else float(ts)
        dur = 0.0 if not dur else max(float(dur), 0.0)  # vocabulary.interval: negative is 0
        ext = a.ext_lower
        if ext is UNSET or ext is None:
            ext = None if a.ext_upper is UNSET else a.ext_upper
        corr = a.correlation  # None where absent
        module = a.module
        tid = threads.get((e.pid, e.tid))
        if tid is None:
            tid = threads[(e.pid, e.tid)] = len(threads)
        cid = c.categories.get(lc)
        if cid is None:
            cid = c.categories[lc] = len(c.categories)
        c.index.append(i)
        c.cat_id.append(cid)
        c.name_id.append(nid)
        c.thread.append(tid)
        c.start.append(ts)
        c.end.append(ts + dur)
        c.corr.append(corr)
        c.ext.append(ext)
        c.module.append(module is not UNSET and module is not None)
        c.has_stack.append(a.call_stack is not UNSET)


def _threads(cols: FastColumns, rows: np.ndarray, threads: dict) -> np.ndarray:
    """The id in ``threads`` of the (pid, tid) of each of ``rows`` (integers, strings, null, or missing: pid
    0, tid None), a new one given to a pair met first: looked up once per run of rows on one thread (events
    come in such runs), from the run's first row."""
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    same = np.ones(max(len(rows) - 1, 0), dtype=bool)
    for key in ("pid", "tid"):
        t = cols.type(key)[rows]
        v = np.where((t == T_INT) | (t == T_STR), cols.int(key)[rows], 0)
        same &= (t[1:] == t[:-1]) & (v[1:] == v[:-1])
    run = np.concatenate(([0], np.cumsum(~same)))  # each row's run
    held = rows[np.flatnonzero(np.concatenate(([True], ~same)))]
    pairs = zip(cols.values("pid", held, 0), cols.values("tid", held))
    return np.array([threads.setdefault(t, len(threads)) for t in pairs], dtype=np.int64)[run]


_EXACT = 2**53  # integers up to this are exact as float64; past it, the per-event rules convert them


def _big(cols: FastColumns, t: np.ndarray, field: str) -> bool:
    return bool(np.any((t == T_INT) & (np.abs(cols.int(field)) > _EXACT)))


def read_column_piece(c: Columns, cols: FastColumns, cats: dict) -> bool:
    """``read_events`` of a piece read by the compiled reader (trace/fastread.py, with schema.Event's fields),
    with numpy over the piece; False (nothing appended) where a value is of a type whose Python conversion
    the per-event rules must make (then: ``read_events(c, schema.decode_each(cols.text), cats)``)."""
    strings = cols.strings
    ts_t, dur_t, name_t, ph_t, cat_t = (cols.type(f) for f in ("ts", "dur", "name", "ph", "cat"))
    timed = (ts_t == T_INT) | (ts_t == T_REAL)
    if (_big(cols, ts_t, "ts") or _big(cols, dur_t, "dur") or np.any(np.isin(ts_t, (T_TRUE, T_FALSE, T_OTHER)))
            or not np.all(np.isin(name_t, (T_STR, T_MISSING, T_NULL)))):
        return False
    x_code = next((k for k, s in enumerate(strings) if s == "X"), -1)
    is_x = (ph_t == T_STR) & (cols.int("ph") == x_code)
    rows = np.flatnonzero(is_x)
    num = (T_INT, T_REAL, T_NULL, T_MISSING)
    if not (np.all(np.isin(ts_t[rows], num)) and np.all(np.isin(dur_t[rows], num))):
        return False
    how = {f: _ids(cols, f, rows) for f in ("correlation", "ext_lower", "ext_upper")}  # how each is read
    if any(v is None for v in how.values()):  # a type the per-event rules convert
        return False
    for f in ("pid", "tid"):  # read per distinct thread (_threads)
        if not np.all(np.isin(cols.type(f)[rows], (T_INT, T_STR, T_NULL, T_MISSING))):
            return False
    # every entry: its numeric ts (else NaN), whether it names a step, whether it has a name
    first = c.count
    ts = cols.real("ts")
    c.ts_all.frombytes(_raw(np.where(timed, ts, np.nan)))  # float64s as they are: no Python float each
    name_id = cols.int("name")
    stepped = np.zeros(len(strings) + 1, dtype=bool)
    stepped[:len(strings)] = [s.startswith(STEP_PREFIX) for s in strings]
    c.step_rows += (np.flatnonzero(timed & (name_t == T_STR) & stepped[np.where(name_t == T_STR, name_id, -1)])
                    + first).tolist()
    c.missing_name += (np.flatnonzero(name_t == T_MISSING) + first).tolist()
    if not len(rows):
        return True
    # the complete events
    cat_str = cat_t[rows] == T_STR
    c.missing_cat.update((rows[~cat_str] + first).tolist())
    # each string used as a category, lower-cased, as its id; code len(strings): no str category, ""
    cat_code = np.where(cat_str, cols.int("cat")[rows], len(strings))
    categories = c.categories
    cat_ids = np.zeros(len(strings) + 1, dtype=np.int64)
    for k in np.flatnonzero(np.bincount(cat_code, minlength=len(strings) + 1)).tolist():
        lc = "" if k == len(strings) else cats.get(strings[k]) or cats.setdefault(strings[k], strings[k].lower())
        cat_ids[k] = categories.setdefault(lc, len(categories))
    c.cat_id.frombytes(_raw(cat_ids[cat_code]))
    names = c.names
    nt = name_t[rows]
    code = np.where(nt == T_STR, name_id[rows], np.where(nt == T_MISSING, -1, -2)) + 2  # 1: "", 0: null
    # each code's id, given in order of first appearance, as one setdefault per event gives them
    first_row = np.full(len(strings) + 2, len(code), dtype=np.int64)
    np.minimum.at(first_row, code, np.arange(len(code)))
    met = np.flatnonzero(first_row < len(code))
    ids = np.zeros(len(strings) + 2, dtype=np.int64)
    for k in met[np.argsort(first_row[met])].tolist():
        ids[k] = names.setdefault(strings[k - 2] if k >= 2 else "" if k == 1 else "None", len(names))
    c.name_id.frombytes(_raw(ids[code]))
    start = np.where(timed[rows], ts[rows], 0.0)
    dur = cols.real("dur")[rows]
    dur = np.where(((dur_t[rows] == T_INT) | (dur_t[rows] == T_REAL)) & (dur > 0), dur, 0.0)  # as read_events
    c.index.frombytes(_raw((rows + first).astype(np.int64)))
    c.thread.frombytes(_raw(_threads(cols, rows, c.threads)))
    c.start.frombytes(_raw(start))
    c.end.frombytes(_raw(start + dur))
    c.corr.extend(_coded(cols, "correlation", rows) if how["correlation"] is _CODED
                  else cols.values("correlation", rows))
    # the lower External id, else (missing or null) the upper one where there is one, else None
    lower_t, upper_t = cols.type("ext_lower")[rows], cols.type("ext_upper")[rows]
    upper = (lower_t == T_MISSING) | (lower_t == T_NULL)
    if how["ext_lower"] is _CODED and how["ext_upper"] is _CODED:
        (low, _), (high, high_null) = _coded(cols, "ext_lower", rows), _coded(cols, "ext_upper", rows)
        c.ext.extend((np.where(upper, high, low), upper & high_null))
    else:
        low, high = cols.objects("ext_lower", rows, UNSET), cols.objects("ext_upper", rows, UNSET)
        c.ext.extend(np.where(upper, np.where(upper_t != T_MISSING, high, None), low).tolist())
    module_t, stack_t = cols.type("module")[rows], cols.type("call_stack")[rows]
    c.module.extend((module_t != T_MISSING) & (module_t != T_NULL))
    c.has_stack.extend(stack_t != T_MISSING)
    return True


_CODED = "coded"  # _ids: every row's id an integer, null or missing


def _ids(cols: FastColumns, field: str, rows: np.ndarray) -> str | None:
    """How ``field``'s ids at ``rows`` are read: _CODED (integers, null or missing: ``_coded``), "objects"
    (strings among them: as Python values), or None (another type, which the per-event rules convert)."""
    t = cols.type(field)[rows]
    some = (t == T_INT) | (t == T_NULL) | (t == T_MISSING)
    if np.all(some):
        return _CODED
    return "objects" if np.all(some | (t == T_STR)) else None


def _coded(cols: FastColumns, field: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``field``'s integer ids at ``rows`` as (int64 values, null): a null or missing id is None to the rules."""
    t = cols.type(field)[rows]
    return np.where(t == T_INT, cols.int(field)[rows], 0), t != T_INT

"""Read a Chrome-trace JSON file as a stream of ``traceEvents`` pieces, never holding the whole document.

    with TraceStream(path) as ts:            # gzipped or not, by the name's .gz suffix
        for events in ts.decode_events(lambda text: msgspec.json.decode(text, type=list[Event])):
            ...                              # a list of consecutive events, in file order
        ts.header                            # dict: the top-level keys other than traceEvents
    TraceStream(path, opener=bounded_read.open_trace)   # any binary opener, for a whole-file stream
    TraceStream(path, lenient=convert)       # pieces msgspec refuses: read by Python's json, then convert(list)

    read_header(path)                        # only the keys before traceEvents (distributedInfo, ...)

    ranges = split_points(path, 2)           # byte ranges of whole events ...
    with TraceStream(path, span=ranges[1]) as ts:   # ... that separate processes decode independently
        ...
    near = split_near(path, 2)               # the offsets such ranges start near, without reading the file
    with TraceStream(path, span=near.ranges[1], near=near) as ts:   # each reader finds its range's ends
        ...

The file is read in blocks of ``BLOCK`` bytes (decompressed on the fly for .gz). Each block is cut after the
last ``}`` that is followed by ``,`` and ``{`` (the boundary between two events, whitespace allowed), and
the events before the cut become one piece, given to the caller's decode function. A cut is only a
candidate: a piece that does not decode (the cut fell inside a string or a nested object) is retried with
the next block appended, cut after the failed position. A byte range of a .gz file is read by
decompressing the bytes before it and dropping them (gzopen.py), and yields at most bounded_read's ceiling
(its trailer's size may not be the whole of its JSON). The keys before ``"traceEvents"`` and those after
its closing ``]`` are decoded once each, so the header costs nothing on large files. Raises
``msgspec.DecodeError`` on text that is not such a JSON object, and ``OSError``/``EOFError``/``zlib.error``
on unreadable files.

Bounded work on any input: each block is read once. A block is searched for a NUL byte (which no JSON text
holds: the tail of a file cut short, or preallocated by its writer and never filled) as it is read where it
holds the header or a range's first bytes, and the blocks after those only where their text fails (no cut in
it, a piece that does not decode, its end): that finds the file's first NUL byte without a search of the text
that decodes. That, a first byte that cannot open an object, a header of more than ``HEADER_LIMIT`` bytes, or
more than ``PIECE_LIMIT`` bytes without a decodable cut end the read there, with ``NotJSON`` or
``msgspec.DecodeError``. A bad file therefore costs time linear in the bytes read up to the error and memory
of a few blocks, whatever its size.

``lenient``: text that is JSON to Python but not to msgspec (NaN and Infinity literals) or that the caller's
types refuse (an event that is not an object) is normalised instead of refused: a piece (or the header) that
msgspec rejects is read by Python's json, and the piece's list of entries is given to ``lenient``, which
returns what ``decode`` would have. A piece that Python's json cannot read either is refused as before (a
cut inside a string is retried with more text).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from stepscope.trace.bounded_read import bounded
from stepscope.trace.gzopen import open_gz, uncompressed_size

try:  # a buffer whose bytes are not zeroed before the file's are read into it (trace/fastread.py)
    from stepscope.trace._fastread import empty as _unset_bytes
except ImportError:  # the compiled reader is not built: zeroed, one pass more
    _unset_bytes = bytearray

BLOCK = 8 << 20
KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
BOUNDARY = re.compile(rb"\}\s*,\s*\{")
HEADER_LIMIT = 64 << 20  # a header larger than this is not a torch.profiler trace
PIECE_LIMIT = 64 << 20  # nor is this much text without a boundary between two events that decodes
# what Python's json (the lenient reader) reads past before a trace's '{': a UTF-8 byte order mark as the
# file's first bytes, then JSON's whitespace
LEAD = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\n\r]*")
# bytes decoded to confirm that a split point starts an event (each reader of a range decodes them at its
# ends). Only the cost depends on it: a confirmed start that is not one (text inside a string, or a nested
# array of objects, longer than this) leaves the range before it ending inside that text, which fails to
# decode, and the file is then parsed in one process. 256 KiB took 1.2 ms to confirm on the 1 GB replica,
# 4 MiB 30 ms.
PROBE = 256 << 10
MIN_WINDOW = 4 << 10  # split_near's least: a few events (ranges of larger files search PROBE bytes)
# bytes of the buffer left after each piece's text: the compiled reader parses a piece where it lies when
# simdjson may read that far past its end (fastread.py), instead of copying it into a padded buffer first
PADDING = 64
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


class NotJSON(msgspec.DecodeError):
    """Text that no JSON reader accepts, seen without decoding it (a NUL byte); the message says where."""


class TraceStream:
    """A trace file opened for streaming; see the module docstring.

    ``span=(start, end)``: only the events from byte ``start`` (the ``{`` of an event) up to byte ``end``
    (the ``{`` of the first event not wanted; None: to the end of the array). ``header`` then stays empty,
    except for the keys after the array when ``end`` is None.

    ``near`` (a ``Near``, from ``split_near``): ``span``'s offsets are those the range's ends are near. This
    stream finds each end itself, as the first event start after the offset that ``Near.find`` confirms;
    ``start`` and ``end`` then say where they were. A process that reads a range up to an offset and one that
    reads the next range from it find the same event, so ranges read apart meet without a gap or an overlap,
    and nobody reads the file in advance to cut it (a .gz file: decompressed up to each cut once less).
    ``NoCut`` (a ValueError) when no event start is confirmed there.
    """

    def __init__(self, path: Path, block: int = BLOCK, span: tuple[int, int | None] | None = None,
                 opener: Callable[[Path], Any] | None = None,
                 lenient: Callable[[list], list] | None = None, near: Near | None = None) -> None:
        self.path = Path(path)
        self.lenient = lenient
        self.opener = opener  # e.g. bounded_read.open_trace; default: gzopen.open_gz/open by the name
        self.block = block
        self.span = span
        self.near = near
        self.header: dict[str, Any] = {}
        self.start, self.end = (None, None) if span is None else span
        # where the first entry of the piece last yielded lies in the text (or the space before it): a byte
        # range that starts there is read from that entry on
        self.piece_at: int | None = None
        self._f = None
        self._left: int | None = None  # bytes left to read in the span (with ``near``: up to its end's offset)
        self._pos = 0  # offset (of the decompressed text) of the next byte ``_read`` returns
        self._pending = b""  # bytes read from the file that ``_read`` returns before reading more
        self._end_found = near is None or span is None or span[1] is None

    def __enter__(self) -> TraceStream:
        gz = self.path.name.endswith(".gz")
        if self.opener is not None and self.span is None:
            self._f = self.opener(self.path)
        elif gz and self.span is not None:  # the bytes before the range decompressed and dropped (gzopen.py)
            self._f = bounded(open_gz(self.path, at=self.span[0]), self.path)
        else:
            self._f = open_gz(self.path) if gz else open(self.path, "rb")
            if self.span is not None:
                self._f.seek(self.span[0])
        if self.span is not None:
            self._left = None if self.span[1] is None else self.span[1] - self.span[0]
            self._pos = self.span[0]
            if self.near is not None and self.span[0] > 0:
                try:
                    self._find_start()
                except BaseException:
                    self._f.close()
                    raise
        return self

    def _find_start(self) -> None:
        """The range's first event, found in the window after its offset (``near``)."""
        window = _read_exactly(self._f, self.near.window)
        at = self.near.find(window, self.span[0])
        self.start = self._pos = self.span[0] + at
        self._pending = window[at:]
        if self._left is not None:
            self._left -= len(window)
            if self._left < 0:
                raise NoCut(f"the range from {self.span[0]} to {self.span[1]} is shorter than its window")

    def _found_end(self) -> bytes:
        """The bytes from the end's offset to the first event of the next range (``near``), found as the
        reader of that range finds it."""
        self._end_found = True
        window = _read_exactly(self._f, self.near.window)
        at = self.near.find(window, self.span[1])
        self.end = self.span[1] + at
        return window[:at]

    def __exit__(self, *exc) -> None:
        self._f.close()

    def _read(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
        elif self._left is None:
            data = self._f.read(self.block)
        elif self._left == 0 and not self._end_found:
            data = self._found_end()
        else:
            data = self._f.read(min(self.block, self._left))
            self._left -= len(data)
        self._no_nul(data, 0, self._pos)
        self._pos += len(data)
        return data

    @staticmethod
    def _no_nul(data, start: int, at: int) -> None:
        """Raise NotJSON where ``data[start:]`` (text whose first byte lies at offset ``at``) holds a NUL
        byte."""
        nul = data.find(0, start)
        if nul >= 0:
            raise NotJSON(f"a NUL byte at offset {at + nul - start}, which no JSON text holds: a file cut "
                          "short, or preallocated by its writer and never filled")

    def _no_nul_read(self, buf: bytearray) -> None:
        """``_no_nul`` of ``buf[1:]``, the last bytes read (``buf[0]`` is decode_events' own): called where
        that text fails. Every piece before it decoded, and no reader decodes a NUL byte (simdjson, msgspec
        and Python's json all refuse one), so its first is the file's first."""
        self._no_nul(buf, 1, self._pos - len(buf) + 1)

    def _more(self, buf: bytearray) -> bytearray | None:
        """``buf`` followed by the stream's next bytes (``_read``'s), or None at its end. The file's bytes are
        read into a new buffer that holds ``buf`` first, where they stay: no bytes object of their own, copied
        into the buffer after it."""
        if self._pending or (self._left == 0 and not self._end_found) or not hasattr(self._f, "readinto"):
            # a window read while finding a range's ends (bytes already in memory), or an opener's file that
            # can only read(): its bytes are copied after the buffer's
            data = self._read()
            return buf + data if data else None
        want = self.block if self._left is None else min(self.block, self._left)
        if want == 0:
            return None
        at = len(buf)
        out = _unset_bytes(at + want)
        out[:at] = buf
        with memoryview(out) as view, view[at:] as room:
            got = self._f.readinto(room) or 0
        if got < want:
            del out[at + got:]  # a short read: no byte that the file did not give stays in the buffer
        if got == 0:
            return None
        self._pos += got  # its NUL bytes are looked for where a piece fails (decode_events), not here
        if self._left is not None:
            self._left -= got
        return out

    def _events_start(self) -> bytearray:
        """Read the header up to the ``[`` of traceEvents; return a byte of ours, then what follows it."""
        buf = bytearray(self._read())
        lead = LEAD.match(buf).end()
        first = buf[lead:lead + 1]
        if first and first != b"{":
            raise msgspec.DecodeError(f"the text starts with {bytes(first)!r}, not with a JSON object's '{{'")
        while True:
            m = KEY.search(buf)
            if m:
                break
            more = self._read()
            if not more or len(buf) > HEADER_LIMIT:
                raise msgspec.DecodeError("no traceEvents array in the JSON object")
            buf += more
        head = bytes(buf[lead:m.start()]).rstrip()  # from the object's "{": no byte order mark for msgspec
        head = head[:-1] if head.endswith(b",") else head
        self.header = self._decode_json(head + b"}")  # '{' + the keys before traceEvents
        if not isinstance(self.header, dict):
            raise msgspec.DecodeError("the trace is not a JSON object")
        del buf[:m.end() - 1]  # in place, the text after it not copied: the '[' left stands for our byte
        buf[0] = 0x20
        return buf

    def decode_events(self, decode: Callable[[memoryview], list]) -> Iterator[list]:
        """Decoded lists of events, in file order. ``decode(array_text)`` raises msgspec.DecodeError (or
        ValidationError) on a bad piece; a piece that fails is retried with more text until the end of the
        array, where a failure is final. The text of a piece that decoded is not changed afterwards: its
        result may hold on to it."""
        # buf[0] is a byte of ours that a piece overwrites with '[', buf[1:] the text from an event's '{'
        buf = self._events_start() if self.span is None or self.span[0] == 0 else bytearray(b" ") + self._read()
        first = self._pos - len(buf) + 1  # where buf[1] lies in the text: the first entry, or the space before it
        failed_at = -1  # a cut that did not decode: only cuts after it are tried
        while True:
            grown = self._more(buf)
            if grown is None:
                break
            buf = grown
            if len(buf) > PIECE_LIMIT + self.block:
                self._no_nul_read(buf)
                raise msgspec.DecodeError(f"no boundary between two events that decodes in the "
                                          f"{PIECE_LIMIT >> 20} MiB before offset {self._pos}: not a trace's "
                                          "array of events")
            cut = _last_boundary(buf, failed_at, len(buf) - PADDING)
            if cut is None:
                self._no_nul_read(buf)
                continue
            closing = buf[cut]
            buf[0], buf[cut] = 0x5B, 0x5D  # "[" and "]" around the events before the cut
            try:
                with memoryview(buf) as view:
                    events = self._decode(decode, view[:cut + 1])
            except DECODE_ERRORS:
                buf[cut] = closing
                self._no_nul_read(buf)
                failed_at = cut
                continue
            failed_at = -1
            # the rest goes on in a new buffer: the piece's text is never changed after ``decode`` saw it, so
            # what ``decode`` made may keep it (a reader's columns, msgspec.Raw) instead of copying it
            buf = buf[buf.index(b"{", cut) - 1:]
            self.piece_at, first = first, self._pos - len(buf) + 1
            yield events
        self.piece_at = first
        if self.span is not None and self.span[1] is not None:
            # a middle range: whole events followed by ',' (and whitespace)
            text = bytes(buf[1:]).rstrip()
            try:
                events = self._decode(decode, b"[" + (text[:-1] if text.endswith(b",") else text) + b"]")
            except DECODE_ERRORS:
                self._no_nul_read(buf)
                raise
            yield events
            return
        # The rest: the last events, ']' and the keys after the array, decoded as one object.
        text = b'{"traceEvents":[' + bytes(buf[1:])
        try:
            tail = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
        except DECODE_ERRORS:
            self._no_nul_read(buf)
            if self.lenient is None:
                raise
            rest = self._python_json(text)
            events = rest.pop("traceEvents")
            yield self.lenient(events if isinstance(events, list) else [])
            self.header.update(rest)
            return
        yield self._decode(decode, bytes(tail.pop("traceEvents")))
        self.header.update({k: self._decode_json(v) for k, v in tail.items()})

    def _decode(self, decode: Callable, text) -> list:
        """``decode(text)``; with ``lenient``, a piece msgspec refuses is read by Python's json instead."""
        try:
            return decode(text)
        except DECODE_ERRORS:
            if self.lenient is None:
                raise
            entries = self._python_json(text)
            if not isinstance(entries, list):
                raise
            return self.lenient(entries)

    def _decode_json(self, text) -> Any:
        try:
            return msgspec.json.decode(text)
        except DECODE_ERRORS:
            if self.lenient is None:
                raise
            return self._python_json(text)

    @staticmethod
    def _python_json(text) -> Any:
        try:
            return json.loads(bytes(text))
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError
            raise msgspec.DecodeError(f"{type(e).__name__}: {e}") from None


HEAD_BLOCK = 64 << 10  # what read_header reads at a time: a torch.profiler header is a few KB


def read_header(path: Path) -> dict:
    """The top-level keys before ``traceEvents`` (a torch.profiler trace's distributedInfo, deviceProperties,
    ...), read no further than the array's start. Raises as TraceStream does on a file that is no trace."""
    with TraceStream(path, HEAD_BLOCK) as ts:
        ts._events_start()
        return ts.header


def _last_boundary(buf: bytearray, after: int, before: int | None = None) -> int | None:
    """Position of the ``}`` of the last event-closing brace in ``buf`` after ``after`` + 1 (the byte after
    it is then overwritten with ``]``): the position just after the ``}``, or None. With ``before``, the last
    such position below it: ``len(buf) - PADDING`` leaves ``PADDING`` bytes or more after the piece."""
    # Two boundaries never overlap (one starts at a "}", which the rest of the pattern cannot hold), so the
    # last one found from any start is the last of the whole buffer: look in its tail first, widening it.
    end = len(buf) if before is None else before
    tail = 1 << 16
    while True:
        start = max(after + 1, end - tail)
        last = None
        for m in BOUNDARY.finditer(buf, start):
            if m.start() + 1 >= end:
                break
            last = m.start() + 1
        if last is not None or start <= after + 1:
            return last
        tail <<= 4  # no boundary in the tail: look further back


def split_points(path: Path, parts: int, decode: Callable[[bytes], list],
                 first_weight: float = 1.0) -> list[tuple[int, int | None]] | None:
    """Byte ranges that split the traceEvents array of a file into ``parts`` runs of whole events, for
    ``TraceStream(span=...)``; the first range starts at 0 (the header is read with it) and is
    ``first_weight`` times as long as each of the others (the process that reads it does more besides).
    Offsets of a .gz file are of its decompressed bytes: finding them decompresses the file up to the last
    one (gzopen.py). None when the file is too small to split."""
    path = Path(path)
    if parts < 2:
        return None
    _, offsets = _cut_offsets(path, parts, first_weight)
    starts = [0]
    with open_gz(path) if path.name.endswith(".gz") else open(path, "rb") as f:
        for offset in offsets[1:]:
            at = _event_start_near(f, offset, decode)
            if at is None or at <= starts[-1]:
                return None
            starts.append(at)
    return _spans(starts)


def _cut_offsets(path: Path, parts: int, first_weight: float) -> tuple[int, list[int]]:
    """The size of the file's text (of a .gz file: decompressed) and the offsets near which it is cut into
    ``parts`` ranges, the first one 0 and ``first_weight`` times as long as each of the others."""
    size = uncompressed_size(path) if path.name.endswith(".gz") else path.stat().st_size
    if size is None:  # a trailer that cannot tell (several gzip members): decompressed to the end once
        with open_gz(path) as f:
            size = f.seek(0, os.SEEK_END)
    total = first_weight + parts - 1
    return size, [0] + [int(size * (first_weight + k - 1) / total) for k in range(1, parts)]


def _spans(starts: list[int]) -> list[tuple[int, int | None]]:
    """Consecutive ranges from these starts, the last to the end."""
    return [(a, b) for a, b in zip(starts, starts[1:])] + [(starts[-1], None)]


class NoCut(ValueError):
    """No event start confirmed in the window after an offset where a byte range was to start or end."""


class Near(NamedTuple):
    """Byte ranges as the offsets their ends are near (``split_near``), for ``TraceStream(near=)``: each end
    is the first event start that ``decode`` confirms in the ``window`` bytes from its offset."""
    ranges: list[tuple[int, int | None]]
    decode: Callable[[bytes], list]
    window: int

    def find(self, window: bytes, offset: int) -> int:
        """Where the first confirmed event start of ``window`` (the bytes from ``offset``) is in it."""
        at = _event_start_in(window, self.decode)
        if at is None:
            raise NoCut(f"no event start confirmed in the {len(window)} bytes from offset {offset}")
        return at


def split_near(path: Path, parts: int, decode: Callable[[bytes], list], first_weight: float = 1.0,
               window: int = PROBE) -> Near | None:
    """``split_points``' ranges as ``Near`` offsets, found without reading the file (its size only: a .gz
    file's trailer), at the same fractions of it: the readers of the ranges find their ends themselves
    (``TraceStream(near=)``). ``window``: at most this many bytes searched after each offset, and less than
    the shortest range. None when the file is too small to split."""
    path = Path(path)
    if parts < 2:
        return None
    size, starts = _cut_offsets(path, parts, first_weight)
    shortest = min(b - a for a, b in zip(starts, starts[1:] + [size]))
    window = min(window, shortest // 2)
    if window < MIN_WINDOW:
        return None
    return Near(_spans(starts), decode, window)


def _read_exactly(f, n: int) -> bytes:
    """``n`` bytes of ``f`` (fewer at its end): the same bytes whoever reads them, however the reads fall."""
    data = f.read(n)
    while len(data) < n:
        more = f.read(n - len(data))
        if not more:
            break
        data += more
    return data


def _event_start_near(f, offset: int, decode: Callable[[bytes], list]) -> int | None:
    """The offset of the first ``{`` at or after ``offset`` that starts an event of the array (checked by
    decoding the events that follow it), or None."""
    f.seek(offset)
    at = _event_start_in(_read_exactly(f, PROBE), decode)
    return None if at is None else offset + at


def _event_start_in(window: bytes, decode: Callable[[bytes], list]) -> int | None:
    """Where the first ``{`` of ``window`` that starts an event of the array is (checked by decoding the
    events that follow it, up to one of the window's last three boundaries), or None."""
    pos = 0
    while True:
        m = BOUNDARY.search(window, pos)
        if m is None:
            return None
        begin = m.end() - 1
        ends = [b.start() + 1 for b in BOUNDARY.finditer(window, begin + 1)]
        for end in reversed(ends[-3:]):  # the probe's last complete events
            try:
                decode(b"[" + window[begin:end] + b"]")
                return begin
            except DECODE_ERRORS:
                continue
        pos = begin

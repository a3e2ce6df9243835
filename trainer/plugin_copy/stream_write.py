r"""Write the plugin copy of a trace file by streaming it once more and applying an ``EditPlan``.

    plan, header = plan_edits(src)                      # stream_plan.py: first pass
    write_adapted_stream(src, dst, plan, header)        # second pass: events copied or rewritten in order
    write_adapted_stream(src, dst, plan, header, (Path("x.json"), 3))   # + the excerpt of its first 3 steps

Unchanged events are copied as their original bytes (never re-serialised: runs of them are joined as
they are); entries the plan does not keep are left out. An edited event is rewritten where it lies when its
edit only sets members (a name, a category, an External id, a call stack: nearly every edit): the compiled
reader finds where those members are and sets them (``fastread.splice``): each new value replaces the old
one or is added at the end of its object, the rest of the event kept as its bytes. Any other edit, or an
event that cannot be laid out so, is decoded, changed (rules.py) and re-encoded (compact, UTF-8). Both give
the same JSON value, which ``apply_edit`` on the decoded event defines. The plan's edits are coded for the
splice once per copy (``_Special``), and each piece's output, its stretches of the original and its edited
events' new texts, is joined by one compiled call (``fastread.joined``). A plan read in two byte ranges
(plan_columns.py) is written in two too (cut where its pieces lie): a forked helper (trace/workers.py) writes
the second range's events to a file of its own, which this process appends to the copy as it grows once it
has written the first (gzipped copies: one gzip member each, a valid stream).
The excerpt for the plugin check (excerpt.py's rule: the events before step N+1 begins and those without a
time, the copy's bytes and top-level keys) is collected on the way, so no further pass reads the copy; or,
for the check that starts as soon as the copy is planned (plugin_check.EarlyCheck), made from the original
and the plan alone, reading only the pieces that hold it (``excerpt_events``).
The top-level keys keep json's default separators, which Holistic Trace Analysis's ``"rank":\s+`` regex
needs. The file appears under ``dst`` only once complete (a ``.tmp-*.partial`` name, then a rename), and
is gzipped when ``dst`` ends in ``.gz`` (level ``GZ_LEVEL``: fast, for files of gigabytes). The copy of a
source of ``DIRECT_FROM`` bytes or more is written around the page cache (trace/direct_file.py), where the
file system allows; the helper's part is appended to it by the kernel's copy (copy_file_range), through the
page cache.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import msgspec
import numpy as np
from stepscope.plugin_copy.excerpt import write_excerpt
from stepscope.plugin_copy.rules import UNLINKED_KEY
from stepscope.plugin_copy.stream_plan import UNSET, Edit, EditPlan
from stepscope.trace import fastread
from stepscope.trace.direct_file import writer_on
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.jsonstream import TraceStream
from stepscope.trace.workers import Workers

GZ_LEVEL = 1
# a copy of a source this large is written around the page cache (trace/direct_file.py): a gigabyte's copy
# spent most of its system time in the cache; smaller ones gain nothing worth a synchronous last write
DIRECT_FROM = 64 << 20
_RAW = msgspec.json.Decoder(list[msgspec.Raw])
_ENCODE = msgspec.json.Encoder().encode


def _raws(entries: list) -> list:
    """``_RAW.decode`` for a piece that Python's json read (NaN or Infinity literals, see jsonstream.py): each
    entry as json writes it, which keeps those literals."""
    return [msgspec.Raw(json.dumps(e).encode()) for e in entries]


def _edited(raw, edit: Edit) -> bytes:
    """The event ``raw`` with ``edit`` applied, re-encoded (compact); by Python's json when the event holds
    a NaN or an Infinity, which msgspec would write as null."""
    try:
        return _ENCODE(apply_edit(msgspec.json.decode(raw), edit))
    except msgspec.DecodeError:
        return json.dumps(apply_edit(json.loads(bytes(raw)), edit), separators=(",", ":")).encode()


def _splices(edit: Edit) -> bool:
    """Whether ``edit`` only sets members, so that ``fastread.splice`` can make it where the event lies."""
    return not (edit.guard_name or edit.guard_cat or edit.touch_args or edit.unlink)


class _Values:
    """The JSON texts of the values that a piece's edits set, for ``fastread.splice``: made once per edit
    (edits are shared by thousands of events: a call stack, the runtime category) and held in one list."""

    def __init__(self) -> None:
        self.texts: list[bytes] = []
        self._by: dict[int, tuple] = {}  # id(edit) -> (edit, its codes)

    def codes(self, edit: Edit) -> tuple[int, int, int, int]:
        """The indices in ``texts`` of ``edit``'s name, category, External id and call stack (-1: not set)."""
        got = self._by.get(id(edit))
        if got is None or got[0] is not edit:
            got = self._by[id(edit)] = (edit, (
                self._set(edit.name), self._set(edit.cat),
                -1 if edit.external_id is UNSET else self._text(edit.external_id),  # None: set to null
                self._set(edit.call_stack)))
        return got[1]

    def _set(self, value) -> int:
        return -1 if value is None else self._text(value)

    def _text(self, value) -> int:
        self.texts.append(_ENCODE(value))
        return len(self.texts) - 1


_DECODED = (-2, -2, -2, -2)  # the codes of an edit that does more than set members: made by _edited


class _Special:
    """The entries of a plan that the copy does not take as they are, as columns made once per copy (the
    writers of both ranges inherit them): ``positions``, sorted, of those edited or left out; ``rows``, sorted,
    of those edited, with per row the ``codes`` of its edit for ``fastread.splice`` (indices in ``texts``,
    ``_Values``; ``_DECODED`` where the edit does more than set members). Entries share a few edit objects
    (a call stack, the runtime category): each distinct one is coded once, found by a sort of their ids."""

    def __init__(self, plan: EditPlan) -> None:
        edits = plan.edits
        keys = np.fromiter(edits, dtype=np.int64, count=len(edits))
        held = list(edits.values())  # keeps each object alive while its id stands for it
        ids = np.fromiter(map(id, held), dtype=np.int64, count=len(held))
        order = np.argsort(ids, kind="stable")
        new = np.concatenate(([True], ids[order][1:] != ids[order][:-1])) if len(ids) else np.zeros(0, bool)
        which = np.empty(len(ids), dtype=np.int64)
        which[order] = np.cumsum(new) - 1  # each entry's distinct edit
        values = _Values()
        codes = np.array([values.codes(held[k]) if _splices(held[k]) else _DECODED
                          for k in order[new].tolist()], dtype=np.int64).reshape(-1, 4)
        by_row = np.argsort(keys)
        self.rows, self.codes, self.texts = keys[by_row], codes[which[by_row]], values.texts
        self.positions = _sorted_union(self.rows, np.flatnonzero(~plan.keep))


def special_of(plan: EditPlan) -> _Special:
    """The plan's ``_Special``, made on first use and kept on the plan (a plan is not changed once made): the
    export makes it before it forks the plugin's early check, whose excerpt is made from it too."""
    if plan.coded is None:
        plan.coded = _Special(plan)
    return plan.coded


def _rewritten(text, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, codes: np.ndarray, texts: list,
               first: int, edits: dict) -> list:
    """The new text of each of ``rows`` (edited entries of the piece, whose first entry is entry ``first``;
    ``codes``: their edits', ``_Special``): made where it lies (``fastread.splice``) where its edit only sets
    members and the compiled reader lays it out, else by ``_edited`` on its decoded value."""
    sets = np.flatnonzero(codes[:, 0] != _DECODED[0])
    got = fastread.splice(text, starts[rows[sets]], ends[rows[sets]], texts, codes[sets]) if len(sets) else None
    if got is not None and len(sets) == len(rows):  # every edit sets members (nearly always): its list as it is
        out = got
    else:
        out = [None] * len(rows)
        if got is not None:
            for k, new in zip(sets.tolist(), got):
                out[k] = new
    if None in out:  # an entry splice did not lay out, or an edit that does more than set members
        for k, new in enumerate(out):
            if new is None:
                j = int(rows[k])
                out[k] = _edited(text[starts[j]:ends[j]], edits[first + j])
    return out


def apply_edit(e: dict, edit: Edit) -> dict:
    """``e`` with ``edit`` applied, in the rewrite's order (guard, names, categories, ids, unlink, stack)."""
    if edit.guard_name:
        e.setdefault("name", "")
    if edit.guard_cat:
        e["cat"] = ""
    if edit.name is not None:
        e["name"] = edit.name
    if edit.touch_args:
        e["args"] = dict(e.get("args") or {})
    if edit.cat is not None:
        e["cat"] = edit.cat
    if edit.external_id is not UNSET:
        args = e["args"] = dict(e.get("args") or {})
        args["external id" if "external id" in args else "External id"] = edit.external_id
    if edit.unlink:
        args = e["args"] = dict(e.get("args") or {})
        args[UNLINKED_KEY] = args.pop("correlation", None)
    if edit.call_stack is not None:
        args = e["args"] = dict(e.get("args") or {})
        args["Call stack"] = edit.call_stack
    return e


@gc_paused()
def write_adapted_stream(src: Path, dst: Path, plan: EditPlan, header: dict,
                         excerpt: tuple[Path, int] | None = None, workers: Workers | None = None,
                         meanwhile: Callable[[], None] | None = None,
                         excerpt_done: Callable[[Path], None] | None = None) -> Path | None:
    """Write the copy to ``dst``. ``excerpt=(path, steps)``: also write excerpt.py's excerpt of the copy's
    first ``steps`` steps to ``path`` (plain JSON) in the same pass, and return ``path``; None when the copy
    has ``steps`` steps or fewer (it is its own excerpt), as excerpt.py. A plan read in byte ranges is
    written in them, the second by a forked helper into a file of its own, which this process appends as it
    grows once it has written the first, where ``workers`` allows (default: this process only; then in one
    pass). ``meanwhile()``: other work of the caller's, done once before ``dst`` appears: by this process
    while the helper still writes (after the first range), else before the copy is written.
    ``excerpt_done(path)``: the caller's work on the excerpt (the plugin's check), done once before ``dst``
    appears: as soon as the first range is written where the excerpt's entries all lie in it (while the
    helper writes the rest, and this process appends it from a thread: the kernel's copy), else at the end."""
    workers = workers or Workers.inline()
    ranges = plan.ranges if workers.forks else None
    gz = Path(dst).name.endswith(".gz")
    steps = excerpt[1] if excerpt is not None and len(plan.step_starts) > excerpt[1] else None
    in_excerpt = _excerpt_rows(plan, steps) if steps is not None else None
    # the excerpt made from the first range alone: none of its entries lies in the second
    early = (steps is not None and ranges is not None and len(ranges) > 1
             and not in_excerpt[ranges[1][1]:].any())
    pending = [meanwhile] if meanwhile is not None else []
    excerpted: list[bool] = []
    failed: list[BaseException] = []

    def once() -> None:
        if pending:
            try:
                pending[0]()
            except BaseException as e:
                failed.append(e)
                raise
            pending.clear()

    def excerpt_of(parts: list) -> None:
        if steps is None or excerpted:
            return
        write_excerpt(excerpt[0], parts, header)
        excerpted.append(True)
        if excerpt_done is not None:
            try:
                excerpt_done(excerpt[0])
            except BaseException as e:
                failed.append(e)
                raise

    def first_written(parts: list) -> None:
        if early:
            excerpt_of(parts)

    def fill(raw_out) -> None:
        try:
            parts = _write_ranges(src, raw_out, gz, plan, header, in_excerpt, Path(dst).parent, ranges, workers,
                                  once, first_written)
        except (OSError, RuntimeError):  # e.g. the helper could not start or died (BrokenProcessPool)
            if not ranges or failed:  # the caller's own work failed: its error
                raise
            raw_out.seek(0)
            raw_out.truncate()
            parts = _write_ranges(src, raw_out, gz, plan, header, in_excerpt, Path(dst).parent, None, workers,
                                  once, first_written)
        once()
        excerpt_of(parts)

    _atomic(dst, fill, direct=Path(src).stat().st_size >= DIRECT_FROM)
    return excerpt[0] if steps is not None else None


def _member(raw_out, gz: bool):
    """A writer on ``raw_out`` (a gzip member when ``gz``) whose closing leaves ``raw_out`` open."""
    if gz:
        return gzip.GzipFile(fileobj=raw_out, mode="wb", compresslevel=GZ_LEVEL)
    return _Unclosed(raw_out)


class _Unclosed:
    def __init__(self, f) -> None:
        self.write = f.write

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def _write_ranges(src: Path, raw_out, gz: bool, plan: EditPlan, header: dict, in_excerpt, folder: Path,
                  ranges: list | None, workers: Workers, meanwhile: Callable[[], None],
                  first_written: Callable[[list], None]) -> list:
    """The copy to ``raw_out``: top-level keys, events (in ``ranges``, else in one pass here), closing;
    returns the excerpt's events. ``meanwhile()`` is called once the first range is written (with no second
    range: before any); then ``first_written(the excerpt's events in the first range)``, while the second
    range's events are appended (by a thread of this process, as the helper writes them)."""
    head = b"{" + b"".join(json.dumps(k).encode() + b": " + json.dumps(v).encode() + b", "
                          for k, v in header.items()) + b'"traceEvents": [\n'
    ranges = ranges or [(None, 0)]
    special = special_of(plan)  # the entries not copied as they are: edited or left out
    rest = None
    if len(ranges) > 1:
        fd, rest = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=folder)
        os.close(fd)
    else:
        meanwhile()
    try:
        helper = workers.beside(_write_range_file, src, rest, gz, plan, special, ranges[1], in_excerpt) \
            if rest else nullcontext()
        with helper as later:
            with _member(raw_out, gz) as out:
                out.write(head)
                wrote, parts = _write_events(src, out, plan, special, *ranges[0], in_excerpt)
            if later is not None:
                meanwhile()
                # the helper's events, each after ",\n": appended as they are written, where this range
                # wrote any (else without its first separator, once it is done)
                appending = _Appending(rest, raw_out, later.done) if wrote else None
                try:
                    first_written(parts)
                finally:
                    if appending is not None:
                        appending.finish()
                _, parts_rest, lead = later.result()
                if not wrote:
                    _append_without(rest, raw_out, lead)
                parts += parts_rest
        with _member(raw_out, gz) as out:
            out.write(b"\n]}\n")
    finally:
        if rest is not None:
            Path(rest).unlink(missing_ok=True)
    return parts


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d(a, b)`` by one sort: numpy 2's union1d hashes first, and took 17 times as long on the
    positions of a gigabyte's edits."""
    both = np.concatenate((a, b))
    both.sort()
    return both[np.concatenate(([True], both[1:] != both[:-1]))] if len(both) else both


def _write_range_file(src: Path, path: str, gz: bool, plan: EditPlan, special: _Special, byte_range,
                      in_excerpt) -> tuple:
    """In the forked helper: one range's events to ``path``, a file of its own (``_Continuation``). Returns
    (whether any was written, the excerpt's events among them, ``_Continuation.lead``)."""
    with open(path, "wb") as raw:
        out = _Continuation(raw, gz)
        try:
            wrote, parts = _write_events(src, out, plan, special, *byte_range, in_excerpt)
        finally:
            out.close()
        return wrote, parts, out.lead


class _Continuation:
    """A helper's file of events that follow the first range's as they are: ``",\n"`` before its first
    bytes, in a gzip member of its own where the copy is gzipped (the events in the next), so that it can be
    left out (``lead``: its length in the file); nothing at all while nothing is written."""

    def __init__(self, raw, gz: bool) -> None:
        self.raw, self.gz = raw, gz
        self.out = None
        self.lead = 0

    def write(self, data: bytes) -> None:
        if self.out is None:
            with _member(self.raw, self.gz) as first:
                first.write(b",\n")
            self.lead = self.raw.tell()
            self.out = _member(self.raw, self.gz)
        self.out.write(data)

    def close(self) -> None:
        if self.out is not None:
            self.out.__exit__(None, None, None)


def _append_growing(path: str, raw_out, done: Callable[[], bool]) -> None:
    """The file at ``path``, which a helper is writing, appended to ``raw_out`` as it grows, until ``done()``
    says the helper has finished (then to its end)."""
    raw_out.flush()
    with open(path, "rb") as f:
        while True:
            finished = done()  # asked first: what the helper wrote before it finished is then all there
            copy_rest(f, raw_out)
            if finished:
                return
            time.sleep(GROWING_POLL_S)


GROWING_POLL_S = 0.01


class _Appending(threading.Thread):
    """``_append_growing`` in a thread, while this process does other work (the copy itself is the
    kernel's: the thread holds the interpreter only between its calls); ``finish()`` waits for it and raises
    its error."""

    def __init__(self, path: str, raw_out, done: Callable[[], bool]) -> None:
        super().__init__(name="stepscope-append", daemon=True)
        self.args_ = (path, raw_out, done)
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            _append_growing(*self.args_)
        except BaseException as e:  # raised in the caller's thread by finish()
            self.error = e

    def finish(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


def _append_without(path: str, raw_out, lead: int) -> None:
    """The helper's file appended to ``raw_out`` without its first separator (``lead`` bytes: a plain file's
    ",\n", or the gzip member that holds it), where the first range wrote no event."""
    raw_out.flush()
    with open(path, "rb") as f:
        f.seek(lead)
        copy_rest(f, raw_out)


class _Entries:
    """A piece of the events array: its text, and where each entry lies in it (``starts``, ``ends``)."""

    __slots__ = ("text", "starts", "ends")

    def __init__(self, text, starts: np.ndarray, ends: np.ndarray) -> None:
        self.text, self.starts, self.ends = text, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def joined(cls, raws: list) -> _Entries:
        """Entries that msgspec (or Python's json, ``_raws``) split apart, joined by ",\n" as the copy joins
        them."""
        sizes = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
        ends = np.cumsum(sizes + 2) - 2
        return cls(b",\n".join(raws), ends - sizes, ends)


def _entries(text) -> _Entries:
    """The writer's ``decode``: where each entry of the piece lies, found by the compiled reader without
    decoding any (``fastread.spans``: the plan has already read the same file through a validating reader);
    else msgspec's split of the piece, which raises on a cut that fell inside a value (the stream then
    retries with more text)."""
    found = fastread.spans(text)
    return _Entries.joined(_RAW.decode(text)) if found is None else _Entries(text, *found)


def _lenient_entries(entries: list) -> _Entries:
    return _Entries.joined(_raws(entries))


_COMMA, _NEWLINE = ord(","), ord("\n")


@fastread.releasing  # the thread's parsers (tens of MB) not kept once a range is written
def _write_events(src: Path, out, plan: EditPlan, special: _Special, byte_range, first: int,
                  in_excerpt) -> tuple[bool, list]:
    """The copy's events of one byte range of ``src`` (whose first entry is entry ``first``), joined by
    ``",\n"``; ``special``: the entries not copied as they are. Returns (whether any was written, the
    excerpt's events among them). Consecutive entries copied as they are, that the original already separates
    by ``",\n"``, are written as the one stretch of its text that holds them (``fastread.joined``)."""
    keep, edits, positions = plan.keep, plan.edits, special.positions
    excerpt_parts: list = []
    wrote = False
    n = first
    with TraceStream(src, span=byte_range, lenient=_lenient_entries) as stream:
        for piece in stream.decode_events(_entries):  # the piece's text stays as it is: slices of it are kept
            text, starts, ends = piece.text, piece.starts, piece.ends
            m = len(piece)
            a, b = np.searchsorted(positions, (n, n + m))
            here = positions[a:b] - n
            # a stretch ends at each special entry, and where the original's separator is not ",\n"
            last = ends[:-1]
            u8 = np.frombuffer(text, dtype=np.uint8)
            apart = np.flatnonzero((starts[1:] - last != 2) | (u8[last] != _COMMA)
                                   | (u8[last + 1] != _NEWLINE))
            bounds = _sorted_union(np.concatenate((here, here + 1, apart + 1)),
                                   np.array([0, m], dtype=np.int64))
            lo, hi = bounds[:-1], bounds[1:]
            lo, hi = lo[hi > lo], hi[hi > lo]
            # each stretch's text; a special one (one entry) left out, or replaced by its edited text
            seg_start, seg_end = starts[lo], ends[hi - 1]
            special_here = np.zeros(m + 1, dtype=bool)
            special_here[here] = True
            lone = special_here[lo]
            taken = ~lone | keep[n + lo]
            ea, eb = np.searchsorted(special.rows, (n, n + m))
            edited = special.rows[ea:eb] - n
            new = _rewritten(text, starts, ends, edited, special.codes[ea:eb], special.texts, n, edits)
            at = np.searchsorted(lo, edited)  # each edited entry's stretch
            seg_start[at] = -1 - np.arange(len(edited))  # the stretch is that entry's new text
            if taken.any():
                out.write(fastread.joined(text, seg_start[taken], seg_end[taken], new, wrote))
                wrote = True
            if in_excerpt is not None:
                mine = np.flatnonzero(in_excerpt[n:n + m])
                by_row = dict(zip(edited.tolist(), new))
                excerpt_parts += [bytes(by_row[j]) if j in by_row else bytes(text[starts[j]:ends[j]])
                                  for j in mine.tolist()]
            n += m
    return wrote, excerpt_parts


class _Discard:
    """A sink for a copy's events that keeps none (``excerpt_events`` wants only the excerpt's)."""

    def write(self, data) -> None:
        pass


def excerpt_events(src: Path, plan: EditPlan, steps: int) -> list:
    """The events of the copy's excerpt of its first ``steps`` steps (those ``write_adapted_stream`` writes
    with ``excerpt``), made from ``src`` and its plan without writing the copy: only the pieces that hold an
    event of the excerpt are read (``excerpt_pieces``). For a copy of more than ``steps`` steps."""
    in_excerpt = _excerpt_rows(plan, steps)
    special = special_of(plan)
    parts: list = []
    for byte_range, first in excerpt_pieces(plan, steps):
        parts += _write_events(src, _Discard(), plan, special, byte_range, first, in_excerpt)[1]
    return parts


def excerpt_pieces(plan: EditPlan, steps: int) -> list[tuple[tuple[int, int | None] | None, int]]:
    """The byte ranges (each with the index of its first entry) of the pieces that hold the events of the
    copy's excerpt of its first ``steps`` steps (a trace's threads lie apart in the file, each in time order:
    the excerpt is the start of each), consecutive pieces one range; the whole file (None) where the plan has
    no pieces, none where the copy has ``steps`` steps or fewer (it is its own excerpt)."""
    if len(plan.step_starts) <= steps:
        return []
    if not plan.pieces:
        return [(None, 0)]
    at = np.array([a for a, _ in plan.pieces], dtype=np.int64)
    first = np.array([i for _, i in plan.pieces], dtype=np.int64)
    held = np.unique(np.searchsorted(first, np.flatnonzero(_excerpt_rows(plan, steps)), side="right") - 1)
    out = []
    for run in np.split(held, np.flatnonzero(np.diff(held) > 1) + 1) if len(held) else []:
        lo, hi = int(run[0]), int(run[-1]) + 1
        out.append(((0 if lo == 0 else int(at[lo]), int(at[hi]) if hi < len(at) else None), int(first[lo])))
    return out


def copy_file_atomic(src: Path, dst: Path) -> None:
    """Copy ``src`` byte for byte to ``dst``, which appears only once complete; a plain ``src`` is gzipped on the
    way when ``dst`` ends in .gz."""
    compress = _gzips(src, dst)

    def fill(out) -> None:
        if compress:
            with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZ_LEVEL) as z:
                shutil.copyfileobj(f, z, 8 << 20)
        else:
            copy_rest(f, out)

    with open(src, "rb") as f:
        _atomic(dst, fill)


def link_or_copy_atomic(src: Path, dst: Path) -> None:
    """``dst`` as another name of the file ``src`` (a hard link: the same bytes, none written again) where
    both are on one file system that allows it and no gzipping is asked for; else ``copy_file_atomic``. For
    an original that is kept as it is beside its copy (a trace is written once and never changed in place:
    the tools that rewrite one, gzip or an editor, write a new file, which the link does not follow)."""
    if not _gzips(src, dst) and Path(src).is_file():
        dst = Path(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.parent / f".tmp-{os.getpid()}-{time.monotonic_ns()}.partial"
        try:
            os.link(src, tmp)
        except OSError:  # another file system, or one without hard links: copied instead
            pass
        else:
            try:
                os.replace(tmp, dst)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            return
    copy_file_atomic(src, dst)


def _gzips(src: Path, dst: Path) -> bool:
    """Whether keeping ``src`` as ``dst`` gzips it on the way (a plain file kept as .gz)."""
    return Path(dst).name.endswith(".gz") and not Path(src).name.endswith(".gz")


def copy_rest(f, out) -> None:
    """The rest of ``f`` appended to ``out`` by copy_file_range(2), without passing through this process
    (a gigabyte in about a second); by reading and writing where the system cannot."""
    out.flush()
    try:
        while os.copy_file_range(f.fileno(), out.fileno(), 1 << 30):
            pass
    except (AttributeError, OSError):  # no such call here, or not between these files: what is left, by hand
        shutil.copyfileobj(f, out, 8 << 20)


def _atomic(dst: Path, fill, direct: bool = False) -> None:
    """Create ``dst`` through ``fill(binary file)`` under a temporary name that no plugin lists, then rename.
    ``direct``: written around the page cache where the file system allows (trace/direct_file.py)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=dst.parent)
    try:
        with writer_on(fd, str(dst), direct) as out:
            fill(out)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp creates 0600; these files are as readable as any other
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _excerpt_rows(plan: EditPlan, steps: int) -> np.ndarray:
    """The copy's entries in its excerpt (excerpt.py's rule): those before its step ``steps + 1`` begins and
    those without a time."""
    cutoff = plan.step_starts[steps] if len(plan.step_starts) > steps else np.inf
    return plan.keep & ~(plan.ts >= cutoff)  # NaN (no time) compares False

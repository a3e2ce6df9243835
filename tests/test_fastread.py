"""The compiled trace reader (trace/fastread.py, csrc/fastread.cpp) against msgspec's, the reference.

    pytest tests/test_fastread.py -q

Every trace of tests/data parses to the same ParsedTrace and the same report through both readers (the
compiled one, and ``STEPSCOPE_PURE_PYTHON=1``: msgspec alone); hypothesis-generated pieces of events, of
every JSON type in every field, collect to the same events or the same error; bad files (truncated, gzipped
and truncated, empty, nested deeply, a 2 GiB sparse file, the corrupt-trace cases) get the same one line and
exit code 2 from both; the fallback is taken, and said, when the extension is switched off or cannot be
imported. The slow test builds the extension with AddressSanitizer and feeds it hostile input.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zlib
from pathlib import Path

import msgspec
import numpy as np
import pytest
from few_by_default import few_by_default
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process import run_main
from stepscope.analysis import json_out
from stepscope.analysis.stream_collect import Collector, Event, decode, read
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.cli.analyze import main as analyze_main
from stepscope.plugin_copy.stream_plan import UNSET
from stepscope.report.front import analyze
from stepscope.trace import fastread
from stepscope.trace.errors import TraceError

ROOT = Path(__file__).resolve().parents[1]
UNSET_ID = "unset"  # an External id that the edit leaves as it is (stream_plan.UNSET)
DATA = ROOT / "tests" / "data"
TRACES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json", ".json.gz")) and "trace" in p.name)
RUNS = sorted({p.relative_to(DATA).parts[0] for p in TRACES})
SMALL = DATA / "eager_bs32"


@pytest.fixture
def pure(monkeypatch):
    """Within the test: msgspec alone, when called."""
    def switch(on: bool) -> None:
        if on:
            monkeypatch.setenv(fastread.PURE_ENV, "1")
        else:
            monkeypatch.delenv(fastread.PURE_ENV, raising=False)
    return switch


def both(pure, fn):
    """fn()'s result, or its exception's type and message, through msgspec and through the compiled reader."""
    out = []
    for on in (True, False):
        pure(on)
        try:
            out.append(fn())
        except Exception as e:  # noqa: BLE001 - compared, not hidden
            out.append((type(e).__name__, str(e)))
    return out


def test_the_extension_is_built_and_used(pure):
    """pip install -e . builds it where a C compiler is (this machine, CI); without, the fallback says why."""
    assert fastread._fastread is not None, fastread.why_not()
    pure(False)
    assert fastread.available() and fastread.why_not() is None
    assert "compiled reader" in fastread.describe()


def test_the_columns_are_read_from_the_msgspec_schema():
    """One table of fields: the structs msgspec decodes into. A field added there is read by the C reader."""
    reader = fastread.ColumnReader(Event)
    fields = msgspec.structs.fields(Event)
    top = [f.encode_name for f in fields if f.name != "args"]
    (args_type,) = [f.type for f in fields if f.name == "args"]
    inner = [f.encode_name for f in msgspec.structs.fields(fastread._struct_of(args_type))]
    assert [k.decode() for k in reader.event_keys] == [*top, "args"]
    assert [k.decode() for k in reader.args_keys] == inner and "Total Allocated" in inner
    cols = reader.read(b'[{"name": "a", "ts": 5, "args": {"Total Allocated": 7, "Device Type": 1}}, {"dur": 2.5}]')
    assert cols.strings == ["a"] and cols.n == 2
    assert cols.int("total_allocated").tolist() == [7, 0] and cols.real("dur")[1] == 2.5
    assert cols.type("ts").tolist() == [fastread.T_INT, fastread.T_MISSING]


class _MemoryArgs(msgspec.Struct):
    bytes_: object = msgspec.field(default=None, name="Bytes")
    addr: object = msgspec.field(default=None, name="Addr")


class _MemoryEvent(msgspec.Struct):
    name: object = None
    args: _MemoryArgs | None = None


def test_a_schema_with_more_fields_is_read_whole():
    """What a new field (e.g. the [memory] events' Bytes and Addr) needs: only its place in the schema."""
    cols = fastread.ColumnReader(_MemoryEvent).read(b'[{"name": "[memory]", "args": {"Bytes": -512, "Addr": 94000000000}}]')
    assert cols.int("bytes_").tolist() == [-512] and cols.int("addr").tolist() == [94000000000]


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_keys_are_told_apart_by_every_byte():
    """The reader compares a key's first eight bytes as one word, then the rest: keys that share those eight
    bytes, that are a prefix of another, empty, of exactly eight bytes or not ASCII are each found, and only
    where the whole key matches (the object keys simdjson hands the reader are in its padded string buffer)."""
    keys = (b"", b"a", b"ab", b"abcdefg", b"abcdefgh", b"abcdefghi", b"abcdefghij", b"Total Allocated",
            b"Total Allocatee", b"Total Reserved", b"\xc3\xa9t\xc3\xa9", b"args")
    event = {k.decode(): i for i, k in enumerate(keys[:-1])}
    event.update({"abcdefgX": 99, "abcdefghiX": 98, "Total": 97, "\u00e9": 96})  # near misses: not read
    raw = fastread._fastread.columns(json.dumps([event, {"ab": 5}]).encode(), keys, ())
    assert raw is not None
    _strings, types, ints, n = raw
    ints = np.frombuffer(ints, dtype=np.int64).reshape(len(keys), n)
    types = np.frombuffer(types, dtype=np.uint8).reshape(len(keys), n)
    assert ints[:-1, 0].tolist() == list(range(len(keys) - 1))
    assert types[:-1, 1].tolist() == [fastread.T_MISSING] * 2 + [fastread.T_INT] + [fastread.T_MISSING] * 8
    assert ints[2, 1] == 5


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_as_many_keys_as_the_reader_takes_are_each_found():
    """The keys are looked up by hash, so keys that share a bucket must each be found by probing: 63 keys
    (and ``args``: the most the reader takes) of every length up to 40, each read from its own position."""
    keys = tuple(f"k{i}{'x' * (i % 40)}".encode() for i in range(63)) + (b"args",)
    event = {k.decode(): i for i, k in enumerate(keys[:-1])}
    event.update({f"k{i}{'x' * (i % 40)}y": -1 for i in range(63)})  # one byte longer: never read
    raw = fastread._fastread.columns(json.dumps([event]).encode(), keys, ())
    assert raw is not None
    _strings, _types, ints, n = raw
    assert np.frombuffer(ints, dtype=np.int64).reshape(len(keys), n)[:-1, 0].tolist() == list(range(63))


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_a_number_reads_as_float64_whichever_json_type_it_is():
    """One int64 word holds an integer, a string's index or a real's bits; ``real`` gives the numbers as
    float64 (an integer rounded as Python's float() rounds it) and 0 where the value is no number."""
    from stepscope.trace.schema import Event

    cols = fastread.ColumnReader(Event).read(
        b'[{"ts": 1.5, "dur": 9007199254740993}, {"ts": "x", "dur": true}, {"ts": -0.0, "dur": null}, {},'
        b' {"ts": 1e300, "dur": -7}]')
    ts, dur = cols.real("ts"), cols.real("dur")
    assert ts.tolist() == [1.5, 0.0, 0.0, 0.0, 1e300] and np.signbit(ts[2]) and not np.signbit(ts[1])
    assert dur.tolist() == [float(9007199254740993), 0.0, 0.0, 0.0, -7.0]
    assert cols.int("dur")[0] == 9007199254740993 and cols.strings[cols.int("ts")[1]] == "x"
    assert not ts.flags.writeable and cols.real("ts") is ts  # made once per field


@pytest.mark.parametrize("path", TRACES, ids=[str(p.relative_to(DATA)) for p in TRACES])
def test_every_trace_of_tests_data_parses_the_same(path, pure):
    ref, fast = both(pure, lambda: parse_trace_file(path, "w", "1"))
    assert fast == ref


# A report is made from the ParsedTrace that test_every_trace_of_tests_data_parses_the_same compares through both
# readers for every trace of tests/data. By default the door's whole report is compared on one trace of each
# kind: an eager GPU run, a CUDA graph, two gloo ranks, a data-bound run and a CPU-only Lightning run; the other
# runs (suite, holdout, host_bound and loops_h200 among them: many or large traces) in the slow run.
@pytest.mark.parametrize("run", few_by_default(RUNS, keep=["eager_bs32", "cuda_graph", "ddp_gloo", "slow_dataset",
                                                           "lightning_cpu"]))
def test_every_report_of_tests_data_is_the_same(run, pure):
    ref, fast = both(pure, lambda: json_out.dumps(analyze(DATA / run).to_dict()))
    assert fast == ref


def test_byte_ranges_parse_the_same(pure, tmp_path):
    """The multi-process path (parts > 1) reads its ranges with the same reader."""
    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    plain = tmp_path / path.name.removesuffix(".gz")
    with gzip.open(path, "rb") as f:
        plain.write_bytes(f.read())
    ref, fast = both(pure, lambda: parse_trace_file(plain, "w", "1", block=1 << 16, parts=2))
    assert fast == ref == parse_trace_file(plain, "w", "1")


def test_a_whole_trace_read_frees_the_threads_parser_and_a_later_read_makes_a_new_one(monkeypatch):
    """The parser's buffers (tens of MB) are kept between pieces, not through the analysis that follows."""
    from stepscope.trace import _fastread

    reader = fastread.ColumnReader(Event)
    events = [{"name": "a", "ts": 1}, {"name": "b", "ts": 2.5}]
    before = reader.read(json.dumps(events).encode())
    fastread.release()
    fastread.release()  # twice: nothing left to free
    after = reader.read(json.dumps(events).encode())  # a new parser
    assert after.strings == before.strings == ["a", "b"] and after.real("ts").tolist() == [1.0, 2.5]
    # each thread has its own parser, freed when the thread ends
    import threading

    got = []
    threads = [threading.Thread(target=lambda: got.append(reader.read(json.dumps(events).encode()).n))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [2, 2, 2, 2]
    calls = []
    real = _fastread.release
    monkeypatch.setattr(_fastread, "release", lambda: calls.append(1) or real())
    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    parse_trace_file(path, "w", "1")
    assert calls == [1]
    with pytest.raises(TraceError):
        parse_trace_file(Path(__file__), "w", "1")  # not a trace: freed all the same
    assert calls == [1, 1]


def _huge_kb(address: int, size: int) -> int:
    """AnonHugePages (kB) of this process's mappings that overlap [address, address + size) (/proc/self/smaps;
    an advised stretch is a mapping of its own)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms ..."
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start < address + size and address < end
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1])
    return total


def test_large_buffers_ask_for_huge_pages_as_numpys_do():
    """The read's buffers (empty) and a piece's columns ask for transparent huge pages before they are first
    written, as numpy does for its large arrays: in 4 KiB pages, each first write to a page is a page fault.
    Where the kernel gives them only on request ("madvise"), a buffer gets them exactly when a numpy array of
    its size does."""
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not setting.exists() or "[madvise]" not in setting.read_text():
        pytest.skip("transparent huge pages are not given on request on this machine (always, never or none)")
    n = 64 << 20  # above glibc's largest mmap threshold (32 MiB): a mapping of its own, not reused memory
    control = np.empty(n, dtype=np.uint8)
    control[:] = 1
    if _huge_kb(control.ctypes.data, n) == 0:
        pytest.skip("the kernel gave numpy's array no huge page either (memory too fragmented)")
    from stepscope.trace import _fastread

    buf = _fastread.empty(n)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[:] = 1
    assert _huge_kb(view.ctypes.data, n) > 0
    # a piece whose columns are larger than that: 300,000 events in 16 slots of 8 bytes, 38 MB of ints
    events = b",".join([b'{"name":"k","ph":"X","ts":1,"dur":2,"args":{"External id":3}}'] * 300_000)
    cols = fastread.ColumnReader(Event).read(b"[" + events + b"]")
    assert cols.n == 300_000 and cols._ints.nbytes > n / 2
    assert _huge_kb(cols._ints.ctypes.data, cols._ints.nbytes) > 0


def test_a_helper_sends_its_pieces_as_columns_without_event_tuples(tmp_path):
    """A helper process of the ranged parse encodes each piece of columns straight from them
    (stream_columns.encoded), and what the parsing process rebuilds from that equals what the event tuples of
    msgspec's events give, collected and encoded; a piece the column path leaves to the per-event rules is
    no encoded piece."""
    from stepscope.analysis import stream_columns
    from stepscope.analysis.stream_ranges import HOST_LISTS, decode_into, encode, first_base
    from stepscope.trace.jsonstream import TraceStream

    plain = tmp_path / "t.json"
    plain.write_bytes(_real_trace())
    base = first_base(plain, 1 << 16)
    pieces = 0
    with TraceStream(plain, 1 << 16) as ts:
        for cols in ts.decode_events(read):
            assert type(cols) is fastread.Columns
            ref, fast = Collector(), Collector()
            ref.base = fast.base = base
            ref.add(decode(cols.text))
            ref_part = encode(ref)
            part = stream_columns.encoded(fast, cols)
            assert part is not None
            rebuilt = [Collector(), Collector()]
            for c, p in zip(rebuilt, (ref_part, part)):
                decode_into(c, p)
            for field in (*HOST_LISTS, "device", "steps", "python_calls", "python_builtins", "long_frames",
                          "model_spans", "shapes"):
                assert getattr(rebuilt[1], field) == getattr(rebuilt[0], field), field
            assert rebuilt[1].memory == rebuilt[0].memory
            pieces += 1
    assert pieces > 3
    odd = json.dumps([{"name": "x", "cat": "cpu_op", "ph": "X", "ts": 1, "dur": 1, "tid": 1.5}]).encode()
    c = Collector()
    c.base = 0.0
    assert stream_columns.encoded(c, read(odd)) is None  # a float tid: msgspec's events say what it is


# -- generated pieces: every JSON type in every field the reader maps ------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(-1000, 10**7),
    st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e4, 1e7),
    st.text(max_size=6), st.sampled_from(["X", "i", "B", "ProfilerStep#3", "[memory]", "kernel", "cpu_op",
                                          "cuda_runtime", "python_function", "user_annotation", "data",
                                          "enumerate(DataLoader)#_x", "<built-in method x>", "nn.Module: L",
                                          "gpu_memcpy", "Runtime", "ac2g"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3),
                                                                                          inner, max_size=3),
                       max_leaves=6)
_ARG_KEYS = ["device", "stream", "correlation", "Input Dims", "Device Type", "Total Allocated", "Bytes", "other"]
_CAT = st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "python_function", "user_annotation", "gpu_memcpy",
                        "cpu_instant_event", "Trace", "", "KERNEL"])
_NAME = st.sampled_from(["ProfilerStep#1", "ProfilerStep#12", "aten::mm", "[memory]", "data", "cudaLaunchKernel",
                         "<built-in method x>", "nn.Module: Linear", "enumerate(DataLoader)#_Iter.__next__",
                         "ProfilerStep#x", "void k<1>()", "naïve ☃"])


@st.composite
def _event(draw):
    plausible = draw(st.booleans())
    e = {}
    if plausible:  # close to a real event: the fast path's own ground
        e.update(name=draw(_NAME), cat=draw(_CAT), ph=draw(st.sampled_from(["X", "X", "i", "M"])),
                 ts=draw(st.integers(0, 10**6) | st.floats(0, 1e6)), dur=draw(st.integers(-5, 10**4) | st.floats(0, 1e4)),
                 tid=draw(st.integers(0, 9)), pid=draw(st.integers(0, 3)))
        if draw(st.booleans()):
            e["args"] = {k: draw(st.integers(0, 2**40)) for k in draw(st.lists(st.sampled_from(_ARG_KEYS[:6]),
                                                                               max_size=4))}
    for key in draw(st.lists(st.sampled_from(["name", "cat", "ph", "ts", "dur", "tid", "pid", "args", "x"]),
                             max_size=3)):
        if key == "args" and draw(st.booleans()):
            e[key] = draw(st.dictionaries(st.sampled_from(_ARG_KEYS), _VALUES, max_size=4))
        else:
            e[key] = draw(_VALUES)
    return e


def _collected(events_of, text: bytes, base: float | None):
    c = Collector("w.1")
    events = events_of(text)
    if base is None:
        if not c.find_base(events):
            c.base = 0.0  # as stream_parse does for a trace without a time
    else:
        c.base = base
    c.add(events)
    return (c.base, c.count, c.steps, c.ops, c.annotations, c.runtime, c.device, c.data_spans, c.memory,
            c.python_calls, c.python_builtins, c.long_frames, c.model_spans, c.module_frames, c.shapes)


def _both_collected(text: bytes, base: float | None) -> list:
    """``_collected`` of ``text`` through msgspec's events, then through the compiled reader's: each what the
    collector holds, or the error's type and message."""
    outcomes = []
    for events_of in (decode, read):
        try:
            outcomes.append(_collected(events_of, text, base))
        except (TraceError, ValueError, TypeError, OverflowError) as e:
            outcomes.append((type(e).__name__, str(e)))
    return outcomes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event(), max_size=8), st.sampled_from([None, 0.0, 17.0]))
def test_generated_pieces_collect_the_same(events, base):
    text = json.dumps(events).encode()
    reference, fast = _both_collected(text, base)
    assert fast == reference


def _object_text(members: list[tuple[str, str]]) -> str:
    """A JSON object of (key, value's JSON text) members, keys possibly repeated (json.dumps never repeats one)."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members) + "}"


@st.composite
def _event_with_repeats(draw):
    """Two generated events' members in one object, in any order, so that keys repeat: "args" among them, and
    sometimes an "args" object whose own keys repeat."""
    first, second = draw(_event()), draw(_event())
    members = [(k, json.dumps(v)) for k, v in [*first.items(), *second.items()]]
    a, b = first.get("args"), second.get("args")
    if isinstance(a, dict) and isinstance(b, dict) and draw(st.booleans()):
        members.append(("args", _object_text([(k, json.dumps(v)) for k, v in [*a.items(), *b.items()]])))
    return _object_text(draw(st.permutations(members)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event_with_repeats(), max_size=6), st.sampled_from([None, 0.0, 17.0]))
def test_keys_given_twice_collect_the_same(events, base):
    """A key given twice takes its last value through both readers: a later "args" replaces everything an
    earlier one gave (the compiled reader forgets those slots), and a key repeated inside args takes its last."""
    text = ("[" + ", ".join(events) + "]").encode()
    reference, fast = _both_collected(text, base)
    assert fast == reference


def _typed(value) -> tuple[int, object]:
    """What the compiled reader's columns hold for a decoded JSON value (of 64 bits, if an integer): its T_*
    type and its int64 word's meaning (an integer, a float, a string; None where the word means nothing)."""
    if value is None:
        return fastread.T_NULL, None
    if isinstance(value, bool):
        return (fastread.T_TRUE if value else fastread.T_FALSE), None
    if isinstance(value, int):
        return (fastread.T_INT, value) if value < 2**63 else (fastread.T_OTHER, None)
    if isinstance(value, float):
        return fastread.T_REAL, value
    if isinstance(value, str):
        return fastread.T_STR, value
    return (fastread.T_OBJECT if isinstance(value, _Pairs) else fastread.T_ARRAY), None


class _Pairs(list):
    """A decoded JSON object as its (key, value) members in order, repeats kept."""


def _in_64_bits(value) -> bool:
    """Whether every integer in ``value`` fits in 64 bits (signed, or unsigned above int64), as simdjson needs
    of the whole piece."""
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**64
    return all(_in_64_bits(v) for v in (value if not isinstance(value, _Pairs) else (v for _, v in value)))


def _expected_columns(text: bytes, event_keys: tuple, args_keys: tuple) -> list | None:
    """Per event, per slot, ``_typed`` of its key's last value in the event (args' keys: in its last "args"),
    T_MISSING where absent, as Python's json decodes them; None where the reader refuses the piece: an entry
    that is no object, any "args" that is neither an object nor null, an integer that 64 bits do not hold."""
    entries = json.loads(text, object_pairs_hook=_Pairs)
    if not _in_64_bits(entries) or not all(isinstance(e, _Pairs) for e in entries):
        return None
    out = []
    for pairs in entries:
        if any(k == "args" and v is not None and not isinstance(v, _Pairs) for k, v in pairs):
            return None
        e = dict(pairs)  # the last value of each key
        args = dict(e["args"]) if isinstance(e.get("args"), _Pairs) else e.get("args", ...)
        row = [(fastread.T_MISSING, None) if k.decode() not in e else _typed(e[k.decode()]) for k in event_keys[:-1]]
        row.append((fastread.T_MISSING, None) if args is ... else (fastread.T_NULL if args is None else
                                                                   fastread.T_OBJECT, None))
        row += [(fastread.T_MISSING, None) if not isinstance(args, dict) or k.decode() not in args
                else _typed(args[k.decode()]) for k in args_keys]
        out.append(row)
    return out


def _read_columns(text: bytes, event_keys: tuple, args_keys: tuple) -> list | None:
    """The compiled reader's columns of ``text`` in ``_expected_columns``' form."""
    raw = fastread._fastread.columns(text, event_keys, args_keys)
    if raw is None:
        return None
    strings, types, ints, n = raw
    slots = len(event_keys) + len(args_keys)
    types = np.frombuffer(types, dtype=np.uint8).reshape(slots, n)
    ints = np.frombuffer(ints, dtype=np.int64).reshape(slots, n)
    meaning = {fastread.T_INT: int, fastread.T_STR: lambda v: strings[v],
               fastread.T_REAL: lambda v: float(np.int64(v).view(np.float64))}
    return [[(int(types[s, i]), meaning[types[s, i]](int(ints[s, i])) if types[s, i] in meaning else None)
             for s in range(slots)] for i in range(n)]


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event_with_repeats(), max_size=6))
def test_generated_events_read_as_their_last_keys(events):
    """Each slot of the columns holds the type and value of its key's last occurrence in the event (and in its
    last "args"), as Python's json decodes them, or the reader refuses the piece where the decoding says it
    must."""
    from stepscope.trace.schema import Event as Schema

    reader = fastread.ColumnReader(Schema)
    text = ("[" + ", ".join(events) + "]").encode()
    expected = _expected_columns(text, reader.event_keys, reader.args_keys)
    assert _read_columns(text, reader.event_keys, reader.args_keys) == expected


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_a_later_args_replaces_an_earlier_one_in_the_columns():
    """The columns themselves: what an earlier "args" set is missing after a later one (null included), as
    msgspec decodes it."""
    from stepscope.trace.schema import Event as Schema

    text = (b'[{"args": {"device": 1, "stream": 7}, "args": {"device": 2}}, {"args": {"device": 3}, "args": null},'
            b' {"args": null, "args": {"stream": 4}}, {"args": {"stream": 5, "stream": 6}}, {"args": {"device": 8}}]')
    cols = fastread.ColumnReader(Schema).read(text)
    decoded = msgspec.json.decode(text, type=list[Schema])
    assert [None if e.args is None else e.args.device for e in decoded] == [2, None, msgspec.UNSET, msgspec.UNSET, 8]
    assert cols.type("args").tolist() == [fastread.T_OBJECT, fastread.T_NULL, fastread.T_OBJECT,
                                          fastread.T_OBJECT, fastread.T_OBJECT]
    assert cols.type("device").tolist() == [fastread.T_INT, fastread.T_MISSING, fastread.T_MISSING,
                                            fastread.T_MISSING, fastread.T_INT]
    assert cols.type("stream").tolist() == [fastread.T_MISSING, fastread.T_MISSING, fastread.T_INT,
                                            fastread.T_INT, fastread.T_MISSING]
    assert cols.int("device")[[0, 4]].tolist() == [2, 8] and cols.int("stream")[[2, 3]].tolist() == [4, 6]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_never_crash_the_reader(data):
    reader = fastread.ColumnReader(Event)
    for text in (data, b"[" + data, b'[{"name": ' + data + b"}]"):
        cols = reader.read(text)
        if cols is not None:  # then msgspec reads it too, as the same kind of thing
            assert len(decode(text)) == cols.n


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _spanned(text) -> list[bytes] | None:
    found = fastread.spans(text)
    return None if found is None else [bytes(text[a:b]) for a, b in zip(*found)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes_never_crash_the_entry_finder(data):
    for text in (data, b"[" + data, b'[{"name": ' + data + b"}]", b"[" + data + b"]"):
        got = _spanned(text)
        try:
            raws = [bytes(r) for r in _RAWS.decode(text)]
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        assert got == raws  # what msgspec splits, the entry finder finds where msgspec does


_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(_json_value, max_size=8), st.sampled_from([(",", ":"), (", ", ": "), (" ,\n ", " : ")]),
       st.data())
def test_the_entries_of_an_array_are_found_where_msgspec_splits_it_and_a_cut_inside_one_is_refused(
        entries, separators, data):
    text = json.dumps(entries, separators=separators).encode()
    assert _spanned(text) == [bytes(r) for r in _RAWS.decode(text)]
    # a piece cut after a "}" that closes no entry (inside a string or a nested value), as jsonstream's
    # candidate cuts can fall, is never split: the writer's stream then retries with more text
    closes = [i for i in range(1, len(text)) if text[i - 1:i] == b"}"]
    if closes:
        cut = data.draw(st.sampled_from(closes))
        piece = text[:cut] + b"]"
        try:
            raws = [bytes(r) for r in _RAWS.decode(piece)]
        except msgspec.DecodeError:
            assert _spanned(piece) is None
        else:
            assert _spanned(piece) == raws


# -- splice: edited entries rewritten where they lie ------------------------------------------------------------

_KEYS = st.sampled_from(["ph", "cat", "name", "ts", "args", "pid"]) | st.text(max_size=4)
_ARGS_KEYS = st.sampled_from(["Call stack", "External id", "external id", "correlation"]) | st.text(max_size=4)
_entry = st.dictionaries(_KEYS, _json_value, max_size=6).flatmap(
    lambda e: st.one_of(st.just(e), st.dictionaries(_ARGS_KEYS, _json_value, max_size=4).map(
        lambda a: {**e, "args": a})))
_set = st.none() | st.text(max_size=6)


def _spliced(entries: list, edits: list, separators=(",", ":")) -> list:
    """fastread.splice of each entry of the array of ``entries`` with its edit (stream_write's codes)."""
    from stepscope.plugin_copy.stream_write import _Values

    text = json.dumps(entries, separators=separators).encode()
    starts, ends = fastread.spans(text)
    values = _Values()
    codes = np.array([values.codes(e) for e in edits], dtype=np.int64).reshape(len(edits), 4)
    return fastread.splice(text, starts, ends, values.texts, codes)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_entry, _set, _set, st.sampled_from([UNSET_ID]) | st.none() | st.integers()
                          | st.text(max_size=3), _set), min_size=1, max_size=6),
       st.sampled_from([(",", ":"), (", ", ": "), (" ,\n ", " : ")]))
def test_an_entry_spliced_in_place_is_the_decoded_entry_with_its_edit(rows, separators):
    """Each member set where it lies (replaced, or added at the end of the event or of its args) gives the
    JSON value that apply_edit gives on the decoded event, whatever else it holds; only an External id or a
    call stack to set where args is missing or no object is left to the decoded rewrite."""
    from stepscope.plugin_copy.stream_plan import Edit
    from stepscope.plugin_copy.stream_write import apply_edit

    entries = [e for e, *_ in rows]
    edits = [Edit(name=n, cat=c, external_id=UNSET if x is UNSET_ID else x, call_stack=k)
             for _, n, c, x, k in rows]
    got = _spliced(entries, edits, separators)
    for entry, edit, new in zip(entries, edits, got, strict=True):
        needs_args = edit.external_id is not UNSET or edit.call_stack is not None
        if needs_args and not isinstance(entry.get("args"), dict):
            assert new is None
            continue
        assert new is not None
        assert json.loads(new) == apply_edit(json.loads(json.dumps(entry)), edit)


def test_an_entry_that_cannot_be_laid_out_is_left_to_the_decoded_rewrite():
    """Keys given twice (json keeps the last), an entry that is no object, args that is no object: None."""
    from stepscope.plugin_copy.stream_plan import Edit
    from stepscope.plugin_copy.stream_write import _Values

    text = (b'[{"cat": "a", "cat": "b"}, {"args": {"Call stack": "x", "Call stack": "y"}}, 3, '
            b'{"args": [1]}, {"c\\u0061t": "cuda_runtime", "args": {}}, {}]')
    starts, ends = fastread.spans(text)
    values = _Values()
    edits = [Edit(cat="runtime"), Edit(call_stack="s"), Edit(cat="runtime"), Edit(call_stack="s"),
             Edit(cat="runtime", call_stack="s"), Edit(name="n", cat="runtime")]
    codes = np.array([values.codes(e) for e in edits], dtype=np.int64)
    got = fastread.splice(text, starts, ends, values.texts, codes)
    assert got[:4] == [None] * 4
    # an escaped key is the key it stands for; members added to an empty object take no comma
    assert json.loads(got[4]) == {"cat": "runtime", "args": {"Call stack": "s"}}
    assert got[5] == b'{"name":"n","cat":"runtime"}'


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=8),
       st.lists(st.binary(max_size=5), max_size=4), st.booleans(), st.data())
def test_stretches_and_new_texts_are_joined_as_bytes_join_joins_them(text, bounds, news, lead, data):
    """fastread.joined (the copy's writer: a piece's stretches of the original and its edited entries) is
    the Python join of the same segments, whether compiled or not; a bound outside the text is refused."""
    if not fastread.available():
        pytest.skip(fastread.why_not())
    segs = [(a, b) if data.draw(st.booleans()) or not news else (-1 - data.draw(st.integers(0, len(news) - 1)), 0)
            for a, b in bounds]
    starts = np.array([a for a, _ in segs], dtype=np.int64)
    ends = np.array([b for _, b in segs], dtype=np.int64)
    inside = all(a < 0 or a <= b <= len(text) for a, b in segs)
    want = (b",\n" if lead and segs else b"") + b",\n".join(text[a:b] if a >= 0 else news[-1 - a] for a, b in segs)
    if not inside:
        with pytest.raises(ValueError, match="outside the text"):
            fastread.joined(text, starts, ends, news, lead)
        return
    assert fastread.joined(text, starts, ends, news, lead) == want
    assert fastread.joined(memoryview(bytearray(text)), starts, ends, news, lead) == want


def test_splicing_needs_the_extension(monkeypatch):
    monkeypatch.setenv(fastread.PURE_ENV, "1")
    assert fastread.splice(b'[{"a": 1}]', np.array([1]), np.array([9]), [], np.full((1, 4), -1)) is None


def test_the_entry_finder_needs_the_extension(monkeypatch):
    monkeypatch.setenv(fastread.PURE_ENV, "1")
    assert fastread.spans(b'[{"a": 1}]') is None


def test_deep_nesting_and_huge_numbers_are_left_to_msgspec():
    reader = fastread.ColumnReader(Event)
    assert reader.read(b'[{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]") is None
    assert reader.read(b'[{"args": {"y": ' + b"[" * 5000 + b"]" * 5000 + b"}}]") is None
    assert reader.read(b'[{"ts": NaN}]') is None and reader.read(b'[{"ts": 1}, 3]') is None
    # a number that no 64-bit integer or double holds: simdjson refuses the piece, msgspec reads it
    assert reader.read(b'[{"ts": 123456789012345678901234567890}]') is None
    assert reader.read(b'[{"dur": 1e999}]') is None
    cols = reader.read(b'[{"ts": 18446744073709551615, "dur": -0, "tid": -9223372036854775808}]')
    assert cols.type("ts")[0] == fastread.T_OTHER  # above int64, within uint64
    assert cols.type("dur")[0] == fastread.T_INT and cols.int("dur")[0] == 0  # msgspec's -0 is the int 0
    assert cols.type("tid")[0] == fastread.T_INT and cols.int("tid")[0] == -(2**63)
    # a leading byte-order mark, which simdjson would skip, is msgspec's to refuse
    assert reader.read(b'\xef\xbb\xbf[{"ts": 1}]') is None and reader.read(b'[{"ts": 1}]') is not None


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_nesting_is_bounded_by_the_parser_at_the_same_depth_read_or_not():
    """simdjson's own depth limit bounds every value, read or skipped: a value of an event holding 200
    nested containers is read, one of 201 is left to msgspec (within ``args``, one level less)."""
    reader = fastread.ColumnReader(Event)

    def nested(k: int) -> bytes:
        return b"[" * k + b"]" * k

    for key in (b"name", b"x"):  # a field read, a field not read
        assert reader.read(b'[{"%s": %s}]' % (key, nested(200))) is not None
        assert reader.read(b'[{"%s": %s}]' % (key, nested(201))) is None
    for key in (b"Input Dims", b"y"):
        assert reader.read(b'[{"args": {"%s": %s}}]' % (key, nested(199))) is not None
        assert reader.read(b'[{"args": {"%s": %s}}]' % (key, nested(200))) is None
    assert decode(b'[{"x": ' + nested(201) + b"}]")  # what msgspec then reads


@pytest.mark.skipif(not fastread.available(), reason="needs the compiled reader")
def test_shared_ints_are_the_lists_of_the_arrays_with_one_object_per_value(monkeypatch):
    """fastread.as_list: an int64 array's tolist(), equal values one object (a column of threads); without the
    extension's function, tolist() itself."""
    from stepscope.trace import _fastread

    rng = np.random.default_rng(1)
    edges = np.array([2 ** 63 - 1, -2 ** 63, 0, -1, 2 ** 63 - 1], dtype=np.int64)
    for values in (np.array([], dtype=np.int64), np.array([7, 7, 7], dtype=np.int64), edges,
                   rng.integers(10 ** 6, 10 ** 6 + 5, 1000),
                   rng.integers(-2 ** 63, 2 ** 63 - 1, 500, dtype=np.int64),
                   np.arange(300)[::-3]):
        got = fastread.as_list(values)
        assert got == values.tolist() and all(type(v) is int for v in got)
    few = fastread.as_list(rng.integers(10 ** 6, 10 ** 6 + 5, 1000))
    assert len({id(v) for v in few}) <= 5  # five threads, five objects
    assert fastread.as_list([1, "main"]) == [1, "main"]  # a list (threads of any kind) as it is
    with pytest.raises(ValueError):
        _fastread.shared_ints(b"\x00" * 12)  # one and a half int64s
    monkeypatch.setattr(fastread, "_fastread", None)
    assert fastread.as_list(np.array([3, 3], dtype=np.int64)) == [3, 3]


def test_a_parsed_traces_threads_are_a_few_objects():
    """The threads of a parse read as columns are shared objects, not one int per event."""
    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    parsed = parse_trace_file(path, "w", "s", block=1 << 16)
    tids = parsed.ops.tids
    assert len(tids) > 1000 and len({id(t) for t in tids}) < len(tids) // 20


def test_pieces_are_parsed_where_they_lie():
    """jsonstream leaves the reader's padding after each piece it cuts, so that the piece is parsed in its
    buffer instead of being copied first; the columns are those of the piece copied."""
    from stepscope.trace import _fastread
    from stepscope.trace.jsonstream import PADDING, TraceStream

    assert _fastread.PADDING <= PADDING
    reader = fastread.ColumnReader(Event)
    seen = []

    def check(text):
        seen.append(_fastread.in_place(text))
        cols, copied = reader.read(text), reader.read(bytes(text))
        assert cols.strings == copied.strings and cols.n == copied.n
        assert np.array_equal(cols._types, copied._types) and np.array_equal(cols._ints, copied._ints)
        return []

    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    with TraceStream(path, block=1 << 16) as ts:
        for _ in ts.decode_events(check):
            pass
    assert len(seen) > 10 and all(seen[:-1]) and not seen[-1]  # the last: the array's tail, decoded apart
    # whatever the bytes after it, a piece parsed in place gives what its copy gives, or is refused alike
    rng = np.random.default_rng(0)
    piece = _real_trace()
    piece = piece[piece.index(b"[", piece.index(b"traceEvents")):][:20_000]
    for k in range(300):
        text = bytearray(piece[:int(rng.integers(1, len(piece)))])
        for at in rng.integers(0, len(text), int(rng.integers(0, 3))):
            text[at] = rng.choice(list(b'{}[]",:0123456789.eE-+\\\x00'))
        text += rng.choice([b"", b"]", b"}]"])
        for pad in (b"0" * 64, b'"\\' * 32, rng.bytes(64), b"}]" * 32):
            view = memoryview(bytearray(bytes(text) + pad))[:len(text)]
            assert _fastread.in_place(view)
            got, copied = _fastread.columns(view, reader.event_keys, reader.args_keys), \
                _fastread.columns(bytes(text), reader.event_keys, reader.args_keys)
            assert got == copied, (k, pad)
    buf = bytearray(b'[{"ts": 1}]' + b" " * 64)
    view = memoryview(buf)
    assert _fastread.in_place(view[:11]) and not _fastread.in_place(view[:12])
    assert not _fastread.in_place(bytes(buf)) and not _fastread.in_place(view[1:])


# -- bad files: the same one line and exit code 2 through both readers ------------------------------------------

def _cli(run: Path, pure_python: bool, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != fastread.PURE_ENV}
    if pure_python:
        env[fastread.PURE_ENV] = "1"
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "analyze.py"), str(run), "--json", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def _real_trace() -> bytes:
    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    with gzip.open(path, "rb") as f:
        return f.read()


NAME = "w.1.pt.trace.json"


def _truncated(run: Path) -> None:
    text = _real_trace()
    (run / NAME).write_bytes(text[: len(text) * 2 // 3])


def _gz_truncated(run: Path) -> None:
    data = gzip.compress(_real_trace(), 1)
    (run / (NAME + ".gz")).write_bytes(data[: len(data) // 2])


def _empty(run: Path) -> None:
    (run / NAME).write_bytes(b"")


def _deep(run: Path) -> None:
    text = _real_trace()
    at = text.index(b'"args": {') + len(b'"args": {')
    (run / NAME).write_bytes(text[:at] + b'"deep": ' + b"[" * 50_000 + b"]" * 50_000 + b", " + text[at:])


def _sparse_nul_tail(run: Path) -> None:
    """2 GiB: the start of a trace, then NUL bytes (a sparse file: no disk blocks)."""
    with open(run / NAME, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(2 << 30)


def _wrong_types(run: Path) -> None:
    text = _real_trace().replace(b'"tid": ', b'"tid": "', 1)
    (run / NAME).write_bytes(text)


BAD = {"truncated": _truncated, "gz_truncated": _gz_truncated, "empty": _empty, "deep": _deep,
       "wrong_types": _wrong_types}


def _main(run: Path, pure_python: bool, monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """The command's main() in this process, through msgspec alone or the compiled reader."""
    with monkeypatch.context() as m:
        if pure_python:
            m.setenv(fastread.PURE_ENV, "1")
        else:
            m.delenv(fastread.PURE_ENV, raising=False)
        return run_main(analyze_main, [run, "--json", *args], capsys, prog="analyze.py")


@pytest.mark.parametrize("case", BAD)
def test_bad_files_get_the_same_line_and_exit_2_through_both_readers(case, tmp_path, monkeypatch, capsys):
    """main() in this process; the subprocess test below holds one case in real processes."""
    run = tmp_path / "run"
    run.mkdir()
    BAD[case](run)
    ref, fast = _main(run, True, monkeypatch, capsys), _main(run, False, monkeypatch, capsys)
    assert fast == ref
    code, _, err = fast
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: ")


@pytest.mark.parametrize("case", BAD)
def test_bad_files_exported_in_halves_get_the_analysis_line_and_nothing_is_written(case, tmp_path, monkeypatch,
                                                                                    capsys):
    """The export's one read for both, in halves at once (every file counts as large here), says of a bad
    file what the analysis alone says, through either reader, and writes nothing."""
    from stepscope.trace import workers as policy

    run = tmp_path / "run"
    run.mkdir()
    BAD[case](run)
    alone = _main(run, False, monkeypatch, capsys)
    monkeypatch.setattr(policy, "SPLIT_FROM", 0)
    for pure_python in (False, True):
        out = tmp_path / f"out-{pure_python}"
        code, _, err = _main(run, pure_python, monkeypatch, capsys, "--export-tensorboard", str(out))
        assert (code, err) == (2, alone[2]) and not out.exists()


# Each case starts the command twice; every case's line and exit code are compared in-process above, and the
# others take this one's path out of the process (slow).
@pytest.mark.parametrize("case", few_by_default(BAD, keep=["truncated"]))
def test_bad_files_get_the_same_line_and_exit_2_through_both_commands(case, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    BAD[case](run)
    ref, fast = _cli(run, True), _cli(run, False)
    assert (fast.returncode, fast.stdout, fast.stderr) == (ref.returncode, ref.stdout, ref.stderr)
    assert fast.returncode == 2 and len(fast.stderr.splitlines()) == 1 and fast.stderr.startswith("error: ")


@pytest.mark.slow
def test_a_2gib_sparse_file_ending_in_nul_fails_fast_and_the_same(tmp_path):
    """Both readers cut the file into pieces with jsonstream.py, whose search for a cut in a block of NUL
    bytes is what bounds this case's time (slow: it takes minutes where that search rescans)."""
    run = tmp_path / "run"
    run.mkdir()
    _sparse_nul_tail(run)
    ref, fast = _cli(run, True), _cli(run, False)
    assert (fast.returncode, fast.stderr) == (ref.returncode, ref.stderr)
    assert fast.returncode == 2 and len(fast.stderr.splitlines()) == 1


def test_corrupt_trace_cases_read_the_same_through_both_readers(tmp_path, pure):
    """The reliability suite's cases (tests/test_corrupt_traces.py) give the same result through either."""
    from test_corrupt_traces import CASES
    for case, (build, _fragment, rlimit) in CASES.items():
        if rlimit is not None:  # the memory ceilings: covered by that suite under its limit
            continue
        run = tmp_path / case
        run.mkdir()
        build(run)
        ref, fast = both(pure, lambda run=run: json_out.dumps(analyze(run).to_dict()))
        assert fast == ref, case


# -- the fallback: taken, and said ------------------------------------------------------------------------------

def test_the_fallback_is_taken_and_said_when_switched_off(monkeypatch, capsys):
    """main() in this process (the test below runs the command in a process of its own)."""
    (fast_code, fast_out, fast_err), (ref_code, ref_out, ref_err) = (_main(SMALL, False, monkeypatch, capsys),
                                                                     _main(SMALL, True, monkeypatch, capsys))
    assert fast_code == ref_code == 0
    assert fast_out == ref_out
    assert "read with msgspec" not in fast_err
    assert f"{fastread.PURE_ENV} is set: traces are read with msgspec" in ref_err.splitlines()[0]


def test_the_fallback_is_taken_and_said_when_the_extension_cannot_be_imported(monkeypatch, capsys):
    """An import hook refuses the extension (as on a machine where it was never built)."""
    script = textwrap.dedent("""
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.endswith("._fastread"):
                    raise ImportError("no compiled reader here")
        sys.meta_path.insert(0, Refuse())
        from stepscope.trace import fastread
        assert fastread._fastread is None and not fastread.available(), fastread.why_not()
        from stepscope.cli.main import main
        sys.argv = ["stepscope", "analyze", sys.argv[1], "--json"]
        sys.exit(main())
    """)
    env = {k: v for k, v in os.environ.items() if k != fastread.PURE_ENV}
    p = subprocess.run([sys.executable, "-c", script, str(SMALL)], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=env)
    assert p.returncode == 0, p.stderr
    assert "the compiled trace reader is not built (ImportError: no compiled reader here)" in p.stderr
    assert p.stdout == _main(SMALL, False, monkeypatch, capsys)[1]


# -- AddressSanitizer -------------------------------------------------------------------------------------------

ASAN_DRIVER = """
import json, random, re, struct, sys
sys.path.insert(0, sys.argv[1])
import _fastread
keys, args = (b"name", b"cat", b"ph", b"ts", b"dur", b"tid", b"pid", b"args"), (b"device", b"stream",
              b"correlation", b"Input Dims", b"Device Type", b"Total Allocated")
base = open(sys.argv[2], "rb").read()
start = base.index(b"[", base.index(b"traceEvents"))
cut = re.compile(rb"\\}\\s*,\\s*\\{").search(base, start + 100000).start()
piece = base[start:cut + 1] + b"]"
rng = random.Random(0)
inputs = [b"", b"[", b"[{", b"[{}]", b"[" * 100000, b'[{"x": ' + b"[" * 100000, b'[{"ts": NaN}]', b"\\x00" * 1000,
          b'[{"name": "\\\\ud800"}]', b'[{"name": "\\xff\\xfe"}]', b'[{"ts": 1e999, "tid": 99999999999999999999999}]',
          piece, piece[:-2], piece.replace(b'"', b"'", 3)]
for _ in range(3000):
    b = bytearray(piece[: rng.randrange(len(piece))])
    for _ in range(rng.randrange(4)):
        if b:
            b[rng.randrange(len(b))] = rng.choice(b'{}[]",:0123456789.eE-+ntfa\\\\\\x00\\xff')
    inputs.append(bytes(b) + rng.choice([b"", b"]", b"}]"]))
values = [b'"runtime"', b"0", b'"a.py(1): f"']
read = 0
def tables(m):  # a piece's plan tables for m strings and "none", of any values
    return (bytes(rng.randrange(256) for _ in range(m + 1)), bytes(rng.randrange(2) for _ in range(m + 1)),
            bytes(rng.randrange(256) for _ in range(2 * m + 2)))
for k, text in enumerate(inputs):
    r = _fastread.columns(text, keys, args)
    read += r is not None
    if r is not None:  # the plan of what was read: tables of any values, too short ones, slots out of range
        strings, types, ints, n = r
        for m, slots in ((len(strings), (0, 1, 2, 3, 4)), (rng.randrange(len(strings) + 1), (0, 1, 2, 3, 4)),
                         (len(strings), (0, 1, 2, 3, 99)), (len(strings), (0, -1, 2, 3, 4))):
            try:
                _fastread.plan_rows(types, ints, n, slots, *tables(m), rng.randrange(-2, 3), rng.randrange(-2, 3),
                                    rng.uniform(-5, 5), 100.0, 1e15)
            except ValueError:
                assert m < len(strings) or slots != (0, 1, 2, 3, 4)
    r = _fastread.columns(memoryview(bytearray(text)), keys, args)
    s = _fastread.spans(text)
    for pad in (b" " * 64, b'9"' * 32, bytes(rng.randrange(256) for _ in range(64))):  # parsed in place
        view = memoryview(bytearray(text + pad))[:len(text)]
        assert _fastread.in_place(view)
        r = _fastread.columns(view, keys, args)
        assert _fastread.spans(view) == s
    if k % 97 == 0:
        _fastread.release()  # the parser freed now and then, and made anew by the next call
    if s is not None:  # the entries found, with members set
        n = s[1]
        codes = struct.pack(f"{4 * n}q", *(rng.randrange(-1, 3) for _ in range(4 * n)))
        _fastread.splice(text, s[0], values, codes)
    a = rng.randrange(len(text) + 1)  # and any bytes in bounds, as an entry
    _fastread.splice(text, struct.pack("2q", a, rng.randrange(a, len(text) + 1)), values,
                     struct.pack("4q", 0, 1, 2, -1))
    try:  # any bytes as int64s: whole words read, a part word refused
        _fastread.shared_ints(text)
    except ValueError:
        assert len(text) % 8
def q(n, hi):
    return struct.pack(f"{n}q", *(rng.randrange(-2, hi) for _ in range(n)))
def d(n):
    return struct.pack(f"{n}d", *(rng.choice([rng.uniform(-5, 5), float("nan"), float("inf")]) for _ in range(n)))
for _ in range(2000):  # the frames open at each operator, of frames and operators in any order, NaN among them
    nf, no = rng.randrange(40), rng.randrange(40)
    chain, parent, name = _fastread.open_frames(q(nf, 4), d(nf), d(nf), q(nf, 9), bytes(rng.randrange(2)
                                                for _ in range(nf)), q(no, 4), d(no))
    assert len(chain) == 8 * no and len(parent) == len(name)
    try:
        _fastread.open_frames(q(nf + 1, 4), d(nf), d(nf), q(nf, 9), bytes(nf), q(no, 4), d(no))
        raise AssertionError("lengths that differ were taken")
    except ValueError:
        pass
for _ in range(2000):  # stretches of any text and new texts joined: any bounds, in or out of it
    text = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    k = rng.randrange(8)
    news = [bytes(rng.randrange(3)) for _ in range(rng.randrange(3))] + ([1] if rng.random() < 0.1 else [])
    starts = [rng.randrange(-4, len(text) + 3) for _ in range(k)]
    ends = [rng.randrange(-1, len(text) + 3) for _ in range(k)]
    try:
        out = _fastread.joined(text, struct.pack(f"{k}q", *starts), struct.pack(f"{k}q", *ends), news,
                               rng.random() < 0.5)
        assert isinstance(out, bytes)
    except ValueError:
        pass
_fastread.release()
print("ok", len(inputs), read)
"""


@pytest.mark.slow
def test_the_extension_is_clean_under_address_sanitizer(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.fail("no g++: the extension is built with it")
    libasan = subprocess.run([gxx, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    csrc = ROOT / "trainer" / "trace" / "csrc"
    so = tmp_path / ("_fastread" + sysconfig.get_config_var("EXT_SUFFIX"))
    # simdjson itself with AddressSanitizer at -O0 (UBSan on its 2 MB costs many CPU-minutes to compile);
    # stepscope's own code with both
    flags = ["-fPIC", "-g", "-fno-omit-frame-pointer", "-std=c++17", "-DSIMDJSON_EXCEPTIONS=0",
             f"-I{sysconfig.get_paths()['include']}", f"-I{csrc}"]
    objects = [tmp_path / "simdjson.o", tmp_path / "fastread.o"]
    for src, obj, extra in ((csrc / "simdjson" / "simdjson.cpp", objects[0], ["-O0", "-fsanitize=address"]),
                            (csrc / "fastread.cpp", objects[1], ["-O1", "-fsanitize=address,undefined"])):
        subprocess.run([gxx, "-c", *flags, *extra, str(src), "-o", str(obj)], check=True, timeout=1800)
    subprocess.run([gxx, "-shared", "-fsanitize=address,undefined", *map(str, objects), "-o", str(so)], check=True,
                   timeout=600)
    (path,) = [p for p in TRACES if p.is_relative_to(SMALL)]
    trace = tmp_path / "t.json"
    trace.write_bytes(_real_trace())
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    p = subprocess.run([sys.executable, "-c", ASAN_DRIVER, str(tmp_path), str(trace)], capture_output=True,
                       text=True, timeout=900, env=env)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stderr[-4000:]
    assert "ERROR: AddressSanitizer" not in p.stderr and "runtime error" not in p.stderr
    assert np.int64(p.stdout.split()[2]) > 0  # some of them were read whole


# -- gzip -------------------------------------------------------------------------------------------------------

def test_gzip_is_decompressed_by_isal_with_the_standard_librarys_bytes_and_errors(tmp_path):
    from stepscope.trace import gzopen
    assert gzopen.LIBRARY == "isal"  # a dependency on this platform (pyproject.toml)
    text = _real_trace()
    data = gzip.compress(text, 6)
    cases = {"whole": data, "truncated": data[: len(data) // 2], "corrupt": data[:40] + b"\xff" * 64 + data[104:],
             "not_gzip": text[:1000]}
    for case, blob in cases.items():
        path = tmp_path / f"{case}.json.gz"
        path.write_bytes(blob)
        outcomes = []
        for opener in (lambda p: gzip.open(p, "rb"), gzopen.open_gz):
            for whole in (_read_all, _readinto_all):  # the stream reads a .gz file with readinto
                try:
                    with opener(path) as f:
                        outcomes.append(whole(f))
                except (OSError, EOFError, zlib.error) as e:
                    outcomes.append(type(e).__name__ if not isinstance(e, OSError) else "OSError")
        assert outcomes[1:] == outcomes[:1] * 3, case
    assert outcomes[0] == "OSError"  # BadGzipFile


def _read_all(f) -> bytes:
    return b"".join(iter(lambda: f.read(1 << 20), b""))


def _readinto_all(f) -> bytes:
    out, buf = bytearray(), bytearray(100_003)
    while n := f.readinto(buf):
        out += buf[:n]
    return bytes(out)


@pytest.mark.parametrize("library", ["fast", "zlib"])
def test_a_gz_file_is_read_from_any_offset(tmp_path, monkeypatch, library):
    """What a helper parsing a .gz trace's second byte range reads: the decompressed bytes from its offset,
    forward, back (from the file's start again) and to the end; an offset past the end is an EOFError."""
    from stepscope.trace import gzopen
    if library == "zlib":  # no ISA-L, no zlib-ng: Python's gzip, the same way
        monkeypatch.setattr(gzopen, "_fast", None)
    monkeypatch.setattr(gzopen, "SKIP_BLOCK", 1000)  # many blocks on the way to an offset
    text = _real_trace()[:300_000]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text))
    for at in (0, 1, 999, 1000, 123_457, len(text)):
        with gzopen.open_gz(path, at=at) as f:
            assert f.tell() == at and f.read() == text[at:]
    with gzopen.open_gz(path, at=5000) as f:
        assert f.read(10) == text[5000:5010]
        assert _readinto_all(f) == text[5010:] and f.tell() == len(text)
        assert f.seek(5010) == 5010  # backward: from the start again
        assert f.seek(200_000) == 200_000 and f.read(7) == text[200_000:200_007]
        assert f.seek(17) == 17 and f.read(5) == text[17:22]  # backward
        assert f.seek(0, os.SEEK_END) == len(text) and f.read(5) == b""
    with pytest.raises(EOFError):
        gzopen.open_gz(path, at=len(text) + 1)
    assert gzopen.uncompressed_size(path) == len(text)

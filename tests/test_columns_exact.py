"""The analysis's column passes give exactly what the plain per-event loops give (the loops are written out
here as the reference): the columns of the event tuples, each device activity's launch, the top-level ops,
the kernel table and medians, the memory phases and allocator calls; and the stream's cut at the last
event boundary of a buffer. Real traces from tests/data, and seeded random events
for the ties, duplicates and empty cases a recording seldom holds.

    pytest tests/test_columns_exact.py -q
"""

from __future__ import annotations

import bisect
import pickle
import random
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from reference.step_memory import step_phases
from stepscope.analysis import by_name, columns, memory, metrics, trust
from stepscope.analysis.breakdown import sync_primitives
from stepscope.analysis.columns import device_columns, launch_columns, op_columns, runtime_columns
from stepscope.analysis.events import (
    DEVICE_KIND_NAMES,
    DeviceEvent,
    DeviceEvents,
    DeviceEventsBuilder,
    HostEvent,
    HostEvents,
    HostEventsBuilder,
    MemoryColumns,
    NameTable,
    ParsedTrace,
    is_comm_kernel,
    rows_named,
)
from stepscope.analysis.intervals import IntervalSet
from stepscope.analysis.steps import device_rows, launch_steps, step_windows
from stepscope.analysis.stream_columns import rows_of
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.trace import fastread
from stepscope.trace.jsonstream import BOUNDARY, PADDING, _last_boundary

DATA = Path(__file__).parent / "data"
TRACES = [DATA / "eager_bs128" / "eager_bs128.1795259107760373831.pt.trace.json.gz",
          DATA / "nccl_ddp" / "vm_600_rank0.1795261524036570560.pt.trace.json.gz",
          DATA / "suite_ddp" / "comm" / "comm_rank0.1795382598441226153.pt.trace.json.gz"]


def _parsed(path: Path):
    return parse_trace_file(path, "w", "1")


def _random_trace(seed: int):
    """A real trace's header and steps with random ops, runtime calls and kernels: repeated names, equal
    start times, nested and overlapping ops, duplicate and missing correlation ids."""
    rng = random.Random(seed)
    base = _parsed(TRACES[0])
    lo, hi = base.steps[0].start, base.steps[-1].end
    t = lambda: round(rng.uniform(lo, hi), rng.choice([0, 1, 3]))  # noqa: E731 (ties at coarse rounding)
    ops = []
    for _ in range(rng.randint(0, 400)):
        s = t()
        ops.append(HostEvent(rng.choice(["aten::add", "aten::empty", "autograd::engine::evaluate_function: X",
                                         "Optimizer.step#SGD.step", "aten::mm"]),
                             rng.choice([1, 2, "7"]), s, s + rng.choice([0.0, 1.0, rng.uniform(0, 5e3)])))
    runtime = []
    for _ in range(rng.randint(0, 300)):
        s = t()
        runtime.append(HostEvent("cudaLaunchKernel", 1, s, s + rng.uniform(0, 20), rng.choice([None, *range(50)])))
    device = []
    for _ in range(rng.randint(0, 300)):
        s = t()
        device.append(DeviceEvent(rng.choice(["k1", "k2", "ncclKernel_AllReduce", "Memcpy HtoD"]),
                                  rng.choice(["kernel", "kernel", "memcpy"]), 0, 7, s, s + rng.choice([1e-3, 2.5, 40.0]),
                                  rng.choice([None, *range(60)])))
    return replace(base, ops=tuple(ops), runtime=tuple(runtime), device=tuple(sorted(device, key=lambda d: d.start)))


def _traces():
    randoms = [_random_trace(seed) for seed in range(12)]
    # the parse gives its ops and runtime calls as HostEvents (columns); a trace built by hand, tuples: both
    # are read alike
    return ([_parsed(p) for p in TRACES] + randoms
            + [replace(t, ops=HostEvents.of(t.ops), runtime=HostEvents.of(t.runtime)) for t in randoms[:6]])


@pytest.fixture(scope="module")
def traces():
    return _traces()


def _same(a: np.ndarray, b: list) -> bool:
    return a.tolist() == list(b) and len(a) == len(b)


def test_columns_are_the_events_fields(traces):
    for trace in traces:
        ops = op_columns(trace)
        assert ops.names == tuple(o.name for o in trace.ops)
        assert _same(ops.start, [o.start for o in trace.ops]) and _same(ops.end, [o.end for o in trace.ops])
        assert [list(ops.threads)[k] for k in ops.thread.tolist()] == [o.tid for o in trace.ops]
        rt = runtime_columns(trace)
        assert _same(rt.start, [r.start for r in trace.runtime]) and _same(rt.end, [r.end for r in trace.runtime])
        dev = device_columns(trace)
        assert _same(dev.start, [d.start for d in trace.device]) and _same(dev.end, [d.end for d in trace.device])
        assert _same(dev.is_copy, [d.kind == "memcpy" for d in trace.device])
        assert _same(dev.is_comm, [is_comm_kernel(d.name) for d in trace.device])
        assert _same(dev.is_kernel, [d.kind == "kernel" for d in trace.device])
        assert [dev.names[k] for k in dev.name.tolist()] == [d.name for d in trace.device]
        assert dev.names == list(dict.fromkeys(d.name for d in trace.device))  # each name once


def test_the_parse_gives_its_ops_runtime_calls_and_device_activity_as_columns(traces):
    assert all(isinstance(_parsed(p).ops, HostEvents) and isinstance(_parsed(p).runtime, HostEvents)
               and isinstance(_parsed(p).device, DeviceEvents) for p in TRACES)
    assert any(len(_parsed(p).device) for p in TRACES)


def test_events_picked_by_their_names_codes_are_those_picked_by_name(traces):
    """events.rows_named reads the parse's codes where it kept them: the same rows as asking each event's name,
    for names that some events have, that none has, and that only the table holds."""
    coded = 0
    for trace in traces:
        for events in (trace.ops, trace.runtime):
            coded += getattr(events, "codes", None) is not None
            names = events.names if isinstance(events, HostEvents) else [e.name for e in events]
            some, absent = set(names[::7]), set(getattr(events, "table", None) or ()) - set(names)
            for keep in (some.__contains__, lambda n: n.startswith("cuda"), lambda n: False, absent.__contains__):
                assert rows_named(events, keep) == [k for k, n in enumerate(names) if keep(n)]
    assert coded > 0


def test_the_parse_codes_its_op_and_runtime_names_in_one_table(traces):
    """Where the parse kept them, every op's and runtime call's code names its name in the table its ranges
    share; columns.op_name_codes gives them, or makes codes of its own for ops without them; the codes follow
    a selection (take) and a join of pieces (the builder)."""
    coded = 0
    for trace in traces:
        for events in (trace.ops, trace.runtime):
            if getattr(events, "codes", None) is not None:
                assert [events.table[k] for k in events.codes.tolist()] == events.names
                coded += 1
        codes, table = columns.op_name_codes(trace)
        assert [table[k] for k in codes.tolist()] == list(op_columns(trace).names)
        plain = replace(trace, ops=tuple(trace.ops))  # tuples: codes made by op_name_codes
        codes, table = columns.op_name_codes(plain)
        assert [table[k] for k in codes.tolist()] == [o.name for o in trace.ops]
        if getattr(trace.ops, "codes", None) is not None and len(trace.ops) > 10:
            picked = trace.ops.take(np.arange(len(trace.ops))[::3])
            assert [picked.table[k] for k in picked.codes.tolist()] == picked.names
    assert coded > 0
    table = NameTable()
    first, again = table.codes_of(["a", "b", "a"]), table.codes_of(["c", "a"])
    assert first.tolist() == [0, 1, 0] and again.tolist() == [2, 0] and table.names == ["a", "b", "c"]
    b = HostEventsBuilder()
    b.extend_columns(["a", "b"], [1, 1], [0.0, 1.0], [1.0, 2.0], None, first[:2], table.names)
    b.extend_columns(["c"], [1], [2.0], [3.0], None, again[:1], table.names)
    built = b.build()
    assert built.codes.tolist() == [0, 1, 2] and built.table is table.names
    b.extend_columns(["x"], [1], [3.0], [4.0])  # a piece without codes: the join keeps none
    assert b.build().codes is None and b.build().names == ["a", "b", "c", "x"]


def _stands_for(cols, events: list, kind: type) -> None:
    """What columns of events (HostEvents, DeviceEvents) owe the code that reads them as the 50 tuples of
    ``kind`` they stand for: iteration, equality, indexing, slicing, picking rows, pickling, hashing, and
    columns that nothing can change."""
    assert list(cols) == events and cols == tuple(events) and cols == events and len(cols) == 50 and cols
    assert all(type(e) is kind for e in cols) and cols[7] == events[7] and type(cols[7].start) is float
    assert list(cols[10:20:3]) == events[10:20:3]
    assert cols.at([3, 1, 3]) == [events[3], events[1], events[3]]
    mask = np.array([e.start > 20 for e in events])
    assert list(cols.take(mask)) == [e for e in events if e.start > 20]
    assert pickle.loads(pickle.dumps(cols)) == cols and hash(cols) == hash(tuple(events))
    with pytest.raises(ValueError):
        cols.start[0] = 1.0  # read-only: a trace's columns are shared by everything read from it


def test_host_events_are_the_sequence_of_tuples_they_stand_for():
    rng = random.Random(3)
    events = [HostEvent(rng.choice(["a", "b", "c"]), rng.choice([1, "7"]), float(k), k + rng.uniform(0, 3),
                        rng.choice([None, 4])) for k in range(50)]
    cols = HostEvents.of(events)
    _stands_for(cols, events, HostEvent)
    no_corr = [e._replace(correlation=None) for e in events]
    assert HostEvents.of(no_corr).correlation is None and list(HostEvents.of(no_corr)) == no_corr
    assert not HostEvents.of([]) and list(HostEvents.of([])) == []
    # a builder keeps file order across events added one by one and pieces added as columns
    b = HostEventsBuilder()
    b.append(events[0])
    b.extend(events[1:5])
    piece = HostEvents.of(events[5:30])
    b.extend_columns(piece.names, piece.tids, piece.start, piece.end, piece.correlation)
    b.append(events[30])
    b.extend_columns([], [], [], [])
    b.extend(events[31:])
    assert len(b) == 50 and list(b) == events and b == events
    built = b.build()
    assert built == cols and isinstance(built, HostEvents) and b.build() == cols


def test_device_events_are_the_sequence_of_tuples_they_stand_for():
    rng = random.Random(4)
    events = [DeviceEvent(rng.choice(["k1", "k2", "ncclKernel"]), rng.choice(["kernel", "memcpy", "memset"]),
                          rng.choice([0, 1]), rng.choice([7, 20]), float(rng.randint(0, 30)), 0.0,
                          rng.choice([None, 4, 9])) for _ in range(50)]
    events = [e._replace(end=e.start + rng.uniform(0, 3)) for e in events]
    cols = DeviceEvents.of(events)
    _stands_for(cols, events, DeviceEvent)
    # stable: equal starts keep their order
    assert list(cols.by_start()) == sorted(events, key=lambda e: e.start)
    in_order = DeviceEvents.of(sorted(events, key=lambda e: e.start))
    assert in_order.by_start() is in_order
    none = DeviceEvents.of([])
    assert not none and list(none) == [] and none.by_start() == []
    # a builder keeps file order across activities added one by one and pieces added as columns
    b = DeviceEventsBuilder()
    b.append(events[0])
    b.extend(events[1:5])
    piece = DeviceEvents.of(events[5:30])
    b.extend_columns(piece.names, piece.kinds, piece.devices, piece.streams, piece.start, piece.end,
                     piece.correlation)
    b.append(events[30])
    b.extend_columns([], [], [], [], [], [], [])
    later = DeviceEventsBuilder()
    later.extend(events[31:40])
    rest = DeviceEvents.of(events[40:])
    later.extend_columns(rest.names, rest.kinds, rest.devices, rest.streams, rest.start, rest.end,
                         rest.correlation)
    b.extend_builder(later)
    assert len(b) == 50 and list(b) == events and b == events
    built = b.build()
    assert built == cols and isinstance(built, DeviceEvents) and b.build() == cols
    # what reads the device activity answers alike for the tuples and the columns
    for device in (tuple(events), cols):
        no_host = HostEvents.of([])
        trace = ParsedTrace("w", "s", 0.0, None, None, None, (), no_host, (), no_host, device, (),
                            MemoryColumns())
        dev = device_columns(trace)
        assert dev.start.tolist() == [e.start for e in events] and dev.names == list(dict.fromkeys(
            e.name for e in events))
        assert dev.is_kernel.tolist() == [e.kind == "kernel" for e in events]


def _coded_host(events: list, table: list) -> HostEvents:
    """``events`` as the parse hands them over: names as codes into ``table``, integer threads as int64."""
    code = {name: k for k, name in enumerate(table)}
    corr = [e.correlation for e in events]
    return HostEvents(None, np.array([e.tid for e in events], dtype=np.int64), [e.start for e in events],
                      [e.end for e in events], None if all(c is None for c in corr) else corr,
                      np.array([code[e.name] for e in events], dtype=np.int64), table)


def test_host_events_with_coded_names_and_numbered_threads_stand_for_their_tuples():
    """The parse's form of HostEvents (names as codes into a table that holds more names than these, threads
    as int64) is the same sequence of tuples as the lists' form, through a selection, a pickle and a join
    with pieces of either form; the passes over every event read the codes without listing the names."""
    rng = random.Random(5)
    table = ["unused", "c", "a", "b", "z"]
    events = [HostEvent(rng.choice(["a", "b", "c"]), rng.choice([1, 7, 2**40]), float(k), k + rng.uniform(0, 3),
                        rng.choice([None, 4])) for k in range(50)]
    cols = _coded_host(events, table)
    assert cols.at([4, 0]) == [events[4], events[0]] and cols[-1] == events[-1] and cols[3] == events[3]
    picked = cols.take(np.arange(50)[::4])
    assert rows_named(cols, {"b"}.__contains__) == [k for k, e in enumerate(events) if e.name == "b"]
    assert len(cols) == 50 and cols._names is None and cols._tids is None  # nothing above listed a column
    assert list(picked) == events[::4] and picked.codes is not None and picked.tid_numbers is not None
    assert cols == HostEvents.of(events) and HostEvents.of(events) == cols
    _stands_for(cols, events, HostEvent)
    assert [type(t) for t in cols.tids] == [int] * 50 and cols.names == [e.name for e in events]
    # a join: coded pieces stay coded, threads stay numbers; a piece of tuples makes both lists
    b = HostEventsBuilder()
    for piece in (events[:20], events[20:]):
        one = _coded_host(piece, table)
        b.extend_columns(None, one.tid_numbers, one.start, one.end, one.correlation, one.codes, table)
    built = b.build()
    assert built._names is None and built._tids is None
    assert built == events and built.codes is not None and built.tid_numbers is not None
    b.extend(events[:3])
    mixed = b.build()
    assert mixed == events + events[:3] and mixed.codes is None and mixed.tid_numbers is None
    with pytest.raises(ValueError):
        HostEvents(None, [], [], [])  # neither names nor their codes


def test_device_events_with_coded_names_and_kinds_stand_for_their_tuples():
    """The parse's form of DeviceEvents (names as codes into a table, kinds as codes into DEVICE_KIND_NAMES)
    is the same sequence of tuples as the lists' form; device_columns reads the codes and gives what it
    gives for the lists (names in order of first appearance, whatever the table's order)."""
    rng = random.Random(6)
    table = ["op", "ncclKernel_AllReduce", "k2", "k1", "never"]
    events = [DeviceEvent(rng.choice(["k1", "k2", "ncclKernel_AllReduce"]), rng.choice(["kernel", "memcpy", "memset"]),
                          rng.choice([0, 1]), rng.choice([7, 20]), float(rng.randint(0, 30)), 0.0,
                          rng.choice([None, 4, 9])) for _ in range(50)]
    events = [e._replace(end=e.start + rng.uniform(0, 3)) for e in events]

    def coded(evs):
        return DeviceEvents(None, None, [e.device for e in evs], [e.stream for e in evs], [e.start for e in evs],
                            [e.end for e in evs], [e.correlation for e in evs],
                            np.array([table.index(e.name) for e in evs], dtype=np.int64), table,
                            np.array([DEVICE_KIND_NAMES.index(e.kind) for e in evs], dtype=np.int8))

    cols = coded(events)
    assert cols.at([9, 2]) == [events[9], events[2]] and cols[-2] == events[-2]
    assert cols.by_start().codes is not None and cols.by_start().kind_codes is not None
    no_host = HostEvents.of([])
    got, want = (device_columns(ParsedTrace("w", "s", 0.0, None, None, None, (), no_host, (), no_host, d, (),
                                            MemoryColumns())) for d in (cols, DeviceEvents.of(events)))
    assert cols._names is None and cols._kinds is None  # device_columns read the codes
    assert got.names == want.names == list(dict.fromkeys(e.name for e in events))
    for field in ("start", "end", "is_copy", "is_comm", "is_kernel", "name"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and a.tolist() == b.tolist(), field
    assert cols == DeviceEvents.of(events) and list(cols.by_start()) == sorted(events, key=lambda e: e.start)
    _stands_for(cols, events, DeviceEvent)
    b = DeviceEventsBuilder()
    for piece in (events[:25], events[25:]):
        one = coded(piece)
        b.extend_columns(None, None, one.devices, one.streams, one.start, one.end, one.correlation, one.codes,
                         table, one.kind_codes)
    built = b.build()
    assert built == events and built.codes is not None and built.kind_codes is not None
    b.append(events[0])
    assert b.build() == events + events[:1] and b.build().codes is None and b.build().kind_codes is None


def test_ids_kept_as_int64_stand_for_their_lists():
    """The parse's form of the ids (correlation ids of host events and device activity, the activity's devices
    and streams, as int64 where every one is an integer) is the same sequence of tuples as the lists' form,
    through a selection, a pickle and a join, without listing a column; a join with a piece of lists, or of
    no ids, lists them. The launches found from it are those found from the lists."""
    rng = random.Random(8)
    ids = [rng.randint(0, 2 ** 40) for _ in range(50)]
    host = [HostEvent(rng.choice(["a", "b"]), 3, float(k), k + 0.5, ids[k]) for k in range(50)]
    cols = HostEvents(None, np.full(50, 3, dtype=np.int64), [e.start for e in host], [e.end for e in host],
                      np.array(ids, dtype=np.int64), np.array([("a", "b").index(e.name) for e in host]), ["a", "b"])
    assert cols.at([5, 2]) == [host[5], host[2]] and cols[7] == host[7]
    assert cols.take(np.arange(50)[::3]).corr_numbers.tolist() == ids[::3] and cols._corr is None
    _stands_for(cols, host, HostEvent)
    b = HostEventsBuilder()
    b.extend_columns(None, cols.tid_numbers[:20], cols.start[:20], cols.end[:20], cols.corr_numbers[:20],
                     cols.codes[:20], ["a", "b"])
    b.extend_columns(None, cols.tid_numbers[20:], cols.start[20:], cols.end[20:], cols.corr_numbers[20:],
                     cols.codes[20:], ["a", "b"])
    assert b.build() == host and b.build().corr_numbers.dtype == np.int64
    b.extend_columns(["c"], [3], [60.0], [61.0])  # a piece without ids: theirs are None
    mixed = b.build()
    assert mixed.corr_numbers is None and mixed.correlation == ids + [None]
    device = [DeviceEvent("k", "kernel", rng.choice([0, 1]), rng.choice([7, 20]), float(k), k + 0.25,
                          rng.choice(ids)) for k in range(50)]
    numbers = lambda field: np.array([getattr(e, field) for e in device], dtype=np.int64)  # noqa: E731
    dev = DeviceEvents(["k"] * 50, ["kernel"] * 50, numbers("device"), numbers("stream"),
                       [e.start for e in device], [e.end for e in device], numbers("correlation"))
    assert dev.at([4, 1]) == [device[4], device[1]] and dev[9] == device[9]
    assert dev.by_start().correlation_column.dtype == np.int64 and not dev._listed
    _stands_for(dev, device, DeviceEvent)
    d = DeviceEventsBuilder()
    for part in (dev.take(np.arange(25)), dev.take(np.arange(25, 50))):
        d.extend_columns(part.names, part.kinds, part.device_column, part.stream_column, part.start, part.end,
                         part.correlation_column)
    joined = d.build()
    assert joined == device and all(isinstance(c, np.ndarray) for c in
                                    (joined.device_column, joined.stream_column, joined.correlation_column))
    d.append(device[0])
    assert d.build() == device + device[:1] and d.build().correlation_column == [e.correlation for e in
                                                                                 device + device[:1]]
    trace = lambda rt, dv: ParsedTrace("w", "s", 0.0, None, None, None, (), HostEvents.of([]), (),  # noqa: E731
                                       rt, dv, (), MemoryColumns())
    got = launch_columns(trace(cols, dev))
    want = launch_columns(trace(HostEvents.of(host), DeviceEvents.of(device)))
    assert got.found.tolist() == want.found.tolist() and got.found.any()
    assert np.array_equal(got.start, want.start, equal_nan=True)


def test_a_parse_keeps_the_ids_as_int64(monkeypatch):
    """A trace read by the compiled reader hands over its runtime calls' correlation ids and its device
    activity's devices, streams and ids as int64; the analysis' launches are those of msgspec's parse, whose
    columns are lists."""
    assert fastread.available()  # the default suite builds it (test_fastread)
    path = next((DATA / "eager_bs32").glob("*.json*"))
    fast = parse_trace_file(path, "w", "s")
    monkeypatch.setenv(fastread.PURE_ENV, "1")
    slow = parse_trace_file(path, "w", "s")
    assert fast.runtime.corr_numbers.dtype == np.int64 and slow.runtime.corr_numbers is None
    assert all(isinstance(c, np.ndarray) for c in (fast.device.device_column, fast.device.stream_column,
                                                    fast.device.correlation_column))
    assert fast.device == slow.device and fast.runtime == slow.runtime
    a, b = launch_columns(fast), launch_columns(slow)
    assert a.found.tolist() == b.found.tolist() and a.found.sum() > 100
    assert np.array_equal(a.start, b.start, equal_nan=True)


@pytest.mark.parametrize("seed", range(10))
def test_thread_codes_are_the_dicts(seed):
    """columns._thread_codes codes integer threads by numpy; the rule, a dict in order of first appearance
    (its keys the first objects met: True before 1), with any threads at all (names, None, floats, ints past
    int64) in the dict itself; threads alternating and in runs."""
    rng = random.Random(seed)
    pool = [1, 2, 3, -7, 2 ** 62, True, 0] if seed % 3 else [1, "main", None, 2 ** 70, 2.5, 3, True]
    tids = [rng.choice(pool) for _ in range(rng.randint(0, 60))]
    if seed % 2:  # in runs, as a trace's ops come (a thread's are counted among the runs)
        tids = [tid for tid in tids for _ in range(rng.randint(1, 5))]
    threads, codes = columns._thread_codes(tids)
    want = {tid: code for code, tid in enumerate(dict.fromkeys(tids))}
    assert threads == want and [type(k) for k in threads] == [type(k) for k in want]
    assert codes.dtype == np.int64 and codes.tolist() == [want[t] for t in tids]
    if all(type(t) is int and abs(t) < 2**63 for t in tids):  # the parse's form: an int64 array
        threads, codes = columns._thread_codes(np.array(tids, dtype=np.int64))
        assert threads == want and all(type(k) is int for k in threads)
        assert codes.tolist() == [want[t] for t in tids]


@pytest.mark.parametrize("values", [[], [1, 2, 3], [1, None, 3], [True, 2.5, -0.0, 2**60 + 1], ["5", 1],
                                    ["x", 1], [1, [2]], [[1], [2]], [2**1100], [float("nan"), np.int64(7)]])
def test_ids_read_as_floats_are_numpys(values):
    """columns._floats reads a list of ids in one typed pass where it can: the same array as
    np.array(values, dtype=np.float64), or the same exception, whatever the list holds."""
    try:
        want = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as e:
        with pytest.raises(type(e)):
            columns._floats(values)
        return
    got = columns._floats(values)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("seed", range(10))
def test_launch_rows_are_the_dicts(seed):
    """columns._launch_rows sorts the ids; the rule is a dict of the launches' ids (the last of equal ones),
    with repeated ids, None, ids equal as numbers of two types, ids too large for a float64 to hold exactly,
    and ids of other kinds (looked up in the dict itself)."""
    rng = random.Random(seed)
    pool = [None, 0, 1, 2, 3, 7, 7.0, 1.5, True, 2 ** 60, 2 ** 60 + 1, -5, 10 ** 30, "x", float("inf")]
    common = pool[:9]
    unusual = rng.random() < 0.4
    pick = (lambda: rng.choice(pool)) if unusual else (lambda: rng.choice(common))
    launches = [pick() for _ in range(rng.randint(0, 60))]
    activities = [pick() for _ in range(rng.randint(0, 60))]
    row = dict(zip(launches, range(len(launches))))
    row.pop(None, None)
    assert columns._launch_rows(launches, activities).tolist() == [row.get(a, -1) for a in activities]


def _launches_by_correlation(trace) -> dict:
    """The per-event rule's launch of each correlation id: the last runtime call that has it."""
    return {r.correlation: r for r in trace.runtime if r.correlation is not None}


def test_each_activity_is_in_the_step_whose_host_range_holds_its_launch(traces):
    """steps.launch_steps for all activities at once; the rule, activity by activity: its launch (the last
    runtime call with its correlation id), and the last step begun at or before that launch, if not ended."""
    found = 0
    for trace in traces:
        launch, starts = _launches_by_correlation(trace), [s.start for s in trace.steps]
        expected = []
        for d in trace.device:
            r = launch.get(d.correlation)
            i = bisect.bisect_right(starts, r.start) - 1 if r is not None else -1
            expected.append(i if i >= 0 and r.start < trace.steps[i].end else -1)
        assert launch_steps(trace).tolist() == expected
        found += sum(i >= 0 for i in expected)
    assert found > 0


def test_launch_columns_are_the_correlated_launches(traces):
    found_some = False
    for trace in traces:
        launch = _launches_by_correlation(trace)  # the dict the per-event rule looks each activity up in
        cols = launch_columns(trace)
        for d, found, start, end in zip(trace.device, cols.found.tolist(), cols.start.tolist(), cols.end.tolist(),
                                        strict=True):
            r = launch.get(d.correlation)
            assert found == (r is not None)
            if r is None:
                assert np.isnan(start) and np.isnan(end)
            else:
                assert (start, end) == (r.start, r.end)
                found_some = True
    assert found_some


def _top_level_reference(trace) -> dict:
    """metrics.top_level_ops as a loop over each thread's ops in (start, -end) order."""
    by_tid = defaultdict(list)
    for k, o in enumerate(trace.ops):
        by_tid[o.tid].append((o.start, -o.end, k))
    out = {}
    for tid, rows in by_tid.items():
        rows.sort()
        starts = [s for s, _, _ in rows]
        tops, i = [], 0
        while i < len(rows):
            tops.append(rows[i][2])
            end = trace.ops[rows[i][2]].end
            i = max(i + 1, np.searchsorted(np.array(starts), end).item())
        out[tid] = ([trace.ops[k].start for k in tops], [trace.ops[k] for k in tops])
    return out


def _sync_episodes_reference(trace) -> list:
    """metrics.sync_episodes' rule: each sync call grouped under the top-level op on its thread that began last
    before it and still holds it at its end (else alone), the group's blocked time the union of its calls."""
    tops = metrics.top_level_ops(trace)
    groups = defaultdict(list)
    for p in sync_primitives(trace):
        starts, ops = tops.get(p.tid, ([], []))
        i = bisect.bisect_right(starts, p.start) - 1
        top = ops[i] if i >= 0 and ops[i].end >= p.end else None
        groups[(p.tid, top.start, top.name) if top else (p.tid, p.start, p.name)].append(p)
    out = [metrics.SyncEpisode(name, start, IntervalSet((p.start, p.end) for p in prims).total())
           for (_, start, name), prims in groups.items()]
    return sorted(out, key=lambda e: e.start)


def test_sync_episodes_are_grouped_under_their_top_level_ops(traces):
    rng, grouped = random.Random(11), 0
    for trace in traces:
        # some runtime calls renamed to syncs, so that every trace has some, inside ops and outside them
        runtime = [r._replace(name="cudaStreamSynchronize") if rng.random() < 0.05 else r for r in trace.runtime]
        for t in (trace, replace(trace, runtime=HostEvents.of(runtime))):
            expected = _sync_episodes_reference(t)
            assert metrics.sync_episodes(t) == expected
            grouped += len(expected)
    assert grouped > 0


def test_top_level_ops(traces):
    for trace in traces:
        assert metrics.top_level_ops(trace) == _top_level_reference(trace)


@pytest.mark.parametrize("seed", range(40))
def test_the_top_level_chain_is_the_loops_whether_ops_nest_or_overlap(seed):
    """metrics._chain takes the ops that start after every earlier op's end when that set is the chain (ops
    that nest), and follows the chain op by op when it is not (ops that overlap without nesting)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    if seed % 2:  # nested: each op inside the one open before it, or after it
        starts, ends, stack, t = [], [], [], 0.0
        for _ in range(n):
            while stack and rng.random() < 0.4:
                t = max(t, stack.pop())
            s = t + float(rng.integers(0, 3))
            e = s + float(rng.integers(0, 50))
            if stack:
                e = min(e, stack[-1])
            starts.append(s)
            ends.append(e)
            stack.append(e)
            t = s
    else:  # anything, partial overlaps and equal starts among them
        starts = rng.integers(0, 100, n).astype(float).tolist()
        ends = [s + float(rng.integers(0, 30)) for s in starts]
    order = sorted(range(n), key=lambda k: (starts[k], -ends[k]))
    s, e = np.array([starts[k] for k in order]), np.array([ends[k] for k in order])
    after = np.maximum(np.arange(1, n + 1), s.searchsorted(e))
    loop, i = [], 0
    while i < n:
        loop.append(i)
        i = int(after[i])
    assert metrics._chain(s, e).tolist() == loop


@pytest.mark.parametrize("seed", range(8))
def test_ops_by_thread_then_time_are_the_three_key_sort(seed):
    """metrics._by_thread_then_time, whether each thread's ops are listed in time order (grouping them keeps
    that order) or not (the three-key sort), with equal starts, equal ends and interleaved threads."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    tid = rng.integers(0, 3, n)
    start = np.round(rng.uniform(0, 50, n))
    end = start + np.round(rng.uniform(0, 5, n))
    listed = np.lexsort((-end, start))  # every thread's ops in time order, threads interleaved
    for t, s, e in ((tid, start, end), (tid[listed], start[listed], end[listed])):
        assert metrics._by_thread_then_time(t, s, e).tolist() == np.lexsort((-e, s, t)).tolist()


def test_time_by_kernel_and_copy_name_is_the_loops(traces):
    """by_name's kernel and copy tables (a straggler's comparison reads them) from the device columns: the
    same names in the same order, and the same sums, as the loop over the steps' activity that adds each
    one's time."""
    tried = 0
    for trace in traces:
        windows = step_windows(trace)
        kernels, copies = defaultdict(float), defaultdict(float)
        for w in windows:
            for d in w.device:
                if d.kind == "memcpy":
                    copies[d.name] += d.dur
                elif not is_comm_kernel(d.name):
                    kernels[d.name] += d.dur
        dev, own = device_columns(trace), device_rows(windows)
        got_kernels = by_name._by_name(dev, own[~dev.is_copy[own] & ~dev.is_comm[own]])
        got_copies = by_name._by_name(dev, own[dev.is_copy[own]])
        assert list(got_kernels.items()) == list(kernels.items())
        assert list(got_copies.items()) == list(copies.items())
        assert all(type(v) is float for v in got_kernels.values())
        tried += len(kernels)
    assert tried > 0


def _top_kernels_reference(kernels, n: int) -> list:
    total, count = defaultdict(float), defaultdict(int)
    for k in kernels:
        total[k.name] += k.dur
        count[k.name] += 1
    grand = sum(total.values()) or 1.0
    best = sorted(total, key=total.get, reverse=True)
    return [metrics.TopItem(name, total[name] / n / 1e3, count[name] / n, 100.0 * total[name] / grand)
            for name in best]


def test_kernel_table_and_medians(traces):
    """The kernel table and the median from the device columns, in whatever order the rows come (the steps'
    order is the analysis's), against the per-event rule."""
    tried = 0
    for trace in traces:
        dev = device_columns(trace)
        own = device_rows(step_windows(trace))
        assert [trace.device[k] for k in own.tolist()] == [d for w in step_windows(trace) for d in w.device]
        every = np.flatnonzero(dev.is_kernel)
        for rows in (every, own[dev.is_kernel[own]], every[::-1]):
            kernels = [trace.device[k] for k in rows.tolist()]
            assert all(k.kind == "kernel" for k in kernels)
            for n in (1, 3):
                assert metrics._top_kernels(dev, rows, n, None) == _top_kernels_reference(kernels, n)
            for part in (rows, rows[:-1] if len(rows) > 1 else rows):
                if part.size:
                    assert metrics._median(dev.end[part] - dev.start[part]) == statistics.median(
                        trace.device[k].dur for k in part.tolist())
                    tried += 1
        runtime = list(trace.runtime)
        for part in (runtime, runtime[:-1] or runtime):
            if part:
                dur = np.array([e.end for e in part]) - np.array([e.start for e in part])
                assert metrics._median(dur) == statistics.median(e.dur for e in part)
    assert tried > 0


def test_memory_phases(traces):
    some = False
    for trace in traces:
        windows = step_windows(trace)
        expected = step_phases(trace, windows)
        assert memory._phases(trace, windows) == expected
        some = some or any(b is not None for b, _, _ in expected)
    assert some  # a trace with a backward in its steps


def test_rows_of_makes_the_named_tuples():
    names, tids, starts, ends = ["a", "b"], [1, "2"], [0.0, 1.5], [1.0, 2.5]
    made = list(rows_of(HostEvent, names, tids, starts, ends, [None, 7]))
    assert made == list(map(HostEvent, names, tids, starts, ends, [None, 7]))
    assert all(type(e) is HostEvent for e in made) and made[1].correlation == 7 and made[1].dur == 1.0
    assert list(rows_of(HostEvent, [], [], [], [], [])) == []


def _allocator_calls_reference(trace, windows) -> tuple:
    count, syncs, per_step = 0, 0, defaultdict(list)
    for r in trace.runtime:
        if r.name.startswith(memory.ALLOCATOR_CALLS):
            i = next((i for i, w in enumerate(windows) if w.host_start <= r.start < w.host_end), None)
            if i is not None:
                count, syncs = count + 1, syncs + (r.name in memory.SYNCING_ALLOCATOR_CALLS)
                per_step[i].append(r.dur)
    us = 0.0  # summed step by step, as the analysis adds them (float addition is not associative)
    for i in sorted(per_step):
        us += sum(per_step[i])
    return count, us / 1e3, syncs, len(windows) >= memory.CHURN_MIN_STEPS and len(per_step) == len(windows)


def test_allocator_calls(traces):
    rng, counted = random.Random(5), 0
    for trace in traces:
        windows = step_windows(trace)
        # some of the runtime calls renamed to allocator calls, inside and outside the steps
        runtime = tuple(r._replace(name=rng.choice(["cudaMalloc", "cudaFree", "cuMemMap"])) if rng.random() < 0.2
                        else r for r in trace.runtime)
        for t in (trace, replace(trace, runtime=runtime)):
            expected = _allocator_calls_reference(t, windows)
            assert memory._allocator_calls(t, windows) == expected
            counted += expected[0]
    assert counted > 0


def test_module_loads_within_a_step(traces):
    """trust's count of CUDA module loads in a step's host range, against the per-event rule."""
    rng, counted = random.Random(9), 0
    for trace in traces:
        windows = step_windows(trace)
        runtime = [r._replace(name=rng.choice(trust.MODULE_LOADS) + "Data") if rng.random() < 0.1 else r
                   for r in trace.runtime]
        for t in (replace(trace, runtime=tuple(runtime)), replace(trace, runtime=HostEvents.of(runtime))):
            for w in windows:
                expected = sum(1 for r in runtime if r.name.startswith(trust.MODULE_LOADS)
                               and w.host_start <= r.start < w.host_end)
                assert trust._loads_within(t, w) == expected
                counted += expected
    assert counted > 0


@pytest.mark.parametrize("seed", range(6))
def test_last_boundary_is_the_last_of_the_buffer(seed):
    """jsonstream's cut: the last event boundary after ``after``, however far back it lies."""
    rng = random.Random(seed)
    events = [b'{"name": "%d", "args": {"x": [%s]}}' % (k, b", ".join([b"{}"] * rng.choice([0, 1, 3])))
              for k in range(rng.randint(1, 200))]
    seps = [rng.choice([b",", b", ", b" ,\n ", b",\t"]) for _ in events]
    buf = bytearray(b"".join(e + s for e, s in zip(events, seps))[:-1])
    buf += b"," + b'{"name": "big", "s": "' + b"}" * rng.choice([10, 70_000, 1_200_000]) + b'"}'  # no boundary in it
    for after in (-1, 0, len(buf) // 3, len(buf) - 5):
        found = [m.start() + 1 for m in BOUNDARY.finditer(buf, after + 1)]
        assert _last_boundary(buf, after) == (found[-1] if found else None)
        # the last below a bound (the padding a piece leaves after it), however close the bound
        for before in {len(buf) - PADDING, *(found[-3:]), *(f + 1 for f in found[-3:])}:
            below = [f for f in found if f < before]
            assert _last_boundary(buf, after, before) == (below[-1] if below else None)


def test_each_window_ends_at_its_steps_end_or_its_latest_activity(traces):
    """step_windows takes each step's latest device end from the columns at once; the rule, event by event."""
    owned = 0
    for trace in traces:
        for w in step_windows(trace):
            if trace.has_gpu:
                assert w.end == max([w.host_end] + [d.end for d in w.device])
            owned += len(w.device)
    assert owned > 0  # GPU traces with activity in their steps

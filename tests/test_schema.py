"""The one event schema (trace/schema.py): no decoder of a trace has a Struct of its own, and a view has the
one definition's fields. One read of a trace for both the analysis and the plugin copy
(plugin_copy/one_pass.py): the plan, the copy and the parse are those of the two readers alone, on the real
traces in tests/data; what the analysis refuses is left to parse_path; the handler's cycle worker makes its
copy and its report from that one read."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import stepscope
from few_by_default import few_by_default
from hypothesis import given, settings
from hypothesis import strategies as st
from stepscope.analysis.report import parse_path
from stepscope.analysis.stream_parse import parse_trace_file
from stepscope.capture.cycle_worker import CycleTrace, CycleWorker, analyze_cycle
from stepscope.plugin_copy.one_pass import read_both
from stepscope.plugin_copy.stream_plan import plan_edits
from stepscope.plugin_copy.stream_write import write_adapted_stream
from stepscope.trace import fastread, schema
from stepscope.trace import files as trace_files
from stepscope.trace.errors import TraceError

DATA = Path(__file__).parent / "data"
TRACES = sorted(DATA.glob("*/*.pt.trace.json.gz"))


def test_no_decoder_of_a_trace_has_a_struct_of_its_own():
    package = Path(stepscope.__file__).parent
    own = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
           if p.name != "schema.py" and re.search(r"class \w+\([^)]*Struct|defstruct\(", p.read_text())]
    assert own == []


def test_a_view_has_the_json_names_and_defaults_of_the_one_definition():
    view = schema.view("name", "ts", "pid", args=("correlation", "ext_upper", "device_type"))
    assert schema.view("name", "ts", "pid", args=("correlation", "ext_upper", "device_type")) is view
    text = b'[{"name": "k", "ts": 1.5, "args": {"External id": 3, "Device Type": 1, "x": [1]}, "dur": 2}, {}]'
    first, empty = schema.decoder(view)(text)
    assert (first.name, first.ts, first.pid) == ("k", 1.5, 0)
    assert (first.args.ext_upper, first.args.correlation, first.args.device_type) == (3, None, 1)
    assert (empty.name, empty.ts, empty.args) == (schema.UNSET, None, None)
    full, _ = schema.decode(text)
    assert (full.dur, full.args.ext_upper, full.args.ext_lower) == (2, 3, schema.UNSET)
    with pytest.raises(ValueError):
        schema.view("name", "no_such_field")


def test_an_entry_read_by_python_json_is_the_event_msgspec_gives():
    text = (b'[{"name": "k", "cat": "kernel", "ph": "X", "ts": 1, "dur": 2, "tid": 7, "pid": 1, "args": '
            b'{"correlation": 5, "external id": 9, "Call stack": "a.py(1): f", "Input Dims": [[1]], "Bytes": 4}}]')
    (decoded,) = schema.decode(text)
    (read,) = map(schema.from_object, json.loads(text))
    for f in ("name", "cat", "ph", "ts", "dur", "tid", "pid"):
        assert getattr(read, f) == getattr(decoded, f)
    for f in schema.Args.__struct_fields__:
        if f != "input_dims":  # only its presence is used
            assert getattr(read.args, f) == getattr(decoded.args, f), f
    assert read.args.input_dims is not schema.UNSET and decoded.args.input_dims is not schema.UNSET
    assert schema.from_object(5) is None and schema.from_object({"args": 5}) is None


def _same_plan(a, b) -> None:
    assert np.array_equal(a.keep, b.keep)
    assert a.edits == b.edits
    assert np.array_equal(a.ts, b.ts, equal_nan=True)
    assert a.step_starts == b.step_starts


# host_bound, the largest trace (3 MB gzipped), takes the path of the others at many times their cost: slow (its
# parse through both readers is compared by default in tests/test_fastread.py)
@pytest.mark.parametrize("path", few_by_default(TRACES, keep=[p.parent.name for p in TRACES if p.parent.name != "host_bound"],
                                                ids=[p.parent.name for p in TRACES]))
def test_one_read_gives_the_plan_and_the_parse_of_the_two_readers(path):
    both = read_both(path, "w", "1")
    plan, header = plan_edits(path)
    _same_plan(both.plan, plan)
    assert both.header == header
    assert both.parsed == parse_trace_file(path, "w", "1")


def test_the_copy_from_one_read_is_the_copy_byte_for_byte(tmp_path):
    src = DATA / "cuda_graph" / next(p.name for p in (DATA / "cuda_graph").glob("*.pt.trace.json.gz"))
    both = read_both(src, "w", "1")
    write_adapted_stream(src, tmp_path / "one.json", both.plan, both.header)
    plan, header = plan_edits(src)
    write_adapted_stream(src, tmp_path / "two.json", plan, header)
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def _plain(tmp_path: Path, events_edit=None) -> Path:
    doc = json.loads(gzip.decompress(next((DATA / "cuda_graph").glob("*.pt.trace.json.gz")).read_bytes()))
    if events_edit is not None:
        events_edit(doc["traceEvents"])
    raw = tmp_path / "raw.pt.trace.json"
    raw.write_text(json.dumps(doc))
    return raw


def test_a_trace_the_analysis_refuses_still_gets_its_plan_and_parse_path_says_why(tmp_path):
    raw = _plain(tmp_path, lambda events: events.insert(3, 5))  # an entry that is no event
    both = read_both(raw, "w", "1")
    assert both.parsed is None
    assert isinstance(parse_path(raw, "w", "1"), TraceError)
    plan, header = plan_edits(raw)
    _same_plan(both.plan, plan)
    assert not both.plan.keep[3]  # the copy leaves the entry out


def test_nan_literals_are_read_by_python_json_for_both(tmp_path):
    def nan_arg(events):
        kernel = next(e for e in events if e.get("cat") == "kernel")
        kernel["args"]["blocks per SM"] = float("nan")  # json.dumps writes NaN, which msgspec refuses
    raw = _plain(tmp_path, nan_arg)
    assert b"NaN" in raw.read_bytes()
    both = read_both(raw, "w", "1")
    _same_plan(both.plan, plan_edits(raw)[0])
    assert both.parsed == parse_trace_file(raw, "w", "1")


@pytest.mark.parametrize("pure", [False, True])
def test_the_cycle_worker_reports_what_the_analysis_of_the_file_says(tmp_path, monkeypatch, pure):
    if pure:
        monkeypatch.setenv(fastread.PURE_ENV, "1")
    elif not fastread.available():
        pytest.skip(fastread.why_not())
    raw = _plain(tmp_path)
    expected = analyze_cycle(raw, "host_1", "17", None).spans[0].to_dict()  # read from the file by the door
    alone = tmp_path / "alone"
    # the copy as two reads make it (the plan, then the write): what the cycle's one read must reproduce
    write_adapted_stream(raw, alone / trace_files.plugin_name("host_1", "17", False), *plan_edits(raw))
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(raw, run / "raw.json")
    worker = CycleWorker(run, "host_1", use_gzip=False, settle_s=0)
    worker.submit(CycleTrace("17", run / "raw.json", None))
    assert worker.close(timeout=120)
    (summary,) = worker.summaries
    assert summary.error is None and summary.notes == ()
    assert summary.report.to_dict() == expected
    (copy,) = alone.glob("*.pt.trace.json")
    assert (run / copy.name).read_bytes() == copy.read_bytes()


def _columns_of(read, text: bytes):
    from stepscope.plugin_copy.plan_columns import Columns
    c = Columns()
    assert read(c, text, {}) is not False
    return c


def _as_lists(c) -> dict:
    # typed arrays, and the chunked columns (plan_columns.Ids, Flags), as lists
    out = {k: list(v) if hasattr(v, "typecode") else v.tolist() if hasattr(v, "tolist") else v
           for k, v in vars(c).items() if k != "ts_all"}
    out["ts_all"] = [None if x != x else x for x in c.ts_all]  # NaN as None, to compare
    return out


ODD = [  # values of every kind the copy's rules read, where the compiled reader keeps them as columns
    {"ph": "X", "cat": "Kernel", "name": "k", "pid": 1, "tid": "stream 7", "ts": 10, "dur": 5,
     "args": {"correlation": 3, "External id": 4}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9.5, "dur": -1,
     "args": {"correlation": 3, "external id": None, "External id": 8}},
    {"ph": "X", "name": None, "ts": None, "dur": 0, "args": None},
    {"ph": "X", "cat": 5, "ts": 1, "args": {"external id": "e", "Python module id": None, "Call stack": None}},
    {"ph": "X", "cat": "", "name": "ProfilerStep#3", "pid": "p", "ts": 2, "dur": 7.25,
     "args": {"Python module id": 0, "correlation": None}},
    {"ph": "i", "name": "ProfilerStep#9", "ts": 4},
    # an empty name and the name "None" beside a missing and a null one: the same names as theirs
    {"ph": "X", "name": "", "pid": 1, "tid": 2, "ts": 3, "dur": 1, "args": {"External id": None}},
    {"ph": "X", "name": "None", "pid": 1, "tid": 2, "ts": 3, "dur": 1, "args": {"external id": None}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "x"}},
    {"cat": "cpu_op"},
]


def test_the_copy_reads_columns_as_it_reads_events():
    from stepscope.plugin_copy.plan_columns import _decode, read_column_piece, read_events
    if not fastread.available():
        pytest.skip(fastread.why_not())
    reader = fastread.ColumnReader(schema.Event)
    text = json.dumps(ODD).encode()
    by_events = _columns_of(lambda c, t, cats: read_events(c, _decode(t), cats), text)
    by_columns = _columns_of(lambda c, t, cats: read_column_piece(c, reader.read(t), cats), text)
    assert _as_lists(by_columns) == _as_lists(by_events)
    for odd in ({"ph": "X", "ts": True}, {"ph": "X", "pid": 1.5}, {"ph": "X", "name": 3}, {"ts": 2**60},
                {"ph": "X", "args": {"correlation": [1]}}):
        from stepscope.plugin_copy.plan_columns import Columns
        assert read_column_piece(Columns(), reader.read(json.dumps(ODD + [odd]).encode()), {}) is False, odd


def _int64(v) -> bool:
    return v is None or (type(v) is int and -(2**63) <= v < 2**63)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.none() | st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3), max_size=6)
                          | st.lists(st.none() | st.integers(-(2**70), 2**70) | st.text(max_size=2) | st.booleans(),
                                     max_size=6), st.booleans()), max_size=6))
def test_ids_appended_in_chunks_are_their_values_and_code_as_python_compares_them(chunks):
    """plan_columns.Ids, filled as the copy's readers fill it (a piece's (int64 values, null) where its ids
    are integers or null, else values one by one): the list of the values; (values, null) where every one is an
    integer or null, else None; and stream_plan._codes gives equal ids one code (as Python compares them, True
    as 1) and null its own."""
    from stepscope.plugin_copy.plan_columns import Ids
    from stepscope.plugin_copy.stream_plan import _codes

    ids, expected = Ids(), []
    for chunk, as_arrays in chunks:
        if as_arrays and all(map(_int64, chunk)):
            ids.extend((np.array([v or 0 for v in chunk], dtype=np.int64), np.array([v is None for v in chunk], dtype=bool)))
        else:
            for v in chunk:
                ids.append(v)
        expected += chunk
    assert len(ids) == len(expected) and ids.tolist() == expected
    rows = np.arange(len(expected))
    codes, none = _codes(ids, rows)
    assert none == (int(codes[expected.index(None)]) if None in expected else -1)
    assert all((codes[i] == codes[j]) == (expected[i] == expected[j]) for i in rows for j in rows)
    coded = ids.coded()
    if all(map(_int64, expected)):
        values, null = coded
        assert null.tolist() == [v is None for v in expected]
        assert values[~null].tolist() == [v for v in expected if v is not None]
    else:
        assert coded is None
    assert ids.tolist() == expected  # once joined, the same values


_thread_part = st.none() | st.integers(-3, 3) | st.sampled_from(["s", "stream 7", "0"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["X", "i"]), _thread_part, _thread_part, st.booleans(), st.booleans(),
                          st.integers(1, 4)), max_size=12))
def test_the_copys_threads_and_names_read_as_columns_are_the_events_own(runs):
    """Runs of events on threads of any kind (integers, strings, null, missing pid or tid) and with any name
    read from columns as from events: the same columns, threads and names given ids in order of first
    appearance."""
    from stepscope.plugin_copy.plan_columns import _decode, read_column_piece, read_events
    if not fastread.available():
        pytest.skip(fastread.why_not())
    events = []
    for ph, pid, tid, has_pid, named, n in runs:
        e = {"ph": ph, "ts": 1, "dur": 1, **({"pid": pid} if has_pid else {}), "tid": tid}
        if named:
            e["name"] = f"op{n % 3}" if pid != 0 else None
        events += [e] * n
    text = json.dumps(events).encode()
    reader = fastread.ColumnReader(schema.Event)
    by_events = _columns_of(lambda c, t, cats: read_events(c, _decode(t), cats), text)
    by_columns = _columns_of(lambda c, t, cats: read_column_piece(c, reader.read(t), cats), text)
    assert _as_lists(by_columns) == _as_lists(by_events)
    threads = list(by_columns.threads)  # each id's (pid, tid), as read_events gives them
    assert [threads[k] for k in by_columns.thread] == [(e.get("pid", 0), e["tid"]) for e in events if e["ph"] == "X"]


def test_the_copy_reads_real_traces_as_columns(monkeypatch):
    """The handler's one read (read_both) and the export's plan read (read_columns) both take every piece of a
    real trace as the compiled reader's columns, and the export's columns are those msgspec's events give."""
    from stepscope.plugin_copy import plan_columns
    if not fastread.available():
        pytest.skip(fastread.why_not())
    taken = []  # whether each piece was read from its columns (not decoded again by msgspec)
    real = plan_columns.read_column_piece
    monkeypatch.setattr(plan_columns, "read_column_piece", lambda *args: taken.append(real(*args)) or taken[-1])
    assert read_both(TRACES[0], "w", "1").parsed is not None
    assert taken and all(taken)
    taken.clear()
    by_columns = plan_columns.read_columns(TRACES[0])
    assert taken and all(taken)
    taken.clear()
    monkeypatch.setattr(plan_columns, "_COLUMNS", _NoColumns())
    by_events = plan_columns.read_columns(TRACES[0])
    assert not taken and by_events.count == by_columns.count > 0
    assert _as_lists(by_columns) == _as_lists(by_events)


class _NoColumns:
    """A compiled reader that takes no piece: every piece is decoded by msgspec."""

    def read(self, text):
        return None

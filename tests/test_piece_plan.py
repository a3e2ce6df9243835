"""A piece's plan from the compiled pass (fastread.plan_rows, in stream_columns._plan) is the plain numpy
reading of the same rules (tests/reference/piece_plan.py): the same refusals, times, codes, rows of each kind
and values, on every trace of tests/data cut into pieces and on generated pieces that hold what a recording
seldom does (unnamed calls, steps without a length, times out of range or of other types, memory events
without a time, data ranges that are annotations too).

    pytest tests/test_piece_plan.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.piece_plan import piece_plan
from stepscope.analysis import stream_columns
from stepscope.analysis.stream_collect import Collector, read
from stepscope.analysis.stream_ranges import first_base
from stepscope.trace import fastread
from stepscope.trace.jsonstream import TraceStream
from stepscope.trace.schema import Event

DATA = Path(__file__).parent / "data"
TRACES = sorted(p for p in DATA.rglob("*.json*") if ".pt.trace.json" in p.name)

READER = fastread.ColumnReader(Event)

pytestmark = pytest.mark.skipif(not fastread.available(), reason=f"{fastread.why_not()}")


def _collector(base: float) -> Collector:
    c = Collector()
    c.base = base
    return c


def _same(a, b, where: str) -> None:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
        if a.dtype.kind == "f":  # the same floats, bit for bit (the sign of a zero included)
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k}]")
    elif isinstance(a, tuple | list) and any(isinstance(x, np.ndarray) for x in a):
        assert type(a) is type(b) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    else:
        assert a == b and type(a) is type(b), where


def _check(cols, base: float) -> bool:
    """The product's plan of a piece against the reference's; whether the piece was planned."""
    got, want = stream_columns._plan(_collector(base), cols), piece_plan(_collector(base), cols)
    assert (got is None) == (want is None)
    if got is None:
        return False
    for slot in stream_columns._Plan.__slots__:
        if slot == "infos":  # the product asks every string; the reference those used as categories
            used = np.unique(want.cat).tolist()
            assert [got.infos[k] for k in used] == [want.infos[k] for k in used]
            continue
        _same(getattr(got, slot), getattr(want, slot), slot)
    return True


def test_every_piece_of_every_trace_is_planned_as_the_reference_plans_it():
    planned = 0
    for path in TRACES:
        base = first_base(path)
        if base is None:
            continue
        with TraceStream(path, 1 << 20) as ts:
            for events in ts.decode_events(read):
                if type(events) is fastread.Columns:
                    planned += _check(events, base)
    assert len(TRACES) > 50 and planned > 100


NAMES = ["ProfilerStep#3", "ProfilerStep#x", "[memory]", "<built-in method add>", "nn.Module: Linear_0",
         "<built-in method run_backward of object>", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
         "stepscope.data", "aten::mm", "cudaLaunchKernel", "ampere_sgemm", "Optimizer.step#SGD.step", ""]
CATS = ["cpu_op", "python_function", "Kernel", "cuda_runtime", "user_annotation", "gpu_memcpy", "gpu_user_annotation",
        "ac2g", "Trace", "cuda_driver", "gpu_memset"]
TIMES = st.one_of(st.integers(-5, 10**6), st.floats(-5.0, 1e6, allow_nan=False), st.sampled_from(
    [None, 0, -0.0, 0.5, 2**53, 2**53 + 1, -(2**53) - 1, 1e300, -1e300, "7", True, [1]]))


@st.composite
def _event(draw) -> dict:
    e: dict = {}
    for key, values in (("name", st.sampled_from(NAMES)), ("cat", st.sampled_from(CATS)),
                        ("ph", st.sampled_from(["X", "i", "s", "f", None])), ("ts", TIMES), ("dur", TIMES),
                        ("tid", st.sampled_from([1, 2, "main"])), ("pid", st.sampled_from([0, 7]))):
        if draw(st.integers(0, 9)):  # now and then a key is missing
            e[key] = draw(values)
    if draw(st.booleans()):
        e["args"] = {k: draw(st.sampled_from([0, 3, None, 2**40])) for k in
                     draw(st.lists(st.sampled_from(["device", "stream", "correlation", "Bytes", "Addr",
                                                    "Total Allocated", "Device Type", "Input Dims"]), max_size=4))}
    return e


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_event(), max_size=40), st.floats(-10.0, 10.0, allow_nan=False))
def test_generated_pieces_are_planned_as_the_reference_plans_them(events, base):
    cols = READER.read(json.dumps(events).encode())
    if cols is not None:
        _check(cols, float(np.floor(base)))


OK = {"name": "aten::mm", "cat": "cpu_op", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": 1}
REFUSED = {  # each piece holds OK and one event that the per-event rules must judge
    "a name that is no string": {"name": 3, "ph": "X", "ts": 1, "dur": 1},
    "a category that is no string": {"name": "n", "cat": 1, "ph": "X", "ts": 1, "dur": 1},
    "a phase that is no string": {"name": "n", "ph": 1, "ts": 1, "dur": 1},
    "a time that is a string": {"name": "n", "ph": "s", "ts": "7"},
    "a duration that is true": {"name": "n", "ph": "s", "ts": 1, "dur": True},
    "a time beyond the bounds": {"name": "n", "ph": "s", "ts": 1e300},
    "an integer time beyond 2**53": {"name": "n", "ph": "s", "ts": 2**53 + 1},
    "an operator without a duration": {"name": "aten::add", "cat": "cpu_op", "ph": "X", "ts": 1},
    "a Python call without a name or time": {"cat": "python_function", "ph": "X", "ts": 1},
    "a step of no length": {"name": "ProfilerStep#2", "cat": "user_annotation", "ph": "X", "ts": 1, "dur": 0},
    "a step that is no complete event": {"name": "ProfilerStep#2", "cat": "cpu_op", "ph": "i", "ts": 1},
    "a memory event without a time": {"name": "[memory]", "ph": "i", "args": {"Bytes": 4}},
}
PLANNED = {  # (an event, the plan's rows that hold it: the index into the rows of fastread.plan_rows)
    "a data range that is also an annotation": ({"name": "data", "cat": "user_annotation", "ph": "X",
                                                "ts": 1, "dur": 2}, {"data_spans", "annotations"}),
    "a DataLoader range of any category": ({"name": "enumerate(DataLoader)#x", "cat": "Trace", "ph": "X", "ts": 1,
                                           "dur": 2}, {"data_spans"}),
    "an unnamed Python call": ({"cat": "python_function", "ph": "X", "ts": 1, "dur": 2}, {"calls"}),
    "a built-in call": ({"name": "<built-in method add>", "cat": "python_function", "ph": "X", "ts": 1, "dur": 200},
                        {"builtins"}),
    "a long Python frame": ({"name": "train_step", "cat": "python_function", "ph": "X", "ts": 1, "dur": 200},
                            {"calls", "long_rows"}),
    "a module's frame": ({"name": "nn.Module: Linear_0", "cat": "python_function", "ph": "X", "ts": 1, "dur": 2},
                         {"calls", "model", "module_rows"}),
    "a step": ({"name": "ProfilerStep#4", "cat": "user_annotation", "ph": "X", "ts": 1, "dur": 2}, {"steps"}),
    "a memory event": ({"name": "[memory]", "ph": "i", "ts": 1, "args": {"Bytes": 4}}, {"memory"}),
    "a kernel": ({"name": "k", "cat": "Kernel", "ph": "X", "ts": 1, "dur": 2, "args": {"correlation": 9}},
                 {"dev_rows"}),
    "a runtime call": ({"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ph": "X", "ts": 1, "dur": 2,
                        "args": {"correlation": 9}}, {"rt_rows"}),
    "a flow event": ({"name": "ac2g", "cat": "ac2g", "ph": "s", "ts": 1}, set()),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_piece_the_per_event_rules_must_judge_is_refused(case):
    cols = READER.read(json.dumps([OK, REFUSED[case]]).encode())
    assert cols is not None and stream_columns._plan(_collector(0.0), cols) is None
    assert not _check(cols, 0.0)


def _rows_of(p) -> dict:
    return {"steps": p.steps, "memory": p.memory, "calls": p.calls, "builtins": p.builtins, "long_rows": p.long_rows,
            "model": p.model, "module_rows": p.module_rows, "dev_rows": p.dev_rows, "rt_rows": p.rt_rows,
            **{k: rows for k, (rows, _) in p.host.items()}}


@pytest.mark.parametrize("case", sorted(PLANNED))
def test_each_kind_of_event_lands_in_its_rows(case):
    event, where = PLANNED[case]
    cols = READER.read(json.dumps([OK, event]).encode())
    assert _check(cols, 0.0)
    held = {k for k, rows in _rows_of(stream_columns._plan(_collector(0.0), cols)).items() if 1 in rows.tolist()}
    assert held == where


def test_plan_rows_refuses_tables_that_do_not_hold_every_code():
    """No code read from the columns indexes past the tables it is looked up in: a ValueError instead."""
    cols = READER.read(b'[{"ph": "X", "name": "n", "ts": 1, "dur": 2}]')  # strings: "X" (0), "n" (1)
    one = (np.zeros(1, np.int8), np.zeros(1, bool), np.zeros(1, np.int16))
    with pytest.raises(ValueError):  # no room even for "none"
        fastread.plan_rows(cols, one[0][:0], one[1][:0], one[2][:0], 0, -2, 0.0, 100.0, 1e15)
    with pytest.raises(ValueError):  # the name's code 1 beyond tables for one string
        fastread.plan_rows(cols, *one, 0, -2, 0.0, 100.0, 1e15)
    three = (np.zeros(3, np.int8), np.zeros(3, bool), np.zeros(3, np.int16))
    s_all, t_all, name, cat, rows = fastread.plan_rows(cols, *three, 0, -2, 0.5, 100.0, 1e15)
    assert s_all.tolist() == [0.5] and t_all.tolist() == [2.5] and name.tolist() == [1] and cat.tolist() == [2]
    assert rows[2].tolist() == [0] and rows[8].tolist() == []  # category kind 0 (Python), no bits: a call

"""The operators' call stacks of the export (plugin_copy/stream_callstack.py) against the dict reference's
(reference/dict_rewrite.py's ``call_stacks``), for any frames and operators on any threads, whether the
compiled sweep (fastread.open_frames) or its Python twin finds the open frames; and the two sweeps give the
same chains. Real traces are held to the reference end to end in test_tbfix_stream.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference.dict_rewrite import call_stacks
from stepscope.plugin_copy import stream_callstack
from stepscope.plugin_copy.stream_callstack import call_stacks_of
from stepscope.trace import fastread

NAMES = ["a.py(1): f", "b.py(20): g", "<built-in method conv2d>", "nn.Module: Conv2d_0", "c.py(3): h"]


@st.composite
def events(draw) -> list[dict]:
    """Frames and operators on a few threads, with few distinct times: frames that nest, that start or end
    together, that overlap without nesting, and operators at a frame's very start or end."""
    out = []
    for _ in range(draw(st.integers(0, 40))):
        frame = draw(st.booleans())
        start = draw(st.integers(0, 30))
        out.append({"ph": "X", "cat": "python_function" if frame else draw(st.sampled_from(["cpu_op", "operator"])),
                    "name": draw(st.sampled_from(NAMES)) if frame else "aten::add",
                    "pid": 1, "tid": draw(st.sampled_from([1, 2, "stream 7"])),
                    "ts": start, "dur": draw(st.integers(0, 15))})
    return out


def columns(evs: list[dict]) -> tuple:
    """call_stacks_of's arguments for ``evs``, as the export's planning columns hold them."""
    names = list(dict.fromkeys(e["name"] for e in evs))
    threads: dict = {}
    thread = np.array([threads.setdefault((e["pid"], e["tid"]), len(threads)) for e in evs], dtype=np.int64)
    start = np.array([e["ts"] for e in evs], dtype=float)
    return (np.array([e["cat"] == "python_function" for e in evs], dtype=bool),
            np.array([e["cat"] in ("cpu_op", "operator") for e in evs], dtype=bool),
            np.array([names.index(e["name"]) for e in evs], dtype=np.int64), names, thread, start,
            start + np.array([e["dur"] for e in evs], dtype=float), [False] * len(evs))


@pytest.mark.parametrize("compiled", [True, False])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evs=events())
def test_the_stacks_are_the_references(compiled, evs, monkeypatch):
    if compiled and not fastread.available():
        pytest.skip(fastread.why_not())
    if not compiled:
        monkeypatch.setenv(fastread.PURE_ENV, "1")
    assert call_stacks_of(*columns(evs)) == call_stacks(evs)


@settings(max_examples=300, deadline=None)
@given(evs=events())
def test_the_compiled_sweep_makes_the_python_sweeps_chains(evs):
    if not fastread.available():
        pytest.skip(fastread.why_not())
    is_frame, is_op, name_id, names, thread, start, stop, _ = columns(evs)
    frames = np.flatnonzero(is_frame)
    frames = frames[np.lexsort((-stop[frames], start[frames], thread[frames]))]
    ops = np.flatnonzero(is_op)
    ops = ops[np.lexsort((start[ops], thread[ops]))]
    real = np.array([stream_callstack.PYTHON_FRAME.match(names[k]) is not None for k in name_id[frames]], dtype=bool)
    args = (thread[frames], start[frames], stop[frames], name_id[frames], real, thread[ops], start[ops])
    for got, want in zip(fastread.open_frames(*args), stream_callstack.open_frames(*args), strict=True):
        assert got.tolist() == want.tolist()


def test_an_operator_that_carries_its_own_stack_keeps_it():
    evs = [{"ph": "X", "cat": "python_function", "name": NAMES[0], "pid": 1, "tid": 1, "ts": 0, "dur": 10},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 3, "dur": 1}]
    args = list(columns(evs))
    args[-1] = [False, False, True]
    assert call_stacks_of(*args) == {1: NAMES[0]}


def test_frames_and_operators_of_different_lengths_are_refused():
    if not fastread.available():
        pytest.skip(fastread.why_not())
    one, two = np.zeros(1), np.zeros(2)
    with pytest.raises(ValueError, match="different lengths"):
        fastread.open_frames(one.astype(np.int64), one, two, one.astype(np.int64), np.zeros(1, np.uint8),
                             one.astype(np.int64), one)

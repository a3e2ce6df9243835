"""The export's step guard on columns (plugin_copy/step_guard.py) against the plain loop over launches that
the dict reference keeps (reference/dict_rewrite.py): the same steps, and the same launches unlinked, for any
host steps, launches and orphan device spans. The guard's end-to-end behaviour on real traces is in
test_tbfix.py; the correlation codes that match launches to their device spans are here too."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import dict_rewrite as loop
from stepscope.plugin_copy.plan_columns import Ids
from stepscope.plugin_copy.step_guard import Launches, step_spans_of, unlink_with
from stepscope.plugin_copy.stream_plan import _codes

# few distinct times, so that ties (a launch at a step's very start or end, launches that start together) are
# common: they are where a port of the plugin's walk goes wrong
TIME = st.integers(0, 40).map(float)


@st.composite
def spans(draw, max_size: int) -> list[tuple[float, float]]:
    starts = draw(st.lists(TIME, max_size=max_size))
    return [(a, a + draw(st.integers(0, 12))) for a in starts]


@st.composite
def cases(draw):
    steps = sorted(draw(spans(6)))
    rows = draw(st.lists(st.integers(0, 200), unique=True, max_size=30))
    launches = []
    for i in rows:
        a, b = draw(spans(1).filter(len))[0]
        d0 = draw(TIME)
        launches.append(loop.Launch(i, a, b, d0, d0 + draw(st.integers(0, 20)), draw(st.integers(1, 3))))
    orphans = draw(spans(4))
    return steps, sorted(launches, key=lambda r: (r.start, r.index)), orphans  # as the reference sorts


def columns(launches: list) -> Launches:
    by_start = sorted(launches, key=lambda r: (r.start, r.index))
    cols = [np.array(c, dtype=float) for c in zip(*by_start)] if by_start else [np.zeros(0)] * 6
    return Launches(cols[0].astype(np.int64), *cols[1:5], cols[5].astype(np.int64))


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_steps_are_those_of_the_loop_over_launches(case):
    steps, launches, orphans = case
    ends = np.array([b for _, b in orphans], dtype=float)
    assert step_spans_of(steps, columns(launches), ends) == loop.step_spans_of(steps, launches, orphans)


def test_a_step_empty_of_launches_and_unreached_steps_keep_their_host_span():
    steps = [(0.0, 10.0), (10.0, 20.0), (30.0, 40.0)]
    one = [loop.Launch(5, 1.0, 2.0, 3.0, 25.0, 1)]  # step 0's launch runs its kernels into step 1
    got = step_spans_of(steps, columns(one), np.zeros(0))
    assert got == loop.step_spans_of(steps, one, []) == [(0.0, 25.0)]  # the tail after it is dropped
    assert step_spans_of(steps, columns([]), np.zeros(0)) == steps


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_launches_unlinked_are_those_of_the_loop(case):
    steps, launches, orphans = case
    by_index = {r.index: r for r in launches}
    ends = np.array([b for _, b in orphans], dtype=float)

    def of_loop(linked):  # as the reference's: by start, ties in index order
        return sorted((by_index[i] for i in sorted(linked)), key=lambda r: r.start), orphans

    def of_columns(linked):
        return columns([by_index[i] for i in linked.tolist()]), ends

    runtime = np.array(sorted(by_index), dtype=np.int64)
    assert unlink_with(steps, of_columns, runtime) == loop.unlink_with(steps, of_loop, set(by_index))


def test_a_step_left_empty_by_an_earlier_steps_kernels_unlinks_their_launch():
    # step 1 launches nothing and ends on the host while step 0's kernels still run: the plugin would give it
    # length 0, so step 0's launch is unlinked (its kernels shown under the root, as before runtime events)
    steps = [(0.0, 10.0), (10.0, 12.0), (20.0, 30.0)]
    launches = [loop.Launch(3, 1.0, 2.0, 5.0, 15.0, 1), loop.Launch(8, 21.0, 22.0, 23.0, 24.0, 1)]
    by_index = {r.index: r for r in launches}
    got = unlink_with(steps, lambda linked: (columns([by_index[i] for i in linked.tolist()]), np.zeros(0)),
                      np.array([3, 8]))
    assert got == loop.unlink_with(steps, lambda linked: (sorted((by_index[i] for i in sorted(linked)),
                                                                 key=lambda r: r.start), []), {3, 8}) == {3}


VALUES = st.one_of(st.integers(-3, 3), st.integers(2**62, 2**64), st.none(), st.booleans(),
                   st.sampled_from([1.0, 2.5, float("nan"), "1", "a"]))


def _ids(values: list) -> Ids:
    """An id column filled value by value, as the copy's per-event reader fills it."""
    ids = Ids()
    for v in values:
        ids.append(v)
    return ids


@given(st.lists(VALUES, max_size=40))
def test_correlation_codes_are_equal_where_python_finds_the_values_equal(values):
    codes, none = _codes(_ids(values), np.arange(len(values)))
    assert len(codes) == len(values)
    for i, a in enumerate(values):
        for j, b in enumerate(values):
            assert (codes[i] == codes[j]) == (a is b or a == b), (a, b)
    assert none == (codes[values.index(None)] if None in values else -1)
    if len(codes):
        assert sorted(set(codes.tolist())) == list(range(int(codes.max()) + 1))  # dense, from 0


def test_integer_ids_are_coded_by_sorting_other_values_by_first_appearance():
    # integer ids and nulls (all the compiled reader gives) by one sort: codes in the values' order, null's
    # after them; anything else by a dict, in order of first appearance
    assert _codes(_ids([7, 5, 7, 2**40]), np.arange(4))[0].tolist() == [1, 0, 1, 2]
    assert _codes(_ids([7, 5, None, 7]), np.arange(4))[0].tolist() == [1, 0, 2, 1]
    assert _codes(_ids([7, 5, None, 7]), np.arange(4))[1] == 2
    assert _codes(_ids([None, None]), np.arange(2))[0].tolist() == [0, 0]
    assert _codes(_ids([9, 7, 5]), np.array([2, 0]))[0].tolist() == [0, 1]  # only the rows asked for
    codes, none = _codes(_ids(["b", 7, None, "b"]), np.arange(4))
    assert codes.tolist() == [0, 1, 2, 0] and none == 2
    coded = Ids()  # a piece read as columns: (values, null), whatever a null row's value
    coded.extend((np.array([4, 9, 4, 3]), np.array([False, True, False, True])))
    assert _codes(coded, np.arange(4))[0].tolist() == [0, 1, 0, 1]


def test_without_host_steps_no_launch_is_matched():
    # no host event at all: one step from the largest to the smallest time, which no launch lies in
    import sys
    steps = [(float(sys.maxsize), float(-sys.maxsize - 1))]
    launches = [loop.Launch(2, 1.0, 2.0, 3.0, 4.0, 1)]
    got = step_spans_of(steps, columns(launches), np.zeros(0))
    assert got == loop.step_spans_of(steps, launches, []) == steps

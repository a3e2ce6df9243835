"""The analysis' rules on tiny hand-built traces, where every expected number can be worked out by hand,
and the interval arithmetic against brute force.

    pytest tests/test_analysis_units.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from on_disk import analyze_trace
from stepscope.analysis import intervals as intervals_module
from stepscope.analysis.intervals import IntervalSet, intersect, pieces_by_priority, subtract


def X(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step(n: int, ts: float, dur: float) -> dict:
    return X("user_annotation", f"ProfilerStep#{n}", ts, dur)


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict:
    return X("cuda_runtime", name, ts, dur, correlation=corr)


def kernel(ts: float, dur: float, corr: int, name: str = "k", stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "device": 0}}


def analyze(*events):
    # A realistic clock offset (~4.4e12 µs): the parser must keep durations exact anyway.
    t0 = 4_402_081_693_000.0
    shifted = [{**e, "ts": e["ts"] + t0} for e in events]
    return analyze_trace({"traceEvents": shifted}, "w", "1")


def us(report, bucket: str) -> float:
    """µs in `bucket` over the profiled steps, as the trace measured them."""
    return report.breakdown_profiled.buckets[bucket]


def test_host_gaps_split_into_launch_and_other():
    r = analyze(step(0, 0, 100),
                X("cpu_op", "aten::add", 0, 10), launch(5, 3, 1), kernel(9, 3, 1),
                X("cpu_op", "aten::mul", 50, 10), launch(55, 3, 2), kernel(59, 3, 2))
    # gaps: [0,9] host in aten::add; [12,59] Python until 50, then aten::mul; [62,100] nothing queued.
    assert us(r, "gpu_busy") == pytest.approx(6)
    assert us(r, "launch") == pytest.approx(9 + 9)
    assert us(r, "other_host") == pytest.approx(38 + 38)
    assert us(r, "device_idle") == us(r, "sync") == us(r, "data") == 0
    assert r.verdict == "host_bound"
    assert r.profiled.step_ms == pytest.approx(0.1)
    assert r.metrics.kernels_per_step == 2
    assert r.metrics.median_launch_us == pytest.approx(3)


def test_gap_before_already_queued_work_is_device_side():
    r = analyze(step(0, 0, 30), X("cpu_op", "aten::add", 0, 5), launch(1, 1, 1), launch(3, 1, 2),
                kernel(5, 15, 1), kernel(25, 5, 2))
    assert us(r, "launch") == pytest.approx(5)  # [0,5]: kernel 1 not launched yet at 0
    assert us(r, "device_idle") == pytest.approx(5)  # [20,25]: kernel 2 queued since t=4
    assert r.verdict == "gpu_bound"  # 20 busy + 5 device idle of 30


def test_sync_and_the_relaunch_after_it():
    r = analyze(step(0, 0, 100),
                X("cpu_op", "aten::add", 0, 4), launch(1, 2, 1), kernel(4, 34, 1),
                X("cpu_op", "aten::item", 10, 30), X("cpu_op", "aten::_local_scalar_dense", 11, 29),
                launch(12, 28, 9, name="cudaStreamSynchronize"),
                X("cpu_op", "aten::mul", 40, 10), launch(45, 3, 2), kernel(49, 3, 2))
    # [38,49]: blocked in .item() until 40, then relaunching until 49: all of it caused by the sync.
    assert us(r, "sync") == pytest.approx(11)
    assert us(r, "launch") == pytest.approx(4)
    assert us(r, "other_host") == pytest.approx(48)
    assert r.metrics.syncs_per_step == 1  # item > _local_scalar_dense > cudaStreamSynchronize: one sync
    assert r.metrics.sync_ms_per_step == pytest.approx(0.028)  # the host blocks in cudaStreamSynchronize, 12..40
    (f,) = [f for f in r.findings if f.id == "host_sync"]
    assert f.text.startswith("1 host sync per step, 0.03 ms blocked (aten::item)")


def test_data_wait_outranks_the_ops_inside_it():
    r = analyze(step(0, 0, 50), X("user_annotation", "data", 0, 30),
                X("cpu_op", "aten::stack", 5, 20), X("cpu_op", "aten::copy_", 30, 6), launch(32, 2, 1),
                kernel(36, 14, 1))
    assert us(r, "data") == pytest.approx(30)
    assert us(r, "launch") == pytest.approx(6)
    assert r.verdict == "data_bound"
    assert r.metrics.data_ms_per_step == pytest.approx(0.030)


def test_windows_follow_the_gpu_when_it_lags_behind_the_host():
    r = analyze(step(0, 0, 10), launch(1, 1, 1), step(1, 10, 10), launch(11, 1, 2),
                kernel(0, 5, 99),  # launched in a warm-up step: its launch is not in the trace
                kernel(5, 35, 1), kernel(40, 35, 2))
    assert r.profiled.step_ms == pytest.approx(0.035)  # GPU period, not the 10 µs host ranges
    assert r.profiled.gpu_busy_pct == pytest.approx(100)
    assert r.metrics.kernels_per_step == 1
    assert r.verdict == "gpu_bound"


def test_communication_is_the_part_no_compute_hides():
    r = analyze(step(0, 0, 100), launch(0, 1, 1), launch(1, 1, 2),
                kernel(2, 38, 1), kernel(30, 60, 2, name="ncclDevKernel_AllReduce_Sum_f32", stream=20))
    assert us(r, "gpu_busy") == pytest.approx(38)
    assert us(r, "communication") == pytest.approx(50)
    assert r.metrics.comm_ms_per_step == pytest.approx(0.060)
    assert r.metrics.compute_ms_per_step == pytest.approx(0.038)
    assert r.metrics.overlap_ms_per_step == pytest.approx(0.010)
    assert r.profiled.gpu_busy_pct == pytest.approx(88)
    assert r.verdict == "communication_bound"


def test_cpu_only_breakdown_and_self_time():
    r = analyze(step(0, 0, 100), X("user_annotation", "data", 0, 10),
                X("cpu_op", "aten::linear", 10, 50), X("cpu_op", "aten::addmm", 20, 10))
    assert r.breakdown_profiled.buckets == pytest.approx({"cpu_ops": 50, "data": 10, "communication": 0,
                                                 "other_host": 40})
    assert r.verdict == "cpu_bound"
    assert [(t.name, t.ms_per_step) for t in r.metrics.top] == [("aten::linear", pytest.approx(0.040)),
                                                                ("aten::addmm", pytest.approx(0.010))]
    assert r.metrics.gpu_busy_pct is None and r.metrics.syncs_per_step is None


def test_cpu_collective_time_is_communication_not_compute():
    """DDP calls c10d::allreduce_ from inside AccumulateGrad; gloo runs the collective on its own thread."""
    r = analyze(step(0, 0, 100), X("cpu_op", "autograd::engine::evaluate_function: AccumulateGrad", 0, 30),
                X("cpu_op", "c10d::allreduce_", 10, 20),
                X("user_annotation", "gloo:all_reduce", 15, 75, tid=2))
    assert r.breakdown_profiled.buckets == pytest.approx({"cpu_ops": 10, "data": 0, "communication": 80,
                                                 "other_host": 10})
    assert r.metrics.comm_ms_per_step == pytest.approx(0.080)
    assert r.verdict == "communication_bound"


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)).map(lambda p: (p[0], p[0] + p[1])),
                     max_size=12)


def grid(ivs) -> set[int]:
    # integer µs, whole-valued: an IntervalSet holds its bounds as floats, as a trace's times are
    return {t for s, e in ivs for t in range(int(s), int(e))}


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, st.integers(0, 80), st.integers(0, 80))
def test_interval_set_matches_brute_force(a, b, lo, hi):
    A, B = IntervalSet(a), IntervalSet(b)
    assert A.total() == len(grid(a))
    assert A.length_within(lo, hi) == len({t for t in grid(a) if lo <= t < hi})
    assert grid(A.gaps(lo, hi)) == {t for t in range(lo, hi) if t not in grid(a)}
    assert grid(intersect(A, B)) == grid(a) & grid(b)
    assert grid(subtract(A, B)) == grid(a) - grid(b)
    pieces = pieces_by_priority(lo, hi, [A, B])
    assert pieces == [len({t for t in grid(a) if lo <= t < hi}),
                      len({t for t in grid(b) - grid(a) if lo <= t < hi}),
                      len({t for t in range(lo, hi)} - grid(a) - grid(b))]


@settings(max_examples=200, deadline=None)
@given(intervals, st.booleans())
def test_a_set_of_sorted_intervals_is_the_set_of_them_in_any_order(a, reverse):
    """IntervalSet takes intervals sorted by start as they are (no sort, no copy of the caller's arrays kept),
    and gives the same set, bounds and running sums as from the same intervals in another order."""
    ordered = sorted(a, key=lambda p: p[0])
    starts = np.array([p[0] for p in ordered], dtype=np.float64)
    ends = np.array([p[1] for p in ordered], dtype=np.float64)
    mixed = sorted(a, reverse=reverse)
    made = IntervalSet.from_arrays(starts, ends)
    other = IntervalSet.from_arrays([p[0] for p in mixed], [p[1] for p in mixed])
    for x, y in zip((*made.arrays(), made._p), (*other.arrays(), other._p)):
        assert x.tolist() == y.tolist()
    starts[:] = ends[:] = -1.0  # the caller's arrays changed afterwards: the set is not
    assert made.arrays()[0].tolist() == other.arrays()[0].tolist() and made.total() == len(grid(a))


def _overlap_by_sweep(a_starts, a_ends, b_starts, b_ends) -> IntervalSet:
    """intervals._overlap's reference: a sweep over both sets' bounds, +1 at a start and -1 at an end (an end
    before a start at the same instant: the intervals are half-open), covered by both where the running count
    is 2."""
    bounds = np.concatenate((a_starts, a_ends, b_starts, b_ends))
    step = np.concatenate((np.ones(a_starts.size), -np.ones(a_ends.size), np.ones(b_starts.size),
                           -np.ones(b_ends.size)))
    order = np.lexsort((step, bounds))
    bounds, count = bounds[order], np.cumsum(step[order])
    both = np.flatnonzero(count == 2)
    return IntervalSet.from_arrays(bounds[both], bounds[both + 1])


@settings(max_examples=400, deadline=None)
@given(intervals, intervals, st.sampled_from([0.0, 0.5, 1 / 3]))
def test_overlap_is_the_sweeps(a, b, shift):
    """intersect and subtract find each interval's partners by bisection; the reference is the sweep over all
    bounds. The same arrays (starts, ends and running sums), with shared and touching bounds."""
    A = IntervalSet([(s + shift, e + shift) for s, e in a])
    B = IntervalSet([(s, e + shift) for s, e in b])
    pairs = [(A._s, A._e, B._s, B._e),
             (A._s, A._e, np.concatenate(([-np.inf], B._e)), np.concatenate((B._s, [np.inf])))]
    for args in pairs:
        fast, sweep = intervals_module._overlap(*args), _overlap_by_sweep(*args)
        assert fast._s.tolist() == sweep._s.tolist() and fast._e.tolist() == sweep._e.tolist()
        assert fast._p.tolist() == sweep._p.tolist()


@settings(max_examples=300, deadline=None)
@given(intervals, st.lists(st.tuples(st.integers(-5, 90), st.integers(-5, 90)), max_size=8),
       st.floats(0, 1))
def test_the_gaps_of_many_ranges_at_once_are_each_ranges_own(a, ranges, shift):
    """gaps_of gives, range by range, exactly the arrays gap_arrays gives (ranges empty, reversed, inside an
    interval or around all of them; fractional bounds too), and sums over its slices are the same floats."""
    A = IntervalSet([(s + shift, e + shift) for s, e in a])
    lo = np.array([r[0] + shift / 2 for r in ranges], dtype=np.float64)
    hi = np.array([r[1] + shift / 3 for r in ranges], dtype=np.float64)
    g0, g1, bounds = A.gaps_of(lo, hi)
    assert len(bounds) == len(ranges) + 1 and bounds[-1] == len(g0) == len(g1)
    for k in range(len(ranges)):
        one0, one1 = A.gap_arrays(float(lo[k]), float(hi[k]))
        assert g0[bounds[k]:bounds[k + 1]].tolist() == one0.tolist()
        assert g1[bounds[k]:bounds[k + 1]].tolist() == one1.tolist()
        assert float((g1 - g0)[bounds[k]:bounds[k + 1]].sum()) == float((one1 - one0).sum())


def test_a_traces_interval_sets_are_built_once_and_let_go_with_it():
    """One analysis asks for the host sets of a trace several times: built once, and released with the trace
    (a long-running process, such as a training loop's handler, must not keep the last trace's sets)."""
    import gc
    import weakref
    from pathlib import Path

    from stepscope.analysis.breakdown import host_sets
    from stepscope.analysis.stream_parse import parse_trace_file

    path = next((Path(__file__).parent / "data" / "eager_bs128").glob("*.pt.trace.json*"))
    trace = parse_trace_file(path, "w", "1")
    sets = host_sets(trace)
    assert host_sets(trace) is sets and sets.busy.total() > 0
    held = weakref.ref(sets)
    del sets, trace  # nothing else asked for sets since: only the trace's end can let them go
    gc.collect()
    assert held() is None
    first, second = parse_trace_file(path, "w", "1"), parse_trace_file(path, "w", "1")
    assert host_sets(first) is not host_sets(second)  # an equal trace is another trace


def test_the_modelled_inflation_never_takes_the_whole_step():
    """A loop of 0.2 ms CPU steps whose recorded events the model charges 0.25 ms: the estimate stays a fifth
    of the profiled step (the profiler never cost more than about 3x a step over the H100 calibration),
    instead of 0.00 ms."""
    from stepscope.analysis.breakdown import Breakdown
    from stepscope.analysis.overhead import Inflation
    from stepscope.analysis.unprofiled import MAX_INFLATION_SHARE, unprofiled_view

    steps = 3
    profiled = Breakdown({"cpu_ops": 150.0 * steps, "data": 0.0, "other_host": 50.0 * steps,
                          "communication": 0.0}, 200.0 * steps, steps)
    view = unprofiled_view(profiled, 0.2, 0.0, Inflation(0.25, 0.17, 0.32, {}), loader_paced=False)
    step = view.breakdown.total_us / steps / 1e3
    assert step == pytest.approx(0.2 * (1 - MAX_INFLATION_SHARE))
    assert view.low.total_us > 0 and view.high.total_us > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64)), st.floats(-1e6, 1e6),
       st.floats(-1e6, 1e6))
def test_times_are_the_sorted_tuple_they_stand_for(values, lo, hi):
    """A trace's Python-frame starts are kept as a float64 array (events.Times): sorted as Python's sorted()
    sorts them (NaN included), equal to that tuple, and cut as bisect cuts it."""
    from bisect import bisect_left, bisect_right

    from stepscope.analysis.events import Times, TimesBuilder

    times, ref = Times.sorted(values), tuple(sorted(values))
    assert len(times) == len(ref) and bool(times) == bool(ref)
    assert [repr(t) for t in times] == [repr(t) for t in ref]  # -0.0 and 0.0, NaN: each where sorted() put it
    if not any(v != v for v in values):
        assert times == ref and times == Times.sorted(ref)
        assert times.between(lo, hi) == ref[bisect_left(ref, lo):bisect_right(ref, hi)]
        assert times.count_between(lo, hi) == bisect_left(ref, hi) - bisect_left(ref, lo)
    built = TimesBuilder()  # one at a time and as arrays, in any mix: the same times
    half = len(values) // 2
    built.extend(values[:half])
    built.extend_array(np.array(values[half:], dtype=np.float64))
    assert [repr(t) for t in built.build()] == [repr(t) for t in ref]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=2, max_size=30), st.data())
def test_a_steps_median_of_the_others_is_statistics_median(durs, data):
    """The cold-step rule compares each step with the median of the others (trust.py): taken from the sorted
    durations, the same float as statistics.median of the others."""
    import statistics

    from stepscope.analysis.trust import _median_without

    i = data.draw(st.integers(0, len(durs) - 1))
    others = statistics.median(d for j, d in enumerate(durs) if j != i)
    assert repr(_median_without(sorted(durs), durs[i])) == repr(others)

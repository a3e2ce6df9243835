"""bench_graph_gaps' kernel time: the union of kernel intervals, overlaps counted once."""

from __future__ import annotations

from stepscope.bench.graph_gaps import kernel_union_ms


def test_overlapping_and_nested_kernels_count_once():
    events = [{"ts": 30, "dur": 5}, {"ts": 0, "dur": 10}, {"ts": 5, "dur": 10}, {"ts": 6, "dur": 2}]
    assert kernel_union_ms(events) == 0.020  # 0-15 and 30-35 µs
    assert kernel_union_ms([]) == 0.0

"""Profiling cycles: the one rule that groups a run's spans into cycles and numbers them, for the cross-rank
analysis (cross_rank.py), the report's figures per cycle (report/summary.py) and the tab.

    cycles(spans, worker=lambda s: s.worker, span=lambda s: s.span)   # [[cycle 0's spans], [cycle 1's], ...]

Cycle i holds each worker's i-th span, as torch-tb-profiler matches the traces of one cycle across ranks
(``tensorboard_trace_handler`` stamps each rank's file with its own time, so the span strings differ between
ranks). A worker's spans are in numeric order where they are numbers (a handler's "9" before "10"), and
timestamps of one length in string order. Cycles are numbered from 0, as cycles.jsonl, diagnosis.md and the tab
number them. Torch-free.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def span_order(span: str) -> tuple[int, str]:
    """A worker's spans in order: numbers by value ("9" before "10"), timestamps of one length as strings."""
    return len(span), span


def cycles(items: Iterable[T], worker: Callable[[T], str], span: Callable[[T], str]) -> list[list[T]]:
    """The items grouped into profiling cycles, in order: cycle i (from 0) holds each worker's i-th span."""
    by_worker: dict[str, list[T]] = defaultdict(list)
    for item in items:
        by_worker[worker(item)].append(item)
    grouped: list[list[T]] = []
    for own in by_worker.values():
        for i, item in enumerate(sorted(own, key=lambda x: span_order(span(x)))):
            while len(grouped) <= i:
                grouped.append([])
            grouped[i].append(item)
    return grouped

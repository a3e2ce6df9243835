"""Interval arithmetic on the trace's timeline (µs): unions, clipping, intersection, gaps.

An ``IntervalSet`` is a sorted union of disjoint half-open intervals ``[start, end)``. Every question
such as "how much of this window was the GPU busy / the host inside an op / waiting for data" is about
lengths of intersections of such sets, answered here with bisection so that thousands of gaps stay cheap.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable


class IntervalSet:
    """A union of intervals, merged on construction. Immutable by convention."""

    __slots__ = ("starts", "ends", "_prefix")

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        starts: list[float] = []
        ends: list[float] = []
        for s, e in sorted((s, e) for s, e in intervals if e > s):
            if starts and s <= ends[-1]:
                if e > ends[-1]:
                    ends[-1] = e
            else:
                starts.append(s)
                ends.append(e)
        self.starts, self.ends = starts, ends
        prefix = [0.0]
        for s, e in zip(starts, ends, strict=True):
            prefix.append(prefix[-1] + (e - s))
        self._prefix = prefix

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self):
        return iter(zip(self.starts, self.ends, strict=True))

    def total(self) -> float:
        return self._prefix[-1]

    def covers(self, t: float) -> bool:
        i = bisect_right(self.starts, t) - 1
        return i >= 0 and t < self.ends[i]

    def length_within(self, lo: float, hi: float) -> float:
        """Length of the part of this set inside ``[lo, hi)``."""
        if hi <= lo or not self.starts:
            return 0.0
        i = bisect_right(self.ends, lo)  # first interval that ends after lo
        j = bisect_left(self.starts, hi)  # intervals [i, j) start before hi
        if j <= i:
            return 0.0
        length = self._prefix[j] - self._prefix[i]
        length -= max(0.0, lo - self.starts[i])
        length -= max(0.0, self.ends[j - 1] - hi)
        return length

    def clip(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """The intervals of this set inside ``[lo, hi)``, cut at the edges."""
        if hi <= lo:
            return []
        i = bisect_right(self.ends, lo)
        j = bisect_left(self.starts, hi)
        return [(max(s, lo), min(e, hi)) for s, e in zip(self.starts[i:j], self.ends[i:j], strict=True)]

    def gaps(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """The complement of this set inside ``[lo, hi)``."""
        out = []
        cursor = lo
        for s, e in self.clip(lo, hi):
            if s > cursor:
                out.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < hi:
            out.append((cursor, hi))
        return out



def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """``a ∩ b``."""
    out = []
    for s, e in a:
        out.extend(b.clip(s, e))
    return IntervalSet(out)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """``a \\ b``."""
    out = []
    for s, e in a:
        out.extend(b.gaps(s, e))
    return IntervalSet(out)


def pieces_by_priority(lo: float, hi: float, layers: list[IntervalSet]) -> list[float]:
    """Split ``[lo, hi)`` among ``layers`` by priority: an instant counts for the first layer covering it.

    Returns one length per layer plus a last entry for the time no layer covers.
    """
    remaining = [(lo, hi)]
    lengths = []
    for layer in layers:
        taken = 0.0
        rest = []
        for s, e in remaining:
            taken += layer.length_within(s, e)
            rest.extend(layer.gaps(s, e))
        lengths.append(taken)
        remaining = rest
    lengths.append(sum(e - s for s, e in remaining))
    return lengths

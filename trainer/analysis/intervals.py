"""Interval arithmetic on the trace's timeline (µs): unions, clipping, intersection, gaps.

An ``IntervalSet`` is a sorted union of disjoint half-open intervals ``[start, end)``. Every question
such as "how much of this window was the GPU busy / the host inside an op / waiting for data" is about
lengths of intersections of such sets, answered here with bisection so that thousands of gaps stay cheap;
``gap_arrays`` and ``lengths_within`` answer them for many ranges at once, as numpy arrays, with the same
arithmetic as their one-range forms.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import chain

import numpy as np


class IntervalSet:
    """A union of intervals, merged on construction. Immutable by convention."""

    __slots__ = ("_lists", "_s", "_e", "_p")

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        # the pairs' numbers in one pass in C: a million spans in a quarter of the time of a list of pairs
        both = np.fromiter(chain.from_iterable(intervals), dtype=np.float64).reshape(-1, 2)
        self._merge(both[:, 0], both[:, 1])

    @classmethod
    def from_arrays(cls, starts, ends) -> IntervalSet:
        """The union of ``[starts[i], ends[i])``: sequences of equal length (lists or numpy arrays)."""
        out = cls.__new__(cls)
        out._merge(np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64))
        return out

    def _merge(self, starts: np.ndarray, ends: np.ndarray) -> None:
        keep = ends > starts
        if not keep.all():
            starts, ends = starts[keep], ends[keep]
        self._lists = None  # starts, ends and prefix as lists, for the one-range questions: made when asked
        if starts.size == 0:
            self._s, self._e, self._p = starts, ends, np.zeros(1)
            return
        if not np.all(starts[1:] >= starts[:-1]):  # sorted already (a device's activity): its stable order
            order = np.argsort(starts, kind="stable")
            starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends)  # the furthest end of the intervals so far
        # an interval opens a new piece where it starts after everything before it has ended
        opens = np.concatenate(([True], starts[1:] > reach[:-1]))
        first = np.flatnonzero(opens)
        merged_starts = starts[first]
        merged_ends = reach[np.concatenate((first[1:] - 1, [reach.size - 1]))]
        # running sum in order, as a Python loop would add them
        self._p = np.concatenate(([0.0], np.add.accumulate(merged_ends - merged_starts)))
        self._s, self._e = merged_starts, merged_ends

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The intervals' starts and ends as float64 arrays, for numpy work over all of them (not to be
        changed: the set keeps them)."""
        return self._s, self._e

    @property
    def starts(self) -> list[float]:
        return self._listed()[0]

    @property
    def ends(self) -> list[float]:
        return self._listed()[1]

    @property
    def _prefix(self) -> list[float]:
        return self._listed()[2]

    def _listed(self) -> tuple[list, list, list]:
        if self._lists is None:
            self._lists = (self._s.tolist(), self._e.tolist(), self._p.tolist())
        return self._lists

    def union(self, other: IntervalSet) -> IntervalSet:
        return IntervalSet.from_arrays(np.concatenate((self._s, other._s)), np.concatenate((self._e, other._e)))

    def gap_arrays(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """``gaps(lo, hi)`` as two arrays, (starts, ends)."""
        if hi <= lo:
            return np.empty(0), np.empty(0)
        i = bisect_right(self.ends, lo)
        j = bisect_left(self.starts, hi)
        g0 = np.concatenate(([lo], np.minimum(self._e[i:j], hi)))
        g1 = np.concatenate((np.maximum(self._s[i:j], lo), [hi]))
        keep = g1 > g0
        return g0[keep], g1[keep]

    def gaps_of(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``gap_arrays`` of each range ``[lo[k], hi[k])`` at once: the gaps' starts and ends, all ranges' in
        range order, and ``bounds`` (len(lo) + 1 offsets): range k's gaps are ``[bounds[k]:bounds[k + 1]]``,
        the arrays ``gap_arrays(lo[k], hi[k])`` gives."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        i = np.searchsorted(self._e, lo, side="right")  # as bisect_right(self.ends, lo)
        j = np.searchsorted(self._s, hi, side="left")  # as bisect_left(self.starts, hi): j >= i
        count = np.where(hi > lo, j - i + 1, 0)  # range k: [lo] + its intervals' ends, its starts + [hi]
        at, r = _spread(count)  # each candidate gap's range, and its place in it
        last = r == count[at] - 1
        inner = i[at] + r  # interval i + r: the one that ends the gap (its start), and follows the gap r - 1
        top = max(self._e.size - 1, 0)  # indices clipped only where np.where then takes lo or hi instead
        ends = self._e[np.minimum(np.maximum(inner - 1, 0), top)] if self._e.size else lo[at]
        starts = self._s[np.minimum(inner, top)] if self._s.size else hi[at]
        g0 = np.where(r == 0, lo[at], np.minimum(ends, hi[at]))
        g1 = np.where(last, hi[at], np.maximum(starts, lo[at]))
        keep = g1 > g0
        bounds = np.concatenate(([0], np.cumsum(np.bincount(at[keep], minlength=len(lo)))))
        return g0[keep], g1[keep], bounds

    def lengths_within(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``length_within`` of each range ``[lo[k], hi[k])``."""
        out = np.zeros(lo.shape)
        if self._s.size == 0 or lo.size == 0:
            return out
        i = np.searchsorted(self._e, lo, side="right")  # first interval that ends after lo
        j = np.searchsorted(self._s, hi, side="left")  # intervals [i, j) start before hi
        some = (hi > lo) & (j > i)
        i, j, lo, hi = i[some], j[some], lo[some], hi[some]
        length = self._p[j] - self._p[i]
        length -= np.maximum(0.0, lo - self._s[i])
        length -= np.maximum(0.0, self._e[j - 1] - hi)
        out[some] = length
        return out

    def __len__(self) -> int:
        return self._s.size

    def __iter__(self):
        return iter(zip(self.starts, self.ends, strict=True))

    def total(self) -> float:
        return float(self._p[-1])

    def covers(self, t: float) -> bool:
        i = bisect_right(self.starts, t) - 1
        return i >= 0 and t < self.ends[i]

    def covers_each(self, times) -> np.ndarray:
        """``covers`` of each of ``times`` (a sequence or an array), as a bool array."""
        t = np.asarray(times, dtype=np.float64)
        if self._s.size == 0:
            return np.zeros(t.shape, dtype=bool)
        i = np.searchsorted(self._s, t, side="right") - 1
        return (i >= 0) & (t < self._e[np.maximum(i, 0)])

    def length_within(self, lo: float, hi: float) -> float:
        """Length of the part of this set inside ``[lo, hi)``."""
        if hi <= lo or self._s.size == 0:
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
    return _overlap(a._s, a._e, b._s, b._e)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """``a \\ b``: ``a`` intersected with the gaps of ``b``."""
    return _overlap(a._s, a._e, np.concatenate(([-np.inf], b._e)), np.concatenate((b._s, [np.inf])))


def _overlap(a_starts, a_ends, b_starts, b_ends) -> IntervalSet:
    """Where two unions of disjoint intervals, each sorted, both hold: each interval of one against the
    intervals of the other that overlap it (found by bisection, for all at once), cut to their common part.
    The pieces are disjoint and in order; IntervalSet then joins those that touch, so the set is the one a
    sweep over all the bounds gives (the tests hold it to that sweep)."""
    if a_starts.size == 0 or b_starts.size == 0:
        return IntervalSet.from_arrays(a_starts[:0], a_ends[:0])
    first = np.searchsorted(b_ends, a_starts, side="right")  # the first of b that ends after a's start
    stop = np.searchsorted(b_starts, a_ends, side="left")  # b's that start before a's end: first .. stop - 1
    i, r = _spread(np.maximum(stop - first, 0))
    j = first[i] + r
    return IntervalSet.from_arrays(np.maximum(a_starts[i], b_starts[j]), np.minimum(a_ends[i], b_ends[j]))


def _spread(count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``count[k]`` items in each of several ranges: every item's range, and its place (0, 1, ...) in it."""
    owner = np.repeat(np.arange(len(count)), count)
    return owner, np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)


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

"""A trace's host ops as numpy columns, built once per trace for the passes that scan all of them.

    cols = op_columns(trace)
    cols.start, cols.end          # float64 arrays, one entry per trace.ops entry, in its order
    cols.thread, cols.threads     # int64 codes per op (0, 1, ... by first appearance), and {tid: code}
    cols.names                    # the ops' names, a tuple in the same order
    dev = device_columns(trace)   # the device activity: start, end, is_copy, is_comm (nccl) per entry
    dev.spans(dev.is_comm)        # the union of some of them, as an IntervalSet

A large trace holds about a million ops; reading one field of each from the event tuples costs more than
the numpy work done with it, so it is done once. Torch-free.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from stepscope.analysis.events import ParsedTrace, is_comm_kernel
from stepscope.analysis.intervals import IntervalSet
from stepscope.analysis.per_trace import per_trace


class OpColumns(NamedTuple):
    names: tuple
    thread: np.ndarray
    threads: dict
    start: np.ndarray
    end: np.ndarray


@per_trace
def op_columns(trace: ParsedTrace) -> OpColumns:
    if not trace.ops:
        empty = np.empty(0)
        return OpColumns((), empty.astype(np.int64), {}, empty, empty)
    ops = trace.ops
    names, tids = tuple([o.name for o in ops]), [o.tid for o in ops]
    starts, ends = [o.start for o in ops], [o.end for o in ops]
    threads = {tid: code for code, tid in enumerate(dict.fromkeys(tids))}  # in order of first appearance
    thread = np.fromiter(map(threads.__getitem__, tids), dtype=np.int64, count=len(tids))
    return OpColumns(names, thread, threads, np.array(starts, dtype=np.float64), np.array(ends, dtype=np.float64))


class DeviceColumns(NamedTuple):
    start: np.ndarray
    end: np.ndarray
    is_copy: np.ndarray  # a memcpy
    is_comm: np.ndarray  # a collective kernel (events.is_comm_kernel)

    def spans(self, mask: np.ndarray | None = None) -> IntervalSet:
        """The union of the activities' [start, end) where ``mask`` holds (all of them by default)."""
        if mask is None:
            return IntervalSet.from_arrays(self.start, self.end)
        return IntervalSet.from_arrays(self.start[mask], self.end[mask])


@per_trace
def device_columns(trace: ParsedTrace) -> DeviceColumns:
    device = trace.device
    comm_names = {name for name in {d.name for d in device} if is_comm_kernel(name)}
    return DeviceColumns(np.array([d.start for d in device], dtype=np.float64),
                         np.array([d.end for d in device], dtype=np.float64),
                         np.array([d.kind == "memcpy" for d in device], dtype=bool),
                         np.array([d.name in comm_names for d in device], dtype=bool) if comm_names
                         else np.zeros(len(device), dtype=bool))

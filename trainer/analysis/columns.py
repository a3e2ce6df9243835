"""A trace's host ops as numpy columns, built once per trace for the passes that scan all of them.

    cols = op_columns(trace)
    cols.start, cols.end          # float64 arrays, one entry per trace.ops entry, in its order
    cols.thread, cols.threads     # int64 codes per op (0, 1, ... by first appearance), and {tid: code}
    cols.names                    # the ops' names, a tuple in the same order
    dev = device_columns(trace)   # the device activity: start, end, is_copy, is_kernel, is_comm (nccl) and
                                  # name (a code into dev.names) per entry
    dev.spans(dev.is_comm)        # the union of some of them, as an IntervalSet
    runtime_columns(trace)        # the runtime calls' start, end
    launch_columns(trace)         # per device activity, its launch call's start, end (NaN: none in the trace)

A large trace holds about a million ops; reading one field of each from the event tuples costs more than
the numpy work done with it, so it is done once. Torch-free.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from stepscope.analysis.events import (
    DEVICE_KIND_NAMES,
    DeviceEvent,
    DeviceEvents,
    HostEvent,
    HostEvents,
    ParsedTrace,
    correlations_of,
    is_comm_kernel,
)
from stepscope.analysis.intervals import IntervalSet
from stepscope.analysis.per_trace import per_trace
from stepscope.trace.fastread import as_list

# fields of the event tuples by position, read in C (events.HostEvent, events.DeviceEvent)
_NAME, _TID, _START, _END, _CORRELATION = map(itemgetter, range(5))
_DEVICE_KIND, _DEVICE_START, _DEVICE_END, _DEVICE_CORRELATION = map(itemgetter, (1, 4, 5, 6))
assert HostEvent._fields[:5] == ("name", "tid", "start", "end", "correlation")
assert DeviceEvent._fields[:7] == ("name", "kind", "device", "stream", "start", "end", "correlation")


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
    if isinstance(ops, HostEvents):  # the streamed parse's: columns already
        names, times = tuple(ops.names), (ops.start, ops.end)
        tids = ops.tid_numbers if ops.tid_numbers is not None else ops.tids
    else:
        names, tids, times = tuple(map(_NAME, ops)), list(map(_TID, ops)), _times(ops, _START, _END)
    threads, thread = _thread_codes(tids)
    return OpColumns(names, thread, threads, *times)


@per_trace
def op_name_codes(trace: ParsedTrace) -> tuple[np.ndarray, list]:
    """Each op's name as a code into a list of names (which may hold more names than the ops'), for passes
    that ask something of every op's name: ask it of each listed name once, then index by the codes. The
    parse's codes where it kept them (events.NameTable), else made here."""
    ops = trace.ops
    if isinstance(ops, HostEvents) and ops.codes is not None:
        return ops.codes, ops.table
    names = op_columns(trace).names
    code = {name: k for k, name in enumerate(dict.fromkeys(names))}
    return np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=len(names)), list(code)


def _thread_codes(tids: list | np.ndarray) -> tuple[dict, np.ndarray]:
    """{thread: code}, codes 0, 1, ... in order of first appearance, and each op's code. Threads that are all
    integers (as a trace's are; an int64 array, as the parse keeps them) are coded by numpy; any others (a
    name, a number beyond int64) by a dict."""
    if isinstance(tids, np.ndarray):
        numbers = tids
    else:
        numbers = np.array(tids) if tids else np.zeros(0, dtype=np.int64)
    if numbers.dtype != np.int64 or numbers.ndim != 1:
        threads = {tid: code for code, tid in enumerate(dict.fromkeys(tids))}
        return threads, np.fromiter(map(threads.__getitem__, tids), dtype=np.int64, count=len(tids))
    # a thread's ops come in runs (a step's forward on one, its backward on another): the distinct threads are
    # found among the runs' values, a few hundred where the ops are a million
    runs = np.flatnonzero(np.concatenate(([len(numbers) > 0], numbers[1:] != numbers[:-1])))  # their starts
    _, first, inverse = np.unique(numbers[runs], return_index=True, return_inverse=True)
    by_first = np.argsort(first)  # the distinct threads in order of first appearance
    code = np.empty_like(by_first)
    code[by_first] = np.arange(len(by_first))
    at = runs[first[by_first]].tolist()  # each thread's first op; its key is the value given (True stays True)
    keys = numbers[at].tolist() if isinstance(tids, np.ndarray) else list(map(tids.__getitem__, at))
    threads = {tid: k for k, tid in enumerate(keys)}
    return threads, np.repeat(code[inverse.reshape(-1)], np.diff(np.append(runs, len(numbers))))


def _times(events, start, end) -> tuple[np.ndarray, np.ndarray]:
    """The events' start and end fields (read by ``start``/``end``, item getters) as float64 columns."""
    return (np.fromiter(map(start, events), dtype=np.float64, count=len(events)),
            np.fromiter(map(end, events), dtype=np.float64, count=len(events)))


class RuntimeColumns(NamedTuple):
    start: np.ndarray
    end: np.ndarray


@per_trace
def runtime_columns(trace: ParsedTrace) -> RuntimeColumns:
    """The runtime calls' start and end, in trace.runtime's order."""
    runtime = trace.runtime
    if isinstance(runtime, HostEvents):
        return RuntimeColumns(runtime.start, runtime.end)
    return RuntimeColumns(*_times(runtime, _START, _END))


class LaunchColumns(NamedTuple):
    found: np.ndarray  # bool: the activity's launch is in the trace
    start: np.ndarray  # its host start and end; NaN where not found
    end: np.ndarray


@per_trace
def launch_columns(trace: ParsedTrace) -> LaunchColumns:
    """Per device activity (trace.device's order), its launch: the runtime call with the same correlation id
    (of several, the last)."""
    runtime, device = trace.runtime, trace.device
    activities = (device.correlation_column if isinstance(device, DeviceEvents)
                  else list(map(_DEVICE_CORRELATION, device)))
    launches = runtime.correlation_column if isinstance(runtime, HostEvents) else None
    rows = _launch_rows(launches if isinstance(launches, np.ndarray) else correlations_of(runtime), activities)
    found = rows >= 0
    start = np.full(len(device), np.nan)
    end = np.full(len(device), np.nan)
    if np.any(found):
        rt = runtime_columns(trace)
        start[found], end[found] = rt.start[rows[found]], rt.end[rows[found]]
    return LaunchColumns(found, start, end)


_EXACT = 2.0 ** 53  # float64 holds every integer below this exactly


def _launch_rows(launches: list | np.ndarray, activities: list | np.ndarray) -> np.ndarray:
    """Per entry of ``activities`` (correlation ids: a list, or int64), the index of the last entry of
    ``launches`` with the same id; -1 where none has it (or the id is None). The ids sorted as float64, which
    holds a trace's integer ids exactly; ids of any other kind are looked up in a dict, with the same answer."""
    try:
        r, d = _floats(launches), _floats(activities)
    except (TypeError, ValueError, OverflowError):
        r = d = None
    if r is None or r.ndim != 1 or d.ndim != 1 or not np.all(np.abs(np.nan_to_num(r)) < _EXACT):
        launches, activities = as_list(launches), as_list(activities)
        row = dict(zip(launches, range(len(launches))))
        row.pop(None, None)
        return np.fromiter(map(row.get, activities, repeat(-1)), dtype=np.int64, count=len(activities))
    known = np.flatnonzero(~np.isnan(r))  # None: no id
    order = known[np.argsort(r[known], kind="stable")]  # equal ids in launch order: the last one is theirs
    ids = r[order]
    at = np.maximum(np.searchsorted(ids, d, side="right") - 1, 0)
    hit = (ids[at] == d) if ids.size else np.zeros(d.shape, dtype=bool)
    return np.where(hit, order[at], -1) if ids.size else np.full(d.shape, -1, dtype=np.int64)


def _floats(values: list | np.ndarray) -> np.ndarray:
    """``np.array(values, dtype=np.float64)``: read in one typed pass where every value is a number (a trace's
    ids), else (None, a nested sequence) by np.array itself; both raise alike for a value that is neither."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64)
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except (TypeError, ValueError):
        return np.array(values, dtype=np.float64)


class DeviceColumns(NamedTuple):
    start: np.ndarray
    end: np.ndarray
    is_copy: np.ndarray  # a memcpy
    is_comm: np.ndarray  # a collective kernel (events.is_comm_kernel)
    is_kernel: np.ndarray  # a kernel (not a memcpy or memset)
    name: np.ndarray  # int64: the activity's name as a code into ``names``
    names: list  # the distinct names, in order of first appearance

    def spans(self, mask: np.ndarray | None = None) -> IntervalSet:
        """The union of the activities' [start, end) where ``mask`` holds (all of them by default)."""
        if mask is None:
            return IntervalSet.from_arrays(self.start, self.end)
        return IntervalSet.from_arrays(self.start[mask], self.end[mask])

    def by_name(self, rows: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
        """The activities at ``rows`` grouped by name: the distinct names in order of first appearance there,
        each row's index into them, and each name's time summed in the rows' order (bincount adds them one by
        one, as a loop over the rows would)."""
        order, renumber = _first_seen(self.name[rows], len(self.names))
        codes = renumber[self.name[rows]]
        total = np.bincount(codes, weights=self.end[rows] - self.start[rows], minlength=len(order))
        return [self.names[k] for k in order.tolist()], codes, total


@per_trace
def device_columns(trace: ParsedTrace) -> DeviceColumns:
    device, n = trace.device, len(trace.device)
    if isinstance(device, DeviceEvents) and device.codes is not None and device.kind_codes is not None:
        return _coded_device_columns(device)
    if isinstance(device, DeviceEvents):  # the streamed parse's: columns already
        names, kinds, times = device.names, device.kinds, (device.start, device.end)
    else:
        names, kinds = list(map(_NAME, device)), list(map(_DEVICE_KIND, device))
        times = _times(device, _DEVICE_START, _DEVICE_END)
    code = {name: k for k, name in enumerate(dict.fromkeys(names))}  # in order of first appearance
    comm = np.fromiter(map(is_comm_kernel, code), dtype=bool, count=len(code))
    name = np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=n)
    return DeviceColumns(*times,
                         np.fromiter(map("memcpy".__eq__, kinds), dtype=bool, count=n),
                         comm[name], np.fromiter(map("kernel".__eq__, kinds), dtype=bool, count=n),
                         name, list(code))


_MEMCPY, _KERNEL = DEVICE_KIND_NAMES.index("memcpy"), DEVICE_KIND_NAMES.index("kernel")


def _coded_device_columns(device: DeviceEvents) -> DeviceColumns:
    """device_columns from the parse's codes (DeviceEvents' ``codes`` into its table, ``kind_codes``), without
    the lists of names and kinds: the table's names renumbered in order of first appearance."""
    codes = device.codes
    order, renumber = _first_seen(codes, len(device.table))
    names = list(map(device.table.__getitem__, order.tolist()))
    comm = np.fromiter(map(is_comm_kernel, names), dtype=bool, count=len(names))
    name = renumber[codes]
    return DeviceColumns(device.start, device.end, device.kind_codes == _MEMCPY, comm[name],
                         device.kind_codes == _KERNEL, name, names)


def _first_seen(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """For codes in [0, size): the codes met, in order of first appearance, and ``renumber`` (size entries)
    giving each met code its index in that order (``renumber[codes]``: the codes renumbered so)."""
    n = len(codes)
    first = np.full(size, n, dtype=np.int64)  # each code's first row; n: not met
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    met = np.flatnonzero(first < n)
    order = met[np.argsort(first[met], kind="stable")]
    renumber = np.empty(size, dtype=np.int64)
    renumber[order] = np.arange(len(order), dtype=np.int64)
    return order, renumber

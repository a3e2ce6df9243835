"""The typed events of a Chrome trace written by ``torch.profiler``: what the parse (stream_parse.py) makes.

    parsed = parse_trace_file(path, worker="rank0", span="1795259107760373831")   # a ParsedTrace

The parse accepts the untouched original (``cuda_runtime``/``cuda_driver`` categories), our TensorBoard-adapted copy
(those rewritten to ``runtime``, DataLoader spans made ``cpu_op``) and plain ``tensorboard_trace_handler``
output. Times are µs, as in the file, counted from ``base_us``. Device work is linked to its launch by the
``correlation`` argument that both the runtime call and the kernel/memcpy/memset carry (the same id the
``ac2g`` flow events use). Of the Python-stack events (``python_function``) only their start times are kept:
they tell how much the profiler itself slowed the host (overhead.py), and a trace of a hot Python loop holds
hundreds of thousands of them. Of the few frames that last ``LONG_FRAME_US`` or more, the distinct names are
kept too: among them are the frames of the loop around the steps (a framework's ``Trainer``: its training
loop spans the recorded window and its step function a step), which tell the loop's style (step_range.py).
The frames of the model's own work are kept whole (``model_spans``): each ``nn.Module`` call (``nn.Module:
Name_0``) and the autograd engine's run of a backward (``<built-in method run_backward ...>``). The host's
time inside them is the model dispatching its ops (breakdown.py). The module calls are also kept with their
names and threads (``module_frames``): the bytes a module allocates are told by them (memory.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np
from stepscope.trace.fastread import as_list, as_objects
from stepscope.trace.vocabulary import DATA_RANGE, DEVICE_KINDS, OPERATOR_CATEGORIES
from stepscope.trace.vocabulary import STEPS_FROM_PROFILER as FROM_PROFILER

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")

HOST_OP_CATEGORIES = OPERATOR_CATEGORIES  # the analysis's name for them

# Runtime calls that block the host until the GPU has caught up.
SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
# Python frames (with_stack) of the model's own work: a module's call, the autograd engine running a backward
MODULE_FRAME_PREFIX = "nn.Module: "  # a module's call: "nn.Module: Linear_0" (class and instance index)
MODEL_FRAME_PREFIXES = (MODULE_FRAME_PREFIX.rstrip(), "<built-in method run_backward")
# record_function ranges of the model's own work: torch.optim names every optimizer's step and zero_grad
MODEL_ANNOTATION_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
DATA_ANNOTATIONS = {DATA_RANGE}  # stepscope's range around fetching the next batch
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms", "mpi:", "ucc:")
# a Python frame this long (µs) or longer has its name kept (ParsedTrace.long_frames): a training step's
# frame is longer under with_stack, and a few percent of a trace's frames are
LONG_FRAME_US = 100.0


class HostEvent(NamedTuple):
    """A span on a host thread: an op, an annotation or a runtime call. (Events are named tuples, cheap to
    make; the parse keeps a trace's ops and runtime calls, most of its events, as columns instead:
    HostEvents, which hands out these tuples when asked.)"""

    name: str
    tid: int | str
    start: float
    end: float
    correlation: int | None = None  # runtime calls only

    @property
    def dur(self) -> float:
        return self.end - self.start


# a device activity's kinds (vocabulary.DEVICE_KINDS' values), by the codes DeviceEvents.kind_codes holds
DEVICE_KIND_NAMES = tuple(dict.fromkeys(DEVICE_KINDS.values()))
DEVICE_KIND_CODES = {cat: DEVICE_KIND_NAMES.index(kind) for cat, kind in DEVICE_KINDS.items()}  # lower-cased
_KIND_OBJECTS = as_objects(list(DEVICE_KIND_NAMES))


class DeviceEvent(NamedTuple):
    """A kernel, memcpy or memset on a GPU stream."""

    name: str
    kind: str  # "kernel" | "memcpy" | "memset"
    device: int
    stream: int
    start: float
    end: float
    correlation: int | None

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Step:
    number: int
    start: float
    end: float


class MemorySample(NamedTuple):
    """A ``[memory]`` instant event: one allocation (``bytes`` > 0) or free (< 0) of the caching allocator, on
    the allocating thread, with the allocator's totals after it. The fields from ``total_reserved`` on are
    read from the same args of the same event (stream_collect.MEMORY_ARGS lists them for every reader)."""
    ts: float
    device_type: int  # 0 CPU, 1 CUDA (c10::DeviceType)
    total_allocated: int
    total_reserved: int = 0
    bytes: int = 0  # signed: an allocation is positive, a free negative
    addr: int = 0  # the block's address: an allocation and its free share it
    device_id: int = 0  # -1 for the CPU
    tid: int | str | None = None  # the allocating thread


class MemoryColumns:
    """``[memory]`` samples as columns, one per MemorySample field in its order: what the streamed parse
    collects (no tuple per event) and what the memory analysis reads. The times are a float64 array, the
    counters and threads int64 arrays (a column holding an integer beyond int64, or a thread that is no
    integer, stays a list): a large trace's half a million samples in a few tens of MB, where Python ints
    took four times that. A sequence of MemorySample (of Python numbers) to everything else (len, iteration,
    indexing, equality with a tuple of them); ``of`` makes one from such a sequence, as the other readers of
    traces give it. Columns are added piece by piece (``add_columns``) and joined when first read."""

    __slots__ = ("_columns", "_parts")

    def __init__(self, columns=None) -> None:
        self._columns: tuple | None = None
        self._parts: list[tuple] = []  # columns added since they were last joined
        if columns is not None:
            self.add_columns(columns)

    @classmethod
    def of(cls, memory) -> MemoryColumns:
        if isinstance(memory, cls):
            return memory
        memory = list(memory)
        return cls(zip(*memory)) if memory else cls()

    @property
    def columns(self) -> tuple:
        """The columns (see the class docstring): read-only arrays, or lists."""
        if self._columns is None or self._parts:
            parts = ([self._columns] if self._columns is not None else []) + self._parts
            self._columns = tuple(_join(k, [p[k] for p in parts]) for k in range(len(MemorySample._fields)))
            self._parts = []
        return self._columns

    def field(self, name: str):
        """The column of ``name``: an array, or a list (see the class docstring)."""
        return self.columns[MemorySample._fields.index(name)]

    def values(self, name: str, rows=None) -> list:
        """The column of ``name`` (at ``rows``, indices) as a list of Python values."""
        c = self.field(name)
        if rows is None:
            return c.tolist() if isinstance(c, np.ndarray) else list(c)
        if isinstance(c, np.ndarray):
            return c[np.asarray(rows, dtype=np.int64)].tolist()
        return list(map(c.__getitem__, np.asarray(rows, dtype=np.int64).tolist()))

    def take(self, indices) -> MemoryColumns:
        """The samples at ``indices`` (in their order)."""
        rows = np.asarray(indices, dtype=np.int64)
        return MemoryColumns(c[rows] if isinstance(c, np.ndarray) else list(map(c.__getitem__, rows.tolist()))
                             for c in self.columns)

    def add_columns(self, columns) -> None:
        """Append samples given as columns (one sequence per MemorySample field, in its order)."""
        part = tuple(_column(k, c) for k, c in enumerate(columns))
        if len(part) != len(MemorySample._fields):
            raise ValueError(f"{len(part)} columns, not one per MemorySample field")
        if len({len(c) for c in part}) != 1:
            raise ValueError("columns of different lengths")
        if len(part[0]):
            self._parts.append(part)

    def extend(self, samples) -> None:
        """Append MemorySamples (a reader that makes them one by one; add_columns is the cheap way)."""
        samples = list(samples)
        if samples:
            self.add_columns(zip(*samples))

    def append(self, sample: MemorySample) -> None:
        self.add_columns([v] for v in sample)

    def __len__(self) -> int:
        return len(self.columns[0])

    def __iter__(self):
        return map(MemorySample, *(self.values(name) for name in MemorySample._fields))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(range(len(self))[i])
        return MemorySample(*(c[i].item() if isinstance(c, np.ndarray) else c[i] for c in self.columns))

    def __eq__(self, other) -> bool:
        if isinstance(other, MemoryColumns):
            return all(_as_list(a) == _as_list(b) for a, b in zip(self.columns, other.columns))
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"MemoryColumns({len(self)} samples)"


_MEMORY_TID = len(MemorySample._fields) - 1  # the threads' column; 0 is the times', the rest counters'


def _column(k: int, values):
    """One added column as it is kept: the times as float64 and the counters and threads as int64 where
    every value is of that Python type and fits, else the list of values as they came (a thread may be
    named, or None; a counter may be beyond int64): never a value converted."""
    want = np.float64 if k == 0 else np.int64
    if isinstance(values, np.ndarray) and values.dtype == want:
        return values
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if not all(type(v) is (float if k == 0 else int) for v in values):
        return values
    try:
        return np.array(values, dtype=want)
    except OverflowError:  # an integer beyond int64
        return values


def _join(k: int, parts: list):
    if not parts:
        return [] if k == _MEMORY_TID else np.empty(0, dtype=np.float64 if k == 0 else np.int64)
    if all(isinstance(p, np.ndarray) for p in parts):
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if out.flags.writeable:
            out = out.copy() if out.base is not None else out
            out.flags.writeable = False
        return out
    return [v for p in parts for v in _as_list(p)]


def _as_list(c) -> list:
    return c.tolist() if isinstance(c, np.ndarray) else list(c)


def _picked(values: list | None, codes: np.ndarray | None, table, listed: list) -> list:
    """A column's entries at the rows ``listed``: from its list where it is made (``values``), else each row's
    code looked up in ``table``, without making the list."""
    if values is not None:
        return list(map(values.__getitem__, listed))
    return list(map(table.__getitem__, codes[listed].tolist()))


def _numbers(values) -> np.ndarray | None:
    """``values`` where the parse kept them as int64 (every one an integer), else None."""
    return values if isinstance(values, np.ndarray) else None


def _at(values, rows: np.ndarray, listed: list):
    """A column's entries at ``rows`` (``listed``: the same indices as a list), in its own form: int64 or list."""
    return values[rows] if isinstance(values, np.ndarray) else list(map(values.__getitem__, listed))


def _listed_at(values, rows: np.ndarray, listed: list) -> list:
    """A column's entries at ``rows`` as a list of Python values."""
    return values[rows].tolist() if isinstance(values, np.ndarray) else list(map(values.__getitem__, listed))


def _joined(columns: list):
    """Chunks' columns laid end to end: one int64 array where every chunk's is one, else a list."""
    if all(isinstance(c, np.ndarray) for c in columns):
        return np.concatenate(columns)
    return list(chain.from_iterable(as_list(c) if isinstance(c, np.ndarray) else c for c in columns))


def _one_table(chunks: list):
    """The table of names that every chunk's codes refer to, or None where they do not all refer to one (a
    chunk without codes): a join keeps the codes only then."""
    table = chunks[0].table
    return table if table is not None and all(c.table is table for c in chunks) else None


class _EventColumns:
    """What HostEvents and DeviceEvents share as a sequence of their event tuples: ``len``, a slice as
    ``take``, equality with a tuple or list of tuples (and with another of its kind by ``_same``, column by
    column), a hash of the tuples, the names (listed from the parse's codes when first asked for). A subclass
    holds ``_names``, ``codes``, ``table`` and ``start`` and defines ``take``, ``_row(i)`` (row i's tuple),
    ``_same(other)`` and ``__iter__``."""

    __slots__ = ()

    @property
    def names(self) -> list:
        """The names, a list; where the parse gave them as codes into a table (``_names`` None, ``codes``,
        ``table``), listed when first asked for."""
        if self._names is None:
            self._names = as_objects(self.table)[self.codes].tolist()
        return self._names

    def _names_at(self, listed: list) -> list:
        """The names of the rows ``listed`` (a list of indices), without listing every name."""
        return _picked(self._names, self.codes, self.table, listed)

    @staticmethod
    def _rows(rows) -> np.ndarray:
        """``rows`` (indices or a boolean mask over the events) as int64 indices."""
        rows = np.asarray(rows)
        return np.flatnonzero(rows) if rows.dtype == np.bool_ else rows.astype(np.int64)

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(range(len(self))[i])
        return self._row(i)

    def __eq__(self, other) -> bool:
        if isinstance(other, type(self)):
            return self._same(other)
        if isinstance(other, (tuple, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))


class HostEvents(_EventColumns):
    """Host events as columns: their names (a list of str), threads (a list), start and end (float64 arrays,
    read-only) and correlation ids (a list; None: every one None). What the streamed parse makes of a trace's
    ops and runtime calls (over a million in a large trace: no tuple per event, and the analysis reads the
    columns, columns.py, or makes tuples of the few rows it picks, ``events_at``). A sequence of HostEvent to everything else (len, iteration, indexing, equality with a
    tuple of them), each made when asked for and not kept; ``of`` makes one from such a sequence.

    The parse hands over three columns in a compact form, listed only when first asked for: the names as
    codes into a table (``codes``, ``table``; ``names`` None), and the threads and the correlation ids as
    int64 arrays where every one is an integer (``tid_numbers``, ``corr_numbers``; ``tids`` and
    ``correlation`` as those arrays). The passes over every event read those (columns.op_columns,
    columns.launch_columns, events.rows_named) and never make the lists of a million entries."""

    __slots__ = ("_names", "_tids", "start", "end", "_corr", "codes", "table", "tid_numbers", "corr_numbers")

    def __init__(self, names: list | None, tids: list | np.ndarray, start, end,
                 correlation: list | np.ndarray | None = None, codes: np.ndarray | None = None,
                 table: list | None = None) -> None:
        self.corr_numbers = _numbers(correlation)  # int64, where every id is an integer
        self._corr = None if self.corr_numbers is not None else correlation
        self.start = _frozen(start)
        self.end = _frozen(end)
        # where the parse knew them: each name's code, its index in ``table`` (a NameTable's names, which may
        # hold more names than these events'), for the passes that ask something of every name
        self.codes, self.table = (codes, table) if codes is not None else (None, None)
        if names is None and self.codes is None:
            raise ValueError("HostEvents needs the names, or their codes and table")
        self._names = names
        numbers = isinstance(tids, np.ndarray)
        self.tid_numbers = tids if numbers else None  # int64, where every thread is an integer
        self._tids = None if numbers else tids
        n = len(self.start)
        assert (names is None or len(names) == n) and len(tids) == n and len(self.end) == n
        assert correlation is None or len(correlation) == n
        assert self.codes is None or len(self.codes) == n

    @property
    def tids(self) -> list:
        if self._tids is None:
            self._tids = as_list(self.tid_numbers)
        return self._tids

    @property
    def correlation(self) -> list | None:
        """The correlation ids, a list; None where every one is None."""
        if self._corr is None and self.corr_numbers is not None:
            self._corr = as_list(self.corr_numbers)
        return self._corr

    @property
    def correlation_column(self) -> list | np.ndarray | None:
        """The correlation ids as the parse kept them: ``corr_numbers`` where it did, else ``correlation``."""
        return self.corr_numbers if self.corr_numbers is not None else self._corr

    @classmethod
    def of(cls, events) -> HostEvents:
        if isinstance(events, cls):
            return events
        events = list(events)
        if not events:
            return cls([], [], (), ())
        names, tids, start, end, corr = map(list, zip(*events))
        return cls(names, tids, start, end, None if all(c is None for c in corr) else corr)

    def take(self, rows) -> HostEvents:
        """The events at ``rows`` (indices or a boolean mask over the events), in their order."""
        rows = self._rows(rows)
        listed = rows.tolist()
        pick = lambda column: list(map(column.__getitem__, listed))  # noqa: E731
        corr = self.correlation_column
        return HostEvents(None if self.codes is not None else pick(self._names),
                          self.tid_numbers[rows] if self.tid_numbers is not None else pick(self._tids),
                          self.start[rows], self.end[rows], None if corr is None else _at(corr, rows, listed),
                          None if self.codes is None else self.codes[rows], self.table)

    def _tids_at(self, listed: list) -> list:
        if self.tid_numbers is not None:
            return self.tid_numbers[listed].tolist()
        return list(map(self._tids.__getitem__, listed))

    def at(self, rows) -> list[HostEvent]:
        """The events at ``rows`` (a sequence of indices), as a list of HostEvent."""
        rows = np.asarray(rows, dtype=np.int64)
        listed = rows.tolist()
        column = self.correlation_column
        corr = repeat(None) if column is None else _listed_at(column, rows, listed)
        return list(map(tuple.__new__, repeat(HostEvent),
                        zip(self._names_at(listed), self._tids_at(listed), self.start[rows].tolist(),
                            self.end[rows].tolist(), corr)))

    def __iter__(self):
        corr = repeat(None) if self.correlation is None else self.correlation
        return map(tuple.__new__, repeat(HostEvent),
                   zip(self.names, self.tids, self.start.tolist(), self.end.tolist(), corr))

    def _row(self, i) -> HostEvent:
        at = [int(self._rows([i])[0])]
        column = self.correlation_column
        return HostEvent(self._names_at(at)[0], self._tids_at(at)[0], float(self.start[i]), float(self.end[i]),
                         None if column is None else _listed_at(column, np.asarray(at), at)[0])

    def _same(self, other: HostEvents) -> bool:
        return (self.names == other.names and self.tids == other.tids
                and self.start.tolist() == other.start.tolist() and self.end.tolist() == other.end.tolist()
                and (self.correlation or [None] * len(self)) == (other.correlation or [None] * len(other)))

    def __reduce__(self):
        return HostEvents, (self._names if self.codes is None else None,
                            self.tid_numbers if self.tid_numbers is not None else self._tids, self.start,
                            self.end, self.correlation_column, self.codes, self.table)

    def __repr__(self) -> str:
        return f"HostEvents({len(self)} events)"


class DeviceEvents(_EventColumns):
    """Device activity as columns: names, kinds, devices, streams (lists), start and end (float64 arrays,
    read-only) and correlation ids (a list, None where an activity has none). What the streamed parse makes of
    a trace's kernels, memcpys and memsets (hundreds of thousands in a large trace: no tuple per activity;
    the analysis reads the columns, columns.device_columns). A sequence of DeviceEvent to everything else, as
    HostEvents is of HostEvent; ``of`` makes one from such a sequence.

    As HostEvents' names, the parse hands over the names as codes into a table (``codes``, ``table``; names
    None) and the kinds as codes into ``DEVICE_KIND_NAMES`` (``kind_codes``; kinds None), and the devices,
    streams and correlation ids as int64 arrays where every one is an integer (their ``*_column``), each
    listed only when first asked for; columns.device_columns and columns.launch_columns read those."""

    __slots__ = ("_names", "_kinds", "device_column", "stream_column", "correlation_column", "_listed",
                 "start", "end", "codes", "table", "kind_codes")

    def __init__(self, names: list | None, kinds: list | None, devices: list | np.ndarray,
                 streams: list | np.ndarray, start, end, correlation: list | np.ndarray,
                 codes: np.ndarray | None = None, table: list | None = None,
                 kind_codes: np.ndarray | None = None) -> None:
        # each a list, or an int64 array where every value is an integer (listed when first asked for)
        self.device_column, self.stream_column, self.correlation_column = devices, streams, correlation
        self._listed: dict = {}
        self.start = _frozen(start)
        self.end = _frozen(end)
        self.codes, self.table = (codes, table) if codes is not None else (None, None)
        self.kind_codes = kind_codes
        if (names is None and self.codes is None) or (kinds is None and kind_codes is None):
            raise ValueError("DeviceEvents needs the names and kinds, or their codes")
        self._names, self._kinds = names, kinds
        n = len(self.start)
        assert (names is None or len(names) == n) and (kinds is None or len(kinds) == n)
        assert len(devices) == len(streams) == len(self.end) == len(correlation) == n
        assert (self.codes is None or len(self.codes) == n) and (kind_codes is None or len(kind_codes) == n)

    @property
    def kinds(self) -> list:
        if self._kinds is None:
            self._kinds = _KIND_OBJECTS[self.kind_codes].tolist()
        return self._kinds

    def _list(self, name: str) -> list:
        column = getattr(self, name)
        if not isinstance(column, np.ndarray):
            return column
        if name not in self._listed:
            self._listed[name] = as_list(column)
        return self._listed[name]

    @property
    def devices(self) -> list:
        return self._list("device_column")

    @property
    def streams(self) -> list:
        return self._list("stream_column")

    @property
    def correlation(self) -> list:
        """The correlation ids, a list (None where an activity has none)."""
        return self._list("correlation_column")

    @classmethod
    def of(cls, events) -> DeviceEvents:
        if isinstance(events, cls):
            return events
        events = list(events)
        if not events:
            return cls([], [], [], [], (), (), [])
        return cls(*map(list, zip(*events)))

    def _columns(self) -> tuple:
        return self.names, self.kinds, self.devices, self.streams, self.start, self.end, self.correlation

    def take(self, rows) -> DeviceEvents:
        """The activities at ``rows`` (indices or a boolean mask over them), in that order."""
        rows = self._rows(rows)
        listed = rows.tolist()
        pick = lambda column: list(map(column.__getitem__, listed))  # noqa: E731
        return DeviceEvents(None if self.codes is not None else pick(self._names),
                            None if self.kind_codes is not None else pick(self._kinds),
                            _at(self.device_column, rows, listed), _at(self.stream_column, rows, listed),
                            self.start[rows], self.end[rows], _at(self.correlation_column, rows, listed),
                            None if self.codes is None else self.codes[rows], self.table,
                            None if self.kind_codes is None else self.kind_codes[rows])

    def _kinds_at(self, listed: list) -> list:
        return _picked(self._kinds, self.kind_codes, DEVICE_KIND_NAMES, listed)

    def at(self, rows) -> list[DeviceEvent]:
        """The activities at ``rows`` (a sequence of indices), as a list of DeviceEvent."""
        rows = np.asarray(rows, dtype=np.int64)
        listed = rows.tolist()
        pick = lambda column: _listed_at(column, rows, listed)  # noqa: E731
        return list(map(tuple.__new__, repeat(DeviceEvent),
                        zip(self._names_at(listed), self._kinds_at(listed), pick(self.device_column),
                            pick(self.stream_column), self.start[rows].tolist(), self.end[rows].tolist(),
                            pick(self.correlation_column))))

    def by_start(self) -> DeviceEvents:
        """The activities sorted by start, ties in their order (``sorted(self, key=start)``)."""
        order = np.argsort(self.start, kind="stable")
        if np.array_equal(order, np.arange(len(order))):
            return self
        return self.take(order)

    def __iter__(self):
        return map(tuple.__new__, repeat(DeviceEvent),
                   zip(self.names, self.kinds, self.devices, self.streams, self.start.tolist(),
                       self.end.tolist(), self.correlation))

    def _row(self, i) -> DeviceEvent:
        at = [int(self._rows([i])[0])]
        rows = np.asarray(at)
        value = lambda column: _listed_at(column, rows, at)[0]  # noqa: E731
        return DeviceEvent(self._names_at(at)[0], self._kinds_at(at)[0], value(self.device_column),
                           value(self.stream_column), float(self.start[i]), float(self.end[i]),
                           value(self.correlation_column))

    def _same(self, other: DeviceEvents) -> bool:
        listed = lambda c: c.tolist() if isinstance(c, np.ndarray) else c  # noqa: E731
        return all(listed(a) == listed(b) for a, b in zip(self._columns(), other._columns()))

    def __reduce__(self):
        return DeviceEvents, (self._names if self.codes is None else None,
                              self._kinds if self.kind_codes is None else None, self.device_column,
                              self.stream_column, self.start, self.end, self.correlation_column, self.codes,
                              self.table, self.kind_codes)

    def __repr__(self) -> str:
        return f"DeviceEvents({len(self)} activities)"


class _ChunkedBuilder:
    """Events collected in file order, piece by piece: one at a time (``append``, ``extend``: the per-event
    rules) or as columns (a subclass's ``extend_columns``: a piece read as columns); ``build()`` makes them one
    object of the subclass's ``columns`` class. A sequence of the events meanwhile (len, iteration), for what
    reads them before the end."""

    __slots__ = ("_chunks", "_pending", "append")
    columns: type  # HostEvents or DeviceEvents: ``of(events)``, ``len()``, iteration

    def __init__(self) -> None:
        self._chunks: list = []
        self._pending: list = []
        self.append = self._pending.append

    def extend(self, events) -> None:
        self._pending.extend(events)

    def _add(self, chunk) -> None:
        """A piece read as columns, after the events added before it one at a time."""
        self._flush()
        if len(chunk):
            self._chunks.append(chunk)

    def extend_builder(self, later: _ChunkedBuilder) -> None:
        """Append the events of ``later`` (which stays as it is)."""
        self._flush()
        self._chunks.extend(later._chunks)
        if later._pending:
            self._chunks.append(self.columns.of(later._pending))

    def _flush(self) -> None:
        if self._pending:
            self._chunks.append(self.columns.of(self._pending))
            self._pending.clear()  # the same list: ``append`` stays bound to it

    def __len__(self) -> int:
        return sum(map(len, self._chunks)) + len(self._pending)

    def __iter__(self):
        return chain(*self._chunks, self._pending)

    def __eq__(self, other) -> bool:  # as the list of events it stands for
        if isinstance(other, (_ChunkedBuilder, self.columns, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def build(self):
        self._flush()
        chunks = self._chunks
        if len(chunks) == 1:
            return chunks[0]
        return self._join(chunks) if chunks else self.columns.of(())

    def _join(self, chunks: list):
        raise NotImplementedError


class DeviceEventsBuilder(_ChunkedBuilder):
    """Device activity collected piece by piece (_ChunkedBuilder); ``build()`` makes one DeviceEvents."""

    __slots__ = ()
    columns = DeviceEvents

    def extend_columns(self, names: list | None, kinds: list | None, devices: list, streams: list, start, end,
                       correlation: list, codes: np.ndarray | None = None, table: list | None = None,
                       kind_codes: np.ndarray | None = None) -> None:
        """A piece's activities as DeviceEvents takes them (names, kinds None: given by their codes)."""
        self._add(DeviceEvents(names, kinds, devices, streams, start, end, correlation, codes, table, kind_codes))

    def _join(self, chunks: list[DeviceEvents]) -> DeviceEvents:
        joined = lambda column: list(chain.from_iterable(column(c) for c in chunks))  # noqa: E731
        table = _one_table(chunks)
        coded = table is not None
        kinds_coded = all(c.kind_codes is not None for c in chunks)
        return DeviceEvents(None if coded else joined(lambda c: c.names),
                            None if kinds_coded else joined(lambda c: c.kinds),
                            _joined([c.device_column for c in chunks]), _joined([c.stream_column for c in chunks]),
                            np.concatenate([c.start for c in chunks]), np.concatenate([c.end for c in chunks]),
                            _joined([c.correlation_column for c in chunks]),
                            np.concatenate([c.codes for c in chunks]) if coded else None, table,
                            np.concatenate([c.kind_codes for c in chunks]) if kinds_coded else None)


def names_of(events) -> list:
    """The names of host events, a HostEvents or a sequence of HostEvent, in their order."""
    return events.names if isinstance(events, HostEvents) else [e[0] for e in events]


def correlations_of(events) -> list:
    """Their correlation ids (None where an event has none), in their order."""
    if isinstance(events, HostEvents):
        return events.correlation if events.correlation is not None else [None] * len(events)
    return [e[4] for e in events]


def rows_named(events, keep) -> list[int]:
    """The indices of the host events whose name ``keep(name)`` accepts, in their order; ``keep`` is asked once
    per distinct name (a trace has few), not once per event: where the parse kept the names' codes, once per
    name of their table, and the events picked by their codes."""
    if isinstance(events, HostEvents) and events.codes is not None:
        wanted = np.fromiter(map(keep, events.table), dtype=bool, count=len(events.table))
        return np.flatnonzero(wanted[events.codes]).tolist() if wanted.any() else []
    names = names_of(events)
    kept = {name for name in set(names) if keep(name)}
    if not kept:
        return []
    return np.flatnonzero(np.fromiter(map(kept.__contains__, names), dtype=bool, count=len(names))).tolist()


def events_at(events, rows) -> list[HostEvent]:
    """The events at ``rows`` (indices), as a list of HostEvent."""
    return events.at(rows) if isinstance(events, HostEvents) else [events[k] for k in rows]


def _frozen(values) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    if out.flags.writeable:
        out = out.copy() if out.base is not None else out
        out.flags.writeable = False
    return out


class NameTable:
    """The distinct names met while a trace is read, each with a code (its index in ``names``): what the
    parse's HostEvents' ``codes`` refer to, one table for every piece and range that a parse collects."""

    __slots__ = ("names", "_code")

    def __init__(self) -> None:
        self.names: list[str] = []
        self._code: dict[str, int] = {}

    def codes_of(self, strings: list) -> np.ndarray:
        """The codes of ``strings`` (a piece's distinct strings: a few hundred), those new added."""
        code, names = self._code, self.names
        for s in strings:
            if s not in code:
                code[s] = len(names)
                names.append(s)
        return np.fromiter(map(code.__getitem__, strings), dtype=np.int64, count=len(strings))


class HostEventsBuilder(_ChunkedBuilder):
    """Host events collected piece by piece (_ChunkedBuilder); ``build()`` makes one HostEvents."""

    __slots__ = ()
    columns = HostEvents

    def extend_columns(self, names: list | None, tids: list | np.ndarray, start, end,
                       correlation: list | None = None, codes: np.ndarray | None = None,
                       table: list | None = None) -> None:
        """A piece's events as HostEvents takes them (names None: given by ``codes`` and ``table``)."""
        self._add(HostEvents(names, tids, start, end, correlation, codes, table))

    def _join(self, chunks: list[HostEvents]) -> HostEvents:
        columns = [c.correlation_column for c in chunks]
        corr = (None if all(c is None for c in columns)
                else _joined([[None] * len(k) if c is None else c for k, c in zip(chunks, columns)]))
        table = _one_table(chunks)
        coded = table is not None
        codes = np.concatenate([c.codes for c in chunks]) if coded else None
        numbers = all(c.tid_numbers is not None for c in chunks)  # the threads kept as int64 where all are
        return HostEvents(None if coded else list(chain.from_iterable(c.names for c in chunks)),
                          np.concatenate([c.tid_numbers for c in chunks]) if numbers
                          else list(chain.from_iterable(c.tids for c in chunks)),
                          np.concatenate([c.start for c in chunks]), np.concatenate([c.end for c in chunks]),
                          corr, codes, table)


def sorted_times(values) -> np.ndarray:
    """``values`` (an array, or an iterable of floats) sorted, as an array, by merge sort: a trace's times come
    nearly in order (by thread), which merge sort takes about twenty times faster than numpy's default."""
    values = values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.float64)
    return np.sort(values, kind="stable")


class Times:
    """Times (µs) in ascending order as a read-only float64 array, ``array``: where each Python frame of a trace
    starts (a million or more in a large trace, a few MB here where a tuple of floats took 32 bytes each). A
    sequence of floats to everything else (len, truth, iteration, indexing, equality with a tuple of them);
    ``np.asarray`` gives the array. ``Times.sorted(values)`` sorts as Python's ``sorted`` does."""

    __slots__ = ("array",)

    def __init__(self, ordered=()) -> None:
        """``ordered``: times already in ascending order."""
        self.array = _frozen(ordered)

    @classmethod
    def sorted(cls, values) -> Times:
        a = np.asarray(values, dtype=np.float64)
        if np.isnan(a).any():  # no order of its own: as Python's sort leaves them
            return cls(sorted(a.tolist()))
        return cls(sorted_times(a))

    def between(self, lo: float, hi: float) -> Times:
        """The times t with lo <= t <= hi."""
        a = self.array
        return Times(a[np.searchsorted(a, lo, side="left"):np.searchsorted(a, hi, side="right")])

    def count_between(self, lo: float, hi: float) -> int:
        """How many times t have lo <= t < hi (negative when hi < lo, as the two bisections give it)."""
        a = self.array
        return int(np.searchsorted(a, hi, side="left") - np.searchsorted(a, lo, side="left"))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype, copy=False)

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self):
        return iter(self.array.tolist())

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Times(self.array[i]) if (i.step or 1) > 0 else tuple(self)[i]
        return float(self.array[i])

    def __eq__(self, other) -> bool:
        if isinstance(other, Times):
            return self.array.tolist() == other.array.tolist()
        if isinstance(other, (tuple, list)):
            return self.array.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.array.tolist()))

    def __repr__(self) -> str:
        return f"Times({len(self)} times)"


class TimesBuilder:
    """Times collected piece by piece, one at a time (``append``, ``extend``) or as arrays (``extend_array``);
    ``build()`` sorts them into Times."""

    __slots__ = ("_chunks", "_pending", "append")

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._pending: list[float] = []
        self.append = self._pending.append

    def extend(self, times) -> None:
        if isinstance(times, TimesBuilder):
            self._flush()
            self._chunks.extend(times._chunks)
            self._pending.extend(times._pending)
        else:
            self._pending.extend(times)

    def extend_array(self, times: np.ndarray) -> None:
        self._flush()
        if len(times):
            self._chunks.append(np.asarray(times, dtype=np.float64))

    def array(self) -> np.ndarray:
        """The times in the order they came, as one array."""
        self._flush()
        if not self._chunks:
            return np.empty(0)
        return self._chunks[0] if len(self._chunks) == 1 else np.concatenate(self._chunks)

    def build(self) -> Times:
        return Times.sorted(self.array())

    def _flush(self) -> None:
        if self._pending:
            self._chunks.append(np.array(self._pending, dtype=np.float64))
            self._pending.clear()  # the same list: ``append`` stays bound to it

    def __len__(self) -> int:
        return sum(map(len, self._chunks)) + len(self._pending)

    def __eq__(self, other) -> bool:  # as the list of times in the order they came
        if isinstance(other, TimesBuilder):
            return self.array().tolist() == other.array().tolist()
        if isinstance(other, (list, tuple)):
            return self.array().tolist() == list(other)
        return NotImplemented

    __hash__ = None


@dataclass(frozen=True)
class ParsedTrace:
    worker: str
    span: str
    base_us: float  # every time below is µs after this one (see _base)
    rank: int | None
    world_size: int | None
    device_name: str | None
    steps: tuple[Step, ...]
    ops: tuple[HostEvent, ...] | HostEvents  # cpu_op; the streamed parse's: HostEvents
    annotations: tuple[HostEvent, ...]  # user_annotation, except ProfilerStep#N
    runtime: tuple[HostEvent, ...] | HostEvents  # cuda_runtime / cuda_driver / runtime; the parse's: HostEvents
    device: tuple[DeviceEvent, ...] | DeviceEvents  # sorted by start; the streamed parse's: DeviceEvents
    data_spans: tuple[HostEvent, ...]  # DataLoader iteration and `data` ranges, any category
    memory: tuple[MemorySample, ...] | MemoryColumns  # the streamed parse's: MemoryColumns
    python_calls: Times | tuple[float, ...] = ()  # start of every with_stack Python function frame, sorted
    python_builtins: Times | tuple[float, ...] = ()  # ... and of every call of a built-in ("<built-in ...>"), sorted
    long_frames: tuple[str, ...] = ()  # the distinct names of frames of LONG_FRAME_US or more, sorted
    model_spans: tuple[tuple[float, float], ...] = ()  # (start, end) of each MODEL_FRAME_PREFIXES frame
    module_frames: tuple[HostEvent, ...] = ()  # each nn.Module call's frame, named and on its thread
    recorded_shapes: bool = False  # record_shapes was on: operators carry "Input Dims"
    # (device id, totalGlobalMem bytes) of each GPU in the trace's deviceProperties
    device_memory: tuple[tuple[int, int], ...] = ()
    steps_from: str = FROM_PROFILER  # or, in a trace without ProfilerStep#N, inferred_steps.FROM_*

    @property
    def has_gpu(self) -> bool:
        return bool(self.device)


@lru_cache(maxsize=1 << 16)  # asked once per event; a trace has few distinct names
def is_comm(name: str) -> bool:
    return name.startswith(COMM_PREFIXES)


@lru_cache(maxsize=1 << 16)
def is_comm_kernel(name: str) -> bool:
    return "nccl" in name.lower()


def device_memory(props) -> tuple[tuple[int, int], ...]:
    """(id, totalGlobalMem) of each GPU a trace's ``deviceProperties`` lists with both as numbers."""
    out = []
    for p in props if isinstance(props, list) else ():
        if isinstance(p, dict):
            i, total = _int_or_none(p.get("id")), _int_or_none(p.get("totalGlobalMem"))
            if i is not None and total is not None and total > 0:
                out.append((i, total))
    return tuple(out)


def distributed_rank(header: dict) -> tuple[int | None, int | None]:
    """(rank, world size) as a trace's ``distributedInfo`` gives them; None for either it does not give."""
    dist = header.get("distributedInfo") or {}
    if not isinstance(dist, dict):
        return None, None
    return _int_or_none(dist.get("rank")), _int_or_none(dist.get("world_size"))


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None

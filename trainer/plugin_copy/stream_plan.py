"""What the TensorBoard copy changes in a trace file, worked out from one streamed pass over its events.

    plan, header = plan_edits(path)   # EditPlan: per event index, the edits; which entries to keep
    plan.edits[12]                 # e.g. Edit(cat="runtime", external_id=0, call_stack="a.py(3): f")

The rules are rules.py's (its module docstring says why each exists), applied to columns of the few fields
they read (plan_columns.py), never to the whole document, so a 1 GB trace needs a few hundred MB. The
launches are matched to their device work by numpy (step_guard.py); the operators' call stacks come from the
compiled sweep of open frames (stream_callstack.py). Where the reader is not built, the stacks are swept in
Python: then, on a trace of more than ``SPLIT_EVENTS`` complete events, a helper process (trace/workers.py)
makes part of them, where the worker policy allows one, while this process rewrites the runtime events.
The copy leaves out only the entries that are not JSON objects. It keeps the
``python_function`` frames although they are now also the operators' ``Call stack``: the plugin's Trace view
shows them, and its Module view links modules through their ``Python parent id``. ``stream_write.py`` applies a plan.
"""

from __future__ import annotations

import sys
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from stepscope.plugin_copy.plan_columns import UNSET, Columns, Ids, read_columns
from stepscope.plugin_copy.rules import (
    COLLECTIVES,
    DEVICE_STEP_PREFIX,
    PLUGIN_OPERATOR,
    PLUGIN_RUNTIME,
    ROOT_EXTERNAL_ID,
    is_dataloader_span,
)
from stepscope.plugin_copy.step_guard import HOST_CATEGORIES, Launches, unlink_with
from stepscope.plugin_copy.stream_callstack import call_stacks_of
from stepscope.trace import fastread
from stepscope.trace.gc_paused import gc_paused
from stepscope.trace.vocabulary import DEVICE_CATEGORIES, PYTHON_FUNCTION, STEP_PREFIX
from stepscope.trace.vocabulary import TORCH_RUNTIME_CATEGORIES as RUNTIME_CATEGORIES
from stepscope.trace.workers import Workers

SPLIT_EVENTS = 1 << 20  # complete events from which a Python sweep of the call stacks has a helper, meanwhile
HELPER_STACKS = 0.65  # the operators whose stacks that helper makes (this process rewrites the launches)


@dataclass(slots=True)
class Edit:
    guard_name: bool = False  # add "name": ""
    guard_cat: bool = False  # set "cat": ""
    name: str | None = None
    cat: str | None = None
    touch_args: bool = False  # copy args (dataloader spans become operators with args of their own)
    external_id: Any = UNSET  # set the plugin's External id key to this
    unlink: bool = False
    call_stack: str | None = None
    # one object that many entries hold (EditPlan.share): EditPlan.edit copies it before a change
    shared: bool = field(default=False, compare=False, repr=False)


_NO_EDIT = Edit()
_EDIT_FIELDS = tuple(f.name for f in fields(Edit) if f.compare)  # what an edit changes (not ``shared``)


@dataclass
class EditPlan:
    keep: np.ndarray  # bool per traceEvents entry
    edits: dict[int, Edit] = field(default_factory=dict)
    ts: np.ndarray | None = None  # float per entry: its numeric "ts", NaN where it has none
    step_starts: list[float] = field(default_factory=list)  # sorted ts of the host steps the copy names
    # ((byte range, index of its first entry), ...) when the file was read in byte ranges: written in them too
    ranges: list | None = None
    # (where its first entry lies, its index) of each piece, when the file was read in byte ranges: where a
    # byte range of it may start (stream_write.excerpt_events reads only the pieces that hold the excerpt)
    pieces: list[tuple[int, int]] = field(default_factory=list)
    # the edits coded for the writer (stream_write.special_of), made once a plan is complete
    coded: Any = field(default=None, compare=False, repr=False)

    def edit(self, i: int) -> Edit:
        """Entry ``i``'s own edit, to change: made where it has none, copied where it holds a shared one."""
        e = self.edits.get(i)
        if e is None:
            e = self.edits[i] = Edit()
        elif e.shared:
            e = self.edits[i] = replace(e, shared=False)
        return e

    def share(self, positions: list[int], shared: list[Edit]) -> None:
        """Entry ``positions[k]`` edited as ``shared[k]`` says, for hundreds of thousands of entries that need
        the same few edits (a launch's category, an operator's call stack): each ``Edit(..., shared=True)`` is
        held as it is by the entries without an edit yet, not made once per entry; an entry that has one gets
        the shared edit's fields (those not at their defaults) set on its own."""
        edits = self.edits
        have = edits.keys() & positions
        if not have:
            edits.update(zip(positions, shared))
            return
        for i, s in zip(positions, shared):
            if i not in have:
                edits[i] = s
                continue
            e = self.edit(i)
            for name in _EDIT_FIELDS:
                value = getattr(s, name)
                if value is not getattr(_NO_EDIT, name):
                    setattr(e, name, value)


class Categories:
    """The complete events' lower-cased categories as ids (plan_columns.Columns): ``among(*names)`` is the mask
    of the events in any of them, by one lookup per event instead of a comparison of strings."""

    def __init__(self, ids: np.ndarray, categories: dict[str, int]) -> None:
        self.ids, self.categories = ids, dict(categories)

    def among(self, *names: str) -> np.ndarray:
        table = np.zeros(len(self.categories), dtype=bool)
        table[[self.categories[n] for n in names if n in self.categories]] = True
        return table[self.ids]

    def set(self, row: int, name: str) -> None:
        self.ids[row] = self.categories.setdefault(name, len(self.categories))


def _straddles_any(a: float, b: float, c: np.ndarray, d: np.ndarray) -> bool:
    """Does [a, b] straddle any [c, d] (one starts inside the other and ends outside it)?"""
    return bool((((a < c) & (c < b) & (b < d)) | ((c < a) & (a < d) & (d < b))).any())


@gc_paused()
def plan_edits(path: Path, workers: Workers | None = None) -> tuple[EditPlan, dict]:
    """The edits the copy makes to the trace in ``path`` (see the module docstring), and the
    trace's top-level keys other than traceEvents. ``workers``: the worker policy (default: this process
    only; a training process, whose threads and CUDA context a fork would copy, must keep to it)."""
    workers = workers or Workers.inline()
    c = read_columns(path, workers)
    return plan_of(c, workers), c.header


def plan_of(c: Columns, workers: Workers | None = None) -> EditPlan:
    """The edits of the trace whose columns are ``c`` (plan_columns.py), as ``plan_edits``; ``c`` is used up
    (its categories are changed on the way: dataloader spans become operators)."""
    workers = workers or Workers.inline()
    plan = EditPlan(keep=np.ones(c.count, dtype=bool), ts=np.frombuffer(c.ts_all, dtype=np.float64),
                    ranges=c.ranges, pieces=c.pieces if c.ranges else [])
    plan.keep[c.not_objects] = False
    for i in c.missing_name:
        plan.edit(i).guard_name = True
    for i in c.missing_cat:
        plan.edit(i).guard_cat = True
    if c.index:
        _plan_complete_events(plan, c, workers)
    # after the renames: a device-side ProfilerStep#N is no host step in the copy
    plan.step_starts = sorted(float(plan.ts[i]) for i in c.step_rows if plan.edits.get(i, _NO_EDIT).name is None)
    return plan


def _plan_complete_events(plan: EditPlan, c: Columns, workers: Workers) -> None:
    """The edits of the complete events (``ph`` X): names, categories, ids, unlinking, call stacks."""
    corr, ext, module, has_stack = c.corr, c.ext, c.module.array(), c.has_stack.array()
    thread = np.frombuffer(c.thread, dtype=np.int64)  # each one's (pid, tid) as its id
    idx = np.frombuffer(c.index, dtype=np.int64)
    names = list(c.names)
    start, stop = np.frombuffer(c.start, dtype=np.float64), np.frombuffer(c.end, dtype=np.float64)
    cat = Categories(np.frombuffer(c.cat_id, dtype=np.int64), c.categories)  # c's own ids, changed below
    name_id = np.frombuffer(c.name_id, dtype=np.int64)

    for k in np.flatnonzero(cat.among("gpu_user_annotation")).tolist():
        if names[name_id[k]].startswith(STEP_PREFIX):
            plan.edit(int(idx[k])).name = DEVICE_STEP_PREFIX + names[name_id[k]]

    step_named = np.array([n.startswith(STEP_PREFIX) for n in names], dtype=bool)[name_id]
    step_or_coll = step_named | np.array([n in COLLECTIVES for n in names], dtype=bool)[name_id]

    def tree_nodes() -> np.ndarray:
        return (cat.among("cpu_op", "operator", "python")
                | (cat.among("user_annotation") & step_or_coll)
                | (cat.among("python_function") & module))

    # DataLoader spans that nest cleanly on their thread become operators.
    cand = [k for k in np.flatnonzero(cat.among("user_annotation")).tolist() if is_dataloader_span(names[name_id[k]])]
    if cand:
        nodes = tree_nodes()
        nodes[cand] = True  # the other candidates count too (a span never straddles itself)
        clean = []
        for t in {int(thread[k]) for k in cand}:
            rows = np.flatnonzero(nodes & (thread == t))
            clean += [k for k in cand if thread[k] == t and not _straddles_any(start[k], stop[k], start[rows],
                                                                                 stop[rows])]
        for k in sorted(clean):
            cat.set(k, PLUGIN_OPERATOR)
            e = plan.edit(int(idx[k]))
            e.cat, e.touch_args = PLUGIN_OPERATOR, True

    stack_args = (cat.among(PYTHON_FUNCTION), cat.among("cpu_op", "operator"), name_id, names, thread, start,
                  stop, has_stack)
    # the sweep in Python (no compiled reader) takes about as long as the rest: then the helper makes the
    # stacks of the operators that start before ``split``, this process those after it once it has rewritten
    # the launches
    helper = workers if len(idx) >= SPLIT_EVENTS and not fastread.available() else Workers.inline()
    op_starts = start[stack_args[1]]
    split = float(np.quantile(op_starts, HELPER_STACKS)) if helper.forks and len(op_starts) else np.inf
    with helper.beside(call_stacks_of, *stack_args, -np.inf, split) as later:
        _rewrite_runtimes(plan, idx, cat, step_named, start, stop, corr, ext, tree_nodes())
        rest = call_stacks_of(*stack_args, split) if split < np.inf else {}
        try:
            stacks = later.result()
        except (OSError, BrokenProcessPool):  # the helper died: here
            stacks = call_stacks_of(*stack_args, -np.inf, split)
    stacks.update(rest)
    rows = np.fromiter(stacks, dtype=np.int64, count=len(stacks))
    by_stack: dict[str, Edit] = {}  # operators of one line of Python share its stack: one edit each
    plan.share(idx[rows].tolist(), [by_stack.get(s) or by_stack.setdefault(s, Edit(call_stack=s, shared=True))
                                    for s in stacks.values()])



def _host_steps(cat: Categories, step_named, start, stop) -> list[tuple[float, float]]:
    """The host steps (ProfilerStep# spans, else the span of all host events) from the columns (``step_named``:
    whether each one's name is ProfilerStep#...)."""
    rows = np.flatnonzero(cat.among("user_annotation", "cpu_op", "operator") & step_named)
    steps = sorted(zip(start[rows].tolist(), stop[rows].tolist()))
    if steps:
        return steps
    h = cat.among(*HOST_CATEGORIES)
    lo = min(float(sys.maxsize), float(start[h].min())) if h.any() else float(sys.maxsize)
    hi = max(float(-sys.maxsize - 1), float(stop[h].max())) if h.any() else float(-sys.maxsize - 1)
    return [(lo, hi)]


def _rewrite_runtimes(plan: EditPlan, idx, cat: Categories, step_named, start, stop, corr, ext, nodes) -> None:
    """Launches become ``runtime`` (rules.py, item 2), then the step guard's unlinking, on the columns. The
    correlation ids of the device and runtime events are coded first (``_codes``), so that the launches
    and their device spans are matched by numpy."""
    coded = ext.coded()
    ids = ext.tolist() if coded is None else None
    device = np.flatnonzero(cat.among(*DEVICE_CATEGORIES))
    candidates = np.flatnonzero(cat.among(*RUNTIME_CATEGORIES))
    both, none = _codes(corr, np.concatenate((device, candidates)))
    dev_code, cand_code = both[:len(device)], both[len(device):]
    n_codes = int(both.max()) + 1 if len(both) else 0
    launched = np.zeros(n_codes, dtype=bool)
    launched[dev_code] = True
    steps = _host_steps(cat, step_named, start, stop)
    s_lo = np.array([a for a, _ in steps])
    s_reach = np.maximum.accumulate(np.array([b for _, b in steps]))
    j = np.searchsorted(s_lo, start[candidates], side="right") - 1
    in_a_step = (j >= 0) & (s_reach[np.maximum(j, 0)] >= stop[candidates])
    # those outside every step are left as they are, unless they launched device work (see rules.py)
    chosen = in_a_step | launched[cand_code]
    runtime, run_code = candidates[chosen], cand_code[chosen]
    # launched by no operator the plugin sees: from the root (a null id is no operator's)
    if coded is not None:
        values, null = coded
        node = np.flatnonzero(nodes)
        roots = null[runtime] | ~np.isin(values[runtime], values[node][~null[node]])
    else:
        node_ids = {ids[k] for k in np.flatnonzero(nodes).tolist()}
        node_ids.discard(None)
        roots = np.array([ids[k] not in node_ids for k in runtime.tolist()], dtype=bool)
    launch = (Edit(cat=PLUGIN_RUNTIME, shared=True),
              Edit(cat=PLUGIN_RUNTIME, external_id=ROOT_EXTERNAL_ID, shared=True))
    plan.share(idx[runtime].tolist(), [launch[root] for root in roots.tolist()])
    rooted = np.zeros(n_codes, dtype=bool)
    rooted[run_code[roots]] = True
    if none >= 0:
        rooted[none] = False
    rooted_device = device[rooted[dev_code]]
    if coded is not None:
        values, null = coded
        rooted_device = rooted_device[null[rooted_device] | (values[rooted_device] != ROOT_EXTERNAL_ID)]
    else:
        rooted_device = [k for k in rooted_device.tolist() if ids[k] != ROOT_EXTERNAL_ID]
    for k in np.asarray(rooted_device, dtype=np.int64).tolist():
        plan.edit(int(idx[k])).external_id = ROOT_EXTERNAL_ID

    # each correlation's device spans: how many, the earliest start, the latest end
    n_device = np.bincount(dev_code, minlength=n_codes)
    first, last = np.full(n_codes, np.inf), np.full(n_codes, -np.inf)
    np.fmin.at(first, dev_code, start[device])
    np.fmax.at(last, dev_code, stop[device])

    def launches_of(linked: np.ndarray) -> tuple[Launches, np.ndarray]:
        code = run_code[np.searchsorted(runtime, linked)]
        some = n_device[code] > 0
        rows, code = linked[some], code[some]
        order = np.lexsort((rows, start[rows]))
        rows, code = rows[order], code[order]
        mine = np.zeros(n_codes, dtype=bool)
        mine[code] = True
        return (Launches(rows, start[rows], stop[rows], first[code], last[code], n_device[code]),
                stop[device[~mine[dev_code]]])

    for k in unlink_with(steps, launches_of, runtime):
        plan.edit(int(idx[k])).unlink = True


def _codes(ids: Ids, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """The id of each of ``rows`` as a code from 0, equal ids (as Python compares them) one code; and null's
    code (-1 where no id is null). Integer ids and nulls (all the compiled reader gives) are coded by one sort;
    other values by a dict."""
    coded = ids.coded()
    if coded is not None:
        values, null = coded[0][rows], coded[1][rows]
        some = np.flatnonzero(~null)
        order = some[np.argsort(values[some], kind="stable")]
        ordered = values[order]
        codes = np.empty(len(values), dtype=np.int64)
        codes[order] = np.cumsum(np.concatenate(([0], ordered[1:] != ordered[:-1])))[:len(order)]
        if len(some) == len(values):
            return codes, -1
        none = int(codes[order[-1]]) + 1 if len(order) else 0  # after the integers' codes
        codes[null] = none
        return codes, none
    listed = ids.tolist()
    picked = [listed[k] for k in rows.tolist()]
    table: dict = {}
    return np.array([table.setdefault(v, len(table)) for v in picked], dtype=np.int64), table.get(None, -1)

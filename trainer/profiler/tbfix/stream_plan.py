"""What ``adapt_trace`` would change in a trace file, worked out from one streamed pass over its events.

    plan, header = plan_edits(path)   # EditPlan: per event index, the edits; which entries to keep
    plan.edits[12]                 # e.g. Edit(cat="runtime", external_id=0, call_stack="a.py(3): f")

The rules are ``adapt.py``'s (the module docstring there says why each exists), applied to columns of the
few fields they read instead of to a list of dicts, so a 1 GB trace needs a few hundred MB. Like
``adapt_trace``, the copy leaves out only the entries that are not JSON objects. It keeps the
``python_function`` frames although they are now also the operators' ``Call stack``: the plugin's Trace view
shows them, and its Module view links modules through their ``Python parent id``. ``stream_write.py`` applies a plan.
"""

from __future__ import annotations

import sys
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..analysis.jsonstream import TraceStream
from ..vocabulary import DEVICE_CATEGORIES, STEP_PREFIX
from ..vocabulary import TORCH_RUNTIME_CATEGORIES as RUNTIME_CATEGORIES
from .adapt import (
    COLLECTIVES,
    DEVICE_STEP_PREFIX,
    PLUGIN_OPERATOR,
    PLUGIN_RUNTIME,
    ROOT_EXTERNAL_ID,
    is_dataloader_span,
)
from .step_guard import HOST_CATEGORIES, Launch, unlink_with
from .stream_callstack import call_stacks_of

UNSET = msgspec.UNSET


class _Args(msgspec.Struct, gc=False):
    correlation: Any = UNSET
    ext_upper: Any = msgspec.field(default=UNSET, name="External id")
    ext_lower: Any = msgspec.field(default=UNSET, name="external id")
    module: Any = msgspec.field(default=UNSET, name="Python module id")
    call_stack: Any = msgspec.field(default=UNSET, name="Call stack")


class _Event(msgspec.Struct, gc=False):
    ph: Any = UNSET
    cat: Any = UNSET
    name: Any = UNSET
    pid: Any = UNSET
    tid: Any = UNSET
    ts: Any = UNSET
    dur: Any = UNSET
    args: _Args | None = None


_TYPED = msgspec.json.Decoder(list[_Event])
_RAW = msgspec.json.Decoder(list[msgspec.Raw])
_ONE = msgspec.json.Decoder(_Event)


def _decode(text) -> list:
    """The events of a piece as _Event structs; an entry that is not a JSON object stays a msgspec.Raw."""
    try:
        return _TYPED.decode(text)
    except msgspec.ValidationError:
        out = []
        for r in _RAW.decode(bytes(text)):
            try:
                out.append(_ONE.decode(r))
            except msgspec.ValidationError:
                out.append(r)
        return out


@dataclass
class Edit:
    guard_name: bool = False  # add "name": ""
    guard_cat: bool = False  # set "cat": ""
    name: str | None = None
    cat: str | None = None
    touch_args: bool = False  # copy args (dataloader spans: adapt's _with_args)
    external_id: Any = UNSET  # set the plugin's External id key to this
    unlink: bool = False
    call_stack: str | None = None


@dataclass
class EditPlan:
    keep: np.ndarray  # bool per traceEvents entry
    edits: dict[int, Edit] = field(default_factory=dict)

    def edit(self, i: int) -> Edit:
        e = self.edits.get(i)
        if e is None:
            e = self.edits[i] = Edit()
        return e


@dataclass
class _Columns:
    """The complete (``ph`` X) events, one entry each per column, and the entries the rules touch otherwise.
    Times are kept in typed arrays and repeated values (categories, threads) as shared objects: a 1 GB trace
    has millions of complete events."""

    index: array = field(default_factory=lambda: array("q"))  # position in traceEvents
    cat: list[str] = field(default_factory=list)  # lower-cased category
    name_id: array = field(default_factory=lambda: array("q"))
    thread: list[tuple] = field(default_factory=list)  # (pid, tid)
    start: array = field(default_factory=lambda: array("d"))
    end: array = field(default_factory=lambda: array("d"))
    corr: list = field(default_factory=list)
    ext: list = field(default_factory=list)
    module: list[bool] = field(default_factory=list)
    has_stack: list[bool] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    missing_name: list[int] = field(default_factory=list)  # positions of entries without "name"
    missing_cat: set[int] = field(default_factory=set)  # positions of complete events without a str "cat"
    not_objects: list[int] = field(default_factory=list)
    count: int = 0
    header: dict = field(default_factory=dict)


def _read(path: Path) -> _Columns:
    c = _Columns()
    cats: dict[Any, str] = {}
    threads: dict[tuple, tuple] = {}
    names = c.names
    empty = _Args()
    with TraceStream(path) as stream:
        for events in stream.decode_events(_decode):
            for i, e in enumerate(events, c.count):
                if e.__class__ is not _Event:
                    c.not_objects.append(i)
                    continue
                if e.name is UNSET:
                    c.missing_name.append(i)
                if e.ph != "X":
                    continue
                cat = e.cat
                try:
                    lc = cats[cat]
                except (KeyError, TypeError):
                    lc = cat.lower() if isinstance(cat, str) else ""
                    if not isinstance(cat, str):
                        c.missing_cat.add(i)
                    else:
                        cats[cat] = lc
                name = e.name if e.name.__class__ is str else ("" if e.name is UNSET else str(e.name))
                nid = names.get(name)
                if nid is None:
                    nid = names[name] = len(names)
                a = e.args or empty
                ts, dur = e.ts, e.dur
                ts = 0.0 if ts is UNSET else float(ts)
                dur = 0.0 if dur is UNSET or not dur else max(float(dur), 0.0)  # vocabulary.span: negative is 0
                ext = a.ext_lower
                if ext is UNSET or ext is None:
                    ext = None if a.ext_upper is UNSET else a.ext_upper
                corr = a.correlation
                module = a.module
                thread = (e.pid, e.tid)
                c.index.append(i)
                c.cat.append(lc)
                c.name_id.append(nid)
                c.thread.append(threads.setdefault(thread, thread))
                c.start.append(ts)
                c.end.append(ts + dur)
                c.corr.append(None if corr is UNSET else corr)
                c.ext.append(ext)
                c.module.append(module is not UNSET and module is not None)
                c.has_stack.append(a.call_stack is not UNSET)
            c.count += len(events)
        c.header = stream.header
    return c


def _straddles_any(a: float, b: float, c: np.ndarray, d: np.ndarray) -> bool:
    """Does [a, b] straddle any [c, d] (one starts inside the other and ends outside it)?"""
    return bool((((a < c) & (c < b) & (b < d)) | ((c < a) & (a < d) & (d < b))).any())


def plan_edits(path: Path) -> tuple[EditPlan, dict]:
    """The edits ``adapt_trace`` would make to the trace in ``path`` (see the module docstring), and the
    trace's top-level keys other than traceEvents."""
    c = _read(path)
    plan = EditPlan(keep=np.ones(c.count, dtype=bool))
    plan.keep[c.not_objects] = False
    for i in c.missing_name:
        plan.edit(i).guard_name = True
    for i in c.missing_cat:
        plan.edit(i).guard_cat = True
    if not c.index:
        return plan, c.header
    thread, corr, ext, module, has_stack = c.thread, c.corr, c.ext, c.module, c.has_stack
    idx = np.frombuffer(c.index, dtype=np.int64)
    names = list(c.names)
    start, stop = np.frombuffer(c.start, dtype=np.float64), np.frombuffer(c.end, dtype=np.float64)
    cat_arr = np.array(c.cat, dtype=object)
    c.cat = []
    name_of = [names[k] for k in c.name_id]

    for k in np.flatnonzero(cat_arr == "gpu_user_annotation"):
        if name_of[k].startswith(STEP_PREFIX):
            plan.edit(int(idx[k])).name = DEVICE_STEP_PREFIX + name_of[k]

    def tree_nodes() -> np.ndarray:
        step_or_coll = np.array([n.startswith(STEP_PREFIX) or n in COLLECTIVES for n in name_of], dtype=bool)
        return (np.isin(cat_arr, ["cpu_op", "operator", "python"])
                | ((cat_arr == "user_annotation") & step_or_coll)
                | ((cat_arr == "python_function") & np.array(module, dtype=bool)))

    # DataLoader spans that nest cleanly on their thread become operators.
    cand = [k for k in np.flatnonzero(cat_arr == "user_annotation") if is_dataloader_span(name_of[k])]
    if cand:
        threads: dict = {}
        tid = np.array([threads.setdefault(t, len(threads)) for t in thread], dtype=np.int64)
        nodes = tree_nodes()
        nodes[cand] = True  # the other candidates count too (a span never straddles itself)
        clean = []
        for t in {int(tid[k]) for k in cand}:
            rows = np.flatnonzero(nodes & (tid == t))
            clean += [k for k in cand if tid[k] == t and not _straddles_any(start[k], stop[k], start[rows],
                                                                              stop[rows])]
        for k in sorted(clean):
            cat_arr[k] = PLUGIN_OPERATOR
            e = plan.edit(int(idx[k]))
            e.cat, e.touch_args = PLUGIN_OPERATOR, True

    _rewrite_runtimes(plan, idx, cat_arr, name_of, start, stop, corr, ext, tree_nodes())
    for k, stack in call_stacks_of(cat_arr, name_of, thread, start, stop, has_stack).items():
        plan.edit(int(idx[k])).call_stack = stack
    return plan, c.header



def _host_steps(cat_arr, name_of, start, stop) -> list[tuple[float, float]]:
    """step_guard.host_steps on the columns."""
    host = np.isin(cat_arr, ["user_annotation", "cpu_op", "operator"])
    steps = sorted((float(start[k]), float(stop[k])) for k in np.flatnonzero(host)
                   if name_of[k].startswith(STEP_PREFIX))
    if steps:
        return steps
    h = np.isin(cat_arr, list(HOST_CATEGORIES))
    lo = min(float(sys.maxsize), float(start[h].min())) if h.any() else float(sys.maxsize)
    hi = max(float(-sys.maxsize - 1), float(stop[h].max())) if h.any() else float(-sys.maxsize - 1)
    return [(lo, hi)]


def _rewrite_runtimes(plan: EditPlan, idx, cat_arr, name_of, start, stop, corr, ext, nodes) -> None:
    """adapt._rewrite_runtimes and the step guard's unlinking, on the columns."""
    node_ids = {ext[k] for k in np.flatnonzero(nodes)}
    node_ids.discard(None)
    device = np.flatnonzero(np.isin(cat_arr, list(DEVICE_CATEGORIES)))
    launched = {corr[k] for k in device}
    steps = _host_steps(cat_arr, name_of, start, stop)
    s_lo = np.array([a for a, _ in steps])
    s_reach = np.maximum.accumulate(np.array([b for _, b in steps]))
    runtime, rooted = [], set()
    for k in np.flatnonzero(np.isin(cat_arr, list(RUNTIME_CATEGORIES))):
        if corr[k] not in launched:
            j = int(np.searchsorted(s_lo, start[k], side="right")) - 1
            if j < 0 or s_reach[j] < stop[k]:  # outside every step (see adapt.py)
                continue
        runtime.append(k)
        e = plan.edit(int(idx[k]))
        e.cat = PLUGIN_RUNTIME
        if ext[k] not in node_ids:
            e.external_id = ROOT_EXTERNAL_ID
            rooted.add(corr[k])
    rooted.discard(None)
    if rooted:
        for k in device:
            if corr[k] in rooted and ext[k] != ROOT_EXTERNAL_ID:
                plan.edit(int(idx[k])).external_id = ROOT_EXTERNAL_ID

    spans_by_corr: dict = defaultdict(list)
    for k in device:
        spans_by_corr[corr[k]].append((float(start[k]), float(stop[k])))

    def launches_of(linked: set[int]):
        out, linked_corrs = [], set()
        for k in sorted(linked):
            spans = spans_by_corr.get(corr[k])
            if spans:
                linked_corrs.add(corr[k])
                out.append(Launch(k, float(start[k]), float(stop[k]), min(a for a, _ in spans),
                                  max(b for _, b in spans), len(spans)))
        orphans = [sp for c, spans in spans_by_corr.items() if c not in linked_corrs for sp in spans]
        return sorted(out, key=lambda r: r.start), orphans

    for k in unlink_with(steps, launches_of, set(runtime)):
        plan.edit(int(idx[k])).unlink = True

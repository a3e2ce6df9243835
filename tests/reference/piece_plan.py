"""A piece's plan made with numpy, one pass per mask: a reference for the tests only.

    p = piece_plan(collector, cols)      # as stream_columns._plan gives it (None: collected event by event)

stepscope.analysis.stream_columns makes a piece's checks, times, name and category codes and the rows of each
kind of event in one compiled pass (fastread.plan_rows); this is the plain reading of the same rules, each a
numpy expression over the whole piece, which the tests hold the compiled pass to.
"""

from __future__ import annotations

import numpy as np
from stepscope.analysis.events import LONG_FRAME_US
from stepscope.analysis.stream_columns import (
    _code_of,
    _name_bits,
    _Plan,
    _read_values,
    c_unset,
)
from stepscope.analysis.validate import MAX_TIME_US
from stepscope.trace.fastread import T_INT, T_MISSING, T_NULL, T_REAL, T_STR, Columns

_FLAG_SHIFTS = np.arange(7, dtype=np.int16)[:, None]


def _timed(t: np.ndarray) -> np.ndarray:
    return (t == T_INT) | (t == T_REAL)


def _in_range(t: np.ndarray, reals: np.ndarray, ints: np.ndarray) -> bool:
    """Every number of the column within validate.py's time bounds (exactly, as Python compares them).
    ``reals`` is 0 where the value is no number (Columns.real), which is within them."""
    lo, hi = -MAX_TIME_US, MAX_TIME_US
    if not (lo <= reals.min(initial=0.0) and reals.max(initial=0.0) <= hi):
        return False
    big = np.where(t == T_INT, ints, 0)  # integers beyond 2**53: msgspec's own path compares them
    return bool(-(2**53) <= big.min(initial=0) and big.max(initial=0) <= 2**53)




def piece_plan(c, cols: Columns) -> _Plan | None:
    """The piece's events as Collector.add would sort them; None when it must be done event by event."""
    strings = cols.strings
    m = len(strings)
    name_t, cat_t, ph_t = cols.type("name"), cols.type("cat"), cols.type("ph")
    ts_t, dur_t = cols.type("ts"), cols.type("dur")
    if not (np.all((name_t == T_MISSING) | (name_t == T_STR)) and np.all((cat_t == T_MISSING) | (cat_t == T_STR))
            and np.all((ph_t == T_MISSING) | (ph_t == T_NULL) | (ph_t == T_STR))
            and np.all(_timed(ts_t) | (ts_t == T_MISSING) | (ts_t == T_NULL))
            and np.all(_timed(dur_t) | (dur_t == T_MISSING) | (dur_t == T_NULL))):
        return None
    ts, dur = cols.real("ts"), cols.real("dur")
    if not (_in_range(ts_t, ts, cols.int("ts")) and _in_range(dur_t, dur, cols.int("dur"))):
        return None
    # what each distinct string is, as a category and as a name; index m: missing
    cat = np.where(cat_t == T_STR, cols.int("cat"), m)
    infos: list = [None] * (m + 1)
    for k in np.flatnonzero(np.bincount(cat, minlength=m + 1)).tolist():  # the codes used, in order
        infos[k] = c._kind(c_unset()) if k == m else c._kinds.get(strings[k]) or c._kind(strings[k])
    kind_of = np.array([-1 if i is None else i[1] for i in infos], dtype=np.int8)
    step_cat = np.array([i is not None and i[2] for i in infos], dtype=bool)
    flags = np.zeros((7, m + 1), dtype=bool)
    if m:
        bits = np.fromiter(map(_name_bits, strings), dtype=np.int16, count=m)
        flags[:, :m] = (bits >> _FLAG_SHIFTS) & 1
    named = name_t == T_STR
    name = np.where(named, cols.int("name"), m)
    kind = kind_of[cat]
    ph_code = np.where(ph_t == T_STR, cols.int("ph"), -1)
    is_x = ph_code == _code_of(strings, "X")
    is_i = ph_code == _code_of(strings, "i")
    has_time = _timed(ts_t) & _timed(dur_t)

    from stepscope.analysis.stream_collect import (
        _K_ANNOTATION,
        _K_DEVICE,
        _K_OP,
        _K_OTHER,
        _K_PYTHON,
        _K_RUNTIME,
    )

    unnamed_calls = ~named & is_x & (kind == _K_PYTHON)
    steps = named & step_cat[cat] & flags[0, name]
    memory = named & ~steps & ~is_x & is_i & flags[5, name]
    kept = named & ~steps & is_x & ((kind != _K_OTHER) | flags[2, name])
    if not (np.all(has_time[unnamed_calls]) and np.all(has_time[kept])):
        return None  # no numeric ts/dur where one is needed
    if not np.all(is_x[steps] & has_time[steps] & (dur[steps] > 0)):
        return None  # a ProfilerStep#N that is no complete event
    p = _Plan()
    p.memory = np.flatnonzero(memory)
    if len(p.memory) and not np.all(_timed(ts_t[p.memory])):
        return None
    base = c.base
    s_all = ts - base
    t_all = np.where(dur > 0, s_all + dur, s_all)
    py = kept & (kind == _K_PYTHON)
    rest = kept & (kind != _K_PYTHON) & (kind != _K_DEVICE) & (kind != _K_RUNTIME)
    p.dev_rows = np.flatnonzero(kept & (kind == _K_DEVICE))
    p.rt_rows = np.flatnonzero(kept & (kind == _K_RUNTIME))
    p.module_rows = np.flatnonzero(py & flags[6, name])
    p.steps = np.flatnonzero(steps)
    p.calls = np.flatnonzero(unnamed_calls | (py & ~flags[1, name]))
    p.builtins = np.flatnonzero(py & flags[1, name])
    p.long_rows = np.flatnonzero(py & ~flags[1, name] & (dur >= LONG_FRAME_US))
    p.model = np.flatnonzero(py & flags[3, name])
    p.cols, p.base, p.name, p.cat, p.infos, p.s_all, p.t_all = cols, base, name, cat, infos, s_all, t_all
    return _read_values(p, np.flatnonzero(rest & (flags[2, name] | ((kind == _K_ANNOTATION) & flags[4, name]))),
                        np.flatnonzero(rest & ~flags[2, name] & (kind == _K_OP)),
                        np.flatnonzero(rest & ~flags[2, name] & (kind == _K_ANNOTATION)))

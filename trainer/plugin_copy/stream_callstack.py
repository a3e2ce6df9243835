"""Operators' ``Call stack`` strings, the argument torch-tb-profiler 0.4.3 expects, from columns of a trace's
complete events.

    stacks = call_stacks_of(is_frame, is_op, name_id, names, thread, start, stop, has_stack)
    # {row of an operator: "a.py(3): f;b.py(9): main"}

An operator's stack is the chain of ``python_function`` frames open at its start on the same (pid, tid),
innermost first, real Python frames only (``PYTHON_FRAME``). Operators under the same chain of frames share
one string. The sweep that finds them is compiled (trace/fastread.py's ``open_frames``); ``open_frames`` here
is the same in Python, where the compiled reader is not built. Used by ``stream_plan.py``.

Before torch 1.12 a ``with_stack=True`` trace carried ``args["Call stack"]`` on each ``cpu_op``: Python
frames as ``file(line): function``, innermost first, joined by ``;``. The plugin groups operators by it
(``profiler/op_agg.py:139-156``), marks rows ``has_call_stack`` (``profiler/run_generator.py:292-299``),
serves the per-stack rows at ``/operation/stack`` (``plugin.py:197-207``), and its page splits the
string on ``;`` and parses each frame with ``/\\([0-9]+\\)$/`` for "go to source". Modern torch
records the stack as separate ``python_function`` events instead, so the string here is rebuilt from
the Python frames that enclose each operator in time on the same thread.
"""

from __future__ import annotations

import re

import numpy as np
from stepscope.trace import fastread
from stepscope.trace.fastread import as_objects

# A real Python frame, as kineto names it: "torch/nn/modules/conv.py(552): forward". C functions
# ("<built-in method conv2d ...>") and module markers ("nn.Module: Conv2d_0") were never part of the
# old Call stack, and the page could not parse them as file and line.
PYTHON_FRAME = re.compile(r"^.+\(\d+\): .+$")
STACK_SEPARATOR = ";"


def call_stacks_of(is_frame: np.ndarray, is_op: np.ndarray, name_id: np.ndarray, names: list[str],
                   thread: np.ndarray, start: np.ndarray, stop: np.ndarray, has_stack: np.ndarray,
                   since: float = -np.inf, until: float = np.inf) -> dict[int, str]:
    """callstack.call_stacks on columns: {row of an operator without a Call stack: its enclosing Python
    frames, innermost first}. ``is_frame``, ``is_op``: whether each row is a ``python_function`` frame, and
    an operator (``cpu_op``, ``operator``); ``name_id``: each row's name as its index in ``names``;
    ``thread``: each row's (pid, tid) as an id. ``since``, ``until``: only the operators that start in
    [since, until), from the frames that can enclose them (those that start before ``until`` and end at or
    after ``since``): two processes can each make a part. An operator's stack is its enclosing frames
    whatever the others, so the parts together are the whole. The sweep is the compiled reader's
    (fastread.open_frames), else ``open_frames`` here: the same chains."""
    frames = np.flatnonzero(is_frame & (start < until) & (stop >= since))
    # each thread's frames by start, the outer first on ties (then in row order); its operators by start
    frames = frames[np.lexsort((-stop[frames], start[frames], thread[frames]))]
    ops = np.flatnonzero(is_op & (start >= since) & (start < until))
    ops = ops[np.lexsort((start[ops], thread[ops]))]
    real = np.zeros(len(names), dtype=bool)
    used = np.flatnonzero(np.bincount(name_id[frames], minlength=len(names)))
    real[used] = [bool(PYTHON_FRAME.match(names[k])) for k in used.tolist()]
    args = (thread[frames], start[frames], stop[frames], name_id[frames], real[name_id[frames]], thread[ops],
            start[ops])
    got = fastread.open_frames(*args)
    chain, parent, chain_name = got if got is not None else open_frames(*args)
    strings: list[str] = []  # each chain's stack: its own frame, then its parent's stack
    for p, n in zip(parent.tolist(), chain_name.tolist()):
        strings.append(names[n] if p < 0 else names[n] + STACK_SEPARATOR + strings[p])
    some = chain >= 0
    rows, chain = ops[some], chain[some]
    own = np.asarray(has_stack, dtype=bool)[rows]  # those that carry a stack keep it
    return dict(zip(rows[~own].tolist(), as_objects(strings)[chain[~own]].tolist()))


def open_frames(frame_thread: np.ndarray, frame_start: np.ndarray, frame_stop: np.ndarray, frame_name: np.ndarray,
                frame_real: np.ndarray, op_thread: np.ndarray, op_start: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fastread.open_frames in Python, where the compiled reader is not built (and the tests' reference for
    it): each thread's sweep keeps, beside the open frames, per depth the chain of real frames from the
    outermost down to that one and the earliest end among them, so that an operator under frames that are
    all still open takes the innermost one's chain without walking them. Chains are nodes of a tree
    (``parent``, ``name``), equal chains one node, made in the order the sweep meets them."""
    made: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    name: list[int] = []

    def child(p: int, n: int) -> int:
        node = made.get((p, n))
        if node is None:
            node = made[(p, n)] = len(parent)
            parent.append(p)
            name.append(n)
        return node

    f_thread, f_start, f_stop = frame_thread.tolist(), frame_start.tolist(), frame_stop.tolist()
    f_name, f_real = frame_name.tolist(), frame_real.tolist()
    o_thread, o_start = op_thread.tolist(), op_start.tolist()
    out = [-1] * len(o_thread)
    f = o = 0
    while o < len(o_thread):
        t = o_thread[o]
        while f < len(f_thread) and f_thread[f] < t:
            f += 1
        nxt = end = f
        while end < len(f_thread) and f_thread[end] == t:
            end += 1
        open_: list[list] = []  # [end, earliest end down to it, chain, name, real]
        while o < len(o_thread) and o_thread[o] == t:
            at = o_start[o]
            while nxt < end and f_start[nxt] <= at:
                while open_ and open_[-1][0] < f_start[nxt]:
                    open_.pop()
                below = open_[-1][2] if open_ else -1
                chain = child(below, f_name[nxt]) if f_real[nxt] else below
                earliest = min(open_[-1][1], f_stop[nxt]) if open_ else f_stop[nxt]
                open_.append([f_stop[nxt], earliest, chain, f_name[nxt], f_real[nxt]])
                nxt += 1
            while open_ and open_[-1][0] < at:
                open_.pop()
            if not open_ or open_[-1][1] >= at:
                out[o] = open_[-1][2] if open_ else -1
            else:  # frames that ended before the operator stay below an open one: left out
                chain = -1
                for fr in open_:
                    if fr[0] >= at and fr[4]:
                        chain = child(chain, fr[3])
                out[o] = chain
            o += 1
        f = end
    return (np.array(out, dtype=np.int64), np.array(parent, dtype=np.int64), np.array(name, dtype=np.int64))

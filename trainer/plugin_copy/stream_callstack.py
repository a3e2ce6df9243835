"""Operators' ``Call stack`` strings, the argument torch-tb-profiler 0.4.3 expects, from columns of a trace's
complete events.

    stacks = call_stacks_of(is_frame, is_op, name, thread, start, stop, has_stack)   # {row: "a.py(3): f;..."}

An operator's stack is the chain of ``python_function`` frames open at its start on the same (pid, tid),
innermost first, real Python frames only (``PYTHON_FRAME``). Consecutive operators under the same
open frames share one string. Used by ``stream_plan.py``.

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
from collections import defaultdict

import numpy as np

# A real Python frame, as kineto names it: "torch/nn/modules/conv.py(552): forward". C functions
# ("<built-in method conv2d ...>") and module markers ("nn.Module: Conv2d_0") were never part of the
# old Call stack, and the page could not parse them as file and line.
PYTHON_FRAME = re.compile(r"^.+\(\d+\): .+$")
STACK_SEPARATOR = ";"


def call_stacks_of(is_frame: np.ndarray, is_op: np.ndarray, name_of: list[str], thread: np.ndarray,
                   start: np.ndarray, stop: np.ndarray, has_stack: list[bool], since: float = -np.inf,
                   until: float = np.inf) -> dict[int, str]:
    """callstack.call_stacks on columns: {row of an operator without a Call stack: its enclosing Python
    frames, innermost first}. ``is_frame``, ``is_op``: whether each row is a ``python_function`` frame, and
    an operator (``cpu_op``, ``operator``); ``thread``: each row's (pid, tid) as an id. ``since``, ``until``: only the operators that start in
    [since, until), from the frames that can enclose them (those that start before ``until`` and end at or
    after ``since``): two processes can each make a part. An operator's stack is its enclosing frames
    whatever the others, so the parts together are the whole."""
    out: dict[int, str] = {}
    frames_by_thread: dict = defaultdict(list)
    ops_by_thread: dict = defaultdict(list)
    real: dict[str, bool] = {}
    # each thread's frames by start, the outer first on ties (then in row order), and its operators by
    # start (then row): sorted once here, so that each thread's lists are made in order
    rows = np.flatnonzero(is_frame & (start < until) & (stop >= since))
    rows = rows[np.lexsort((-stop[rows], start[rows]))]
    for k, t, a, b in zip(rows.tolist(), thread[rows].tolist(), start[rows].tolist(), stop[rows].tolist()):
        frames_by_thread[t].append((a, b, name_of[k]))
    rows = np.flatnonzero(is_op & (start >= since) & (start < until))
    rows = rows[np.argsort(start[rows], kind="stable")]
    for k, t, a in zip(rows.tolist(), thread[rows].tolist(), start[rows].tolist()):
        ops_by_thread[t].append((a, k))
    for key, ops in ops_by_thread.items():
        frames = frames_by_thread.get(key)
        if frames:
            _thread_stacks(frames, ops, has_stack, real, out)
    return out


def _thread_stacks(frames: list, ops: list, has_stack: list[bool], real: dict, out: dict) -> None:
    """One thread's sweep: ``frames`` (start, end, name) sorted by start (outer first on ties), ``ops``
    (start, row) sorted. Beside the open frames it keeps, per depth, the real frames from the outermost
    down to that one and the earliest end among them, so that an operator under frames that are all still
    open gets its stack without walking them."""
    open_frames: list = []
    chains: list[tuple] = []  # chains[d]: real frame names of open_frames[:d + 1], outermost first
    earliest: list[float] = []  # earliest[d]: the earliest end among open_frames[:d + 1]
    nxt = 0
    strings: dict[tuple, str | None] = {(): None}
    for op_start, k in ops:
        while nxt < len(frames) and frames[nxt][0] <= op_start:
            frame = frames[nxt]
            while open_frames and open_frames[-1][1] < frame[0]:
                open_frames.pop(), chains.pop(), earliest.pop()
            ok = real.get(frame[2])
            if ok is None:
                ok = real[frame[2]] = bool(PYTHON_FRAME.match(frame[2]))
            below = chains[-1] if chains else ()
            chains.append((*below, frame[2]) if ok else below)
            earliest.append(min(earliest[-1], frame[1]) if earliest else frame[1])
            open_frames.append(frame)
            nxt += 1
        while open_frames and open_frames[-1][1] < op_start:
            open_frames.pop(), chains.pop(), earliest.pop()
        if not earliest or earliest[-1] >= op_start:  # every open frame encloses the op: the kept chain
            chain = chains[-1] if chains else ()
            stack = strings.get(chain, "")
            if stack == "":
                stack = strings[chain] = STACK_SEPARATOR.join(reversed(chain))
        else:  # frames that ended before the op stay below an open one: leave them out
            chain = tuple(f[2] for f in reversed(open_frames) if f[1] >= op_start and real[f[2]])
            stack = STACK_SEPARATOR.join(chain) if chain else None
        if stack is not None and not has_stack[k]:
            out[k] = stack

"""Operators' ``Call stack`` strings from columns of a trace's complete events (``callstack.py``'s rule).

    stacks = call_stacks_of(cat, name, thread, start, stop, has_stack)   # {row: "a.py(3): f;b.py(9): main"}

An operator's stack is the chain of ``python_function`` frames open at its start on the same (pid, tid),
innermost first, real Python frames only (``callstack.PYTHON_FRAME``). Consecutive operators under the same
open frames share one string. Used by ``stream_plan.py``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .callstack import PYTHON_FRAME, STACK_SEPARATOR


def call_stacks_of(cat_arr: np.ndarray, name_of: list[str], thread: list, start: np.ndarray,
                   stop: np.ndarray, has_stack: list[bool]) -> dict[int, str]:
    """callstack.call_stacks on columns: {row of an operator without a Call stack: its enclosing Python
    frames, innermost first}."""
    out: dict[int, str] = {}
    frames_by_thread: dict = defaultdict(list)
    ops_by_thread: dict = defaultdict(list)
    is_frame = cat_arr == "python_function"
    is_op = np.isin(cat_arr, ["cpu_op", "operator"])
    real: dict[str, bool] = {}
    for k in np.flatnonzero(is_frame):
        frames_by_thread[thread[k]].append((float(start[k]), float(stop[k]), name_of[k]))
    for k in np.flatnonzero(is_op):
        ops_by_thread[thread[k]].append((float(start[k]), int(k)))
    for key, ops in ops_by_thread.items():
        frames = frames_by_thread.get(key)
        if not frames:
            continue
        frames.sort(key=lambda f: (f[0], -f[1]))
        ops.sort()
        open_frames: list = []
        nxt = 0
        cache: dict[tuple, str] = {}
        changed, last = True, None  # the open frames changed since ``last`` = (their earliest end, stack)
        for op_start, k in ops:
            while nxt < len(frames) and frames[nxt][0] <= op_start:
                frame = frames[nxt]
                while open_frames and open_frames[-1][1] < frame[0]:
                    open_frames.pop()
                open_frames.append(frame)
                nxt += 1
                changed = True
            while open_frames and open_frames[-1][1] < op_start:
                open_frames.pop()
                changed = True
            if not changed and last[0] >= op_start:  # same frames, all still open: same stack
                if last[1] is not None and not has_stack[k]:
                    out[k] = last[1]
                continue
            chain = []
            for f in reversed(open_frames):
                if f[1] >= op_start:
                    ok = real.get(f[2])
                    if ok is None:
                        ok = real[f[2]] = bool(PYTHON_FRAME.match(f[2]))
                    if ok:
                        chain.append(f[2])
            stack = None
            if chain:
                t = tuple(chain)
                if t not in cache:
                    cache[t] = STACK_SEPARATOR.join(t)
                stack = cache[t]
                if not has_stack[k]:
                    out[k] = stack
            changed = False
            last = (min((f[1] for f in open_frames), default=float("inf")), stack)
    return out

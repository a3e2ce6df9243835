"""Synthesise the ``Call stack`` argument that torch-tb-profiler 0.4.3 expects on operators.

Before torch 1.12 a ``with_stack=True`` trace carried ``args["Call stack"]`` on each ``cpu_op``: Python
frames as ``file(line): function``, innermost first, joined by ``;``. The plugin groups operators by it
(``profiler/op_agg.py:139-156``), marks rows ``has_call_stack`` (``profiler/run_generator.py:292-299``),
serves the per-stack rows at ``/operation/stack`` (``plugin.py:197-207``), and its page splits the
string on ``;`` and parses each frame with ``/\\([0-9]+\\)$/`` for "go to source". Modern torch
records the stack as separate ``python_function`` events instead, so the string here is rebuilt from
the Python frames that enclose each operator in time on the same thread.

    from stepscope.profiler.tbfix.callstack import call_stacks
    stacks = call_stacks(events)     # {index of a cpu_op event: "a.py(3): f;b.py(9): main"}
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..trace.vocabulary import OPERATOR_CATEGORIES, category
from ..trace.vocabulary import span as _span

# A real Python frame, as kineto names it: "torch/nn/modules/conv.py(552): forward". C functions
# ("<built-in method conv2d ...>") and module markers ("nn.Module: Conv2d_0") were never part of the
# old Call stack, and the page could not parse them as file and line.
PYTHON_FRAME = re.compile(r"^.+\(\d+\): .+$")
STACK_SEPARATOR = ";"


def call_stacks(events: list[dict]) -> dict[int, str]:
    """Map the index of each operator event that runs under Python frames to its call-stack string.

    An operator's stack is the chain of ``python_function`` frames open at the operator's start on the
    same (pid, tid), innermost first. Operators with no enclosing Python frame (autograd's backward
    thread, for instance) get no entry, exactly like the old traces.
    """
    frames_by_thread: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    ops_by_thread: dict[tuple, list[tuple[float, int]]] = defaultdict(list)
    for i, e in enumerate(events):
        if e.get("ph") != "X":
            continue
        cat = category(e)
        key = (e.get("pid"), e.get("tid"))
        if cat == "python_function":
            start, end = _span(e)
            frames_by_thread[key].append((start, end, str(e.get("name", ""))))
        elif cat in OPERATOR_CATEGORIES:
            ops_by_thread[key].append((_span(e)[0], i))

    stacks: dict[int, str] = {}
    for key, ops in ops_by_thread.items():
        frames = frames_by_thread.get(key)
        if not frames:
            continue
        # Outer frames first when two start together, so that the open-frame stack stays nested.
        frames.sort(key=lambda f: (f[0], -f[1]))
        ops.sort()
        open_frames: list[tuple[float, float, str]] = []
        next_frame = 0
        cache: dict[tuple, str] = {}
        for op_start, index in ops:
            while next_frame < len(frames) and frames[next_frame][0] <= op_start:
                frame = frames[next_frame]
                while open_frames and open_frames[-1][1] < frame[0]:
                    open_frames.pop()
                open_frames.append(frame)
                next_frame += 1
            while open_frames and open_frames[-1][1] < op_start:
                open_frames.pop()
            chain = tuple(f[2] for f in reversed(open_frames) if f[1] >= op_start and PYTHON_FRAME.match(f[2]))
            if not chain:
                continue
            if chain not in cache:
                cache[chain] = STACK_SEPARATOR.join(chain)
            stacks[index] = cache[chain]
    return stacks

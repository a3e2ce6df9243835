"""Input checks that a trace parser runs before it trusts the document or an event. Pure, torch-free.

    check_document(trace, where="rank0.1795259107760373831")     # the top-level object
    for i, e in enumerate(trace["traceEvents"]):
        check_event(e, i, where)                                    # each raw event dict

Each check returns None or raises ``TraceError`` (a ValueError) whose message is one line that starts with
``where`` and names the event (its index in ``traceEvents`` and its name) and what is wrong with it. The
checks only look at one event at a time, so a streaming parser can call them as events arrive.

What is refused, and why it matters downstream:
- ``distributedInfo`` that is not an object, ``deviceProperties`` that is not an array (the rank and the GPU
  name are read from them);
- an event that is not an object, a ``name`` that is not a string, ``args`` that is not an object;
- a ``ts`` or ``dur`` that is not a finite number (strings, NaN, Infinity) or lies beyond ``MAX_TIME_US``:
  timeline arithmetic on such values yields NaN or loses whole microseconds, and torch-tb-profiler 0.4.3
  cannot load such a file either;
- a ``ProfilerStep#N`` host range that is not a complete event (``"ph": "X"``) or lasts zero or less: every
  per-step number divides by the step time.
A negative ``dur`` elsewhere is tolerated (it counts as 0, see vocabulary.interval).
"""

from __future__ import annotations

import re

from stepscope.trace.errors import TraceError
from stepscope.trace.vocabulary import ANNOTATION_CATEGORIES, OPERATOR_CATEGORIES, STEP_PREFIX

# 2**53 µs (about 285 years after the epoch): the largest time at which a float still resolves 1 µs. Profiler
# clocks read about 2e15 µs (Unix time) or 4e12 µs (monotonic), far below.
MAX_TIME_US = float(2**53)
# Categories in which a ProfilerStep#N is the host range of a step: today's user_annotation, torch 1.8/1.9's
# Operator, and none at all (a trace whose writer dropped the field still has its steps).
STEP_CATEGORIES = ANNOTATION_CATEGORIES | OPERATOR_CATEGORIES | {""}
STEP_NAME = re.compile(re.escape(STEP_PREFIX) + r"\d+$")
_JSON_TYPE = {dict: "object", list: "array"}


def check_document(trace, where: str) -> None:
    """The top level: an object with a ``traceEvents`` array, and well-typed metadata where present."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{where}: not a Chrome trace (expected a JSON object with a traceEvents list)")
    for key, kind in (("distributedInfo", dict), ("deviceProperties", list)):
        value = trace.get(key)
        if value is not None and not isinstance(value, kind):
            raise TraceError(f"{where}: {key} is {_json_type(value)}, expected a JSON {_JSON_TYPE[kind]}")


def is_step_event(e: dict) -> bool:
    """Whether ``e`` is the host range of a training step (ProfilerStep#N in a step category)."""
    name = e.get("name")
    return (isinstance(name, str) and STEP_NAME.match(name) is not None
            and str(e.get("cat", "")).lower() in STEP_CATEGORIES)


def check_event(e, i: int, where: str) -> None:
    """One raw event; ``i`` is its index in ``traceEvents``."""
    if not isinstance(e, dict):
        raise TraceError(f"{where}: event #{i} is {type(e).__name__}, expected an object")
    name = e.get("name")
    if "name" in e and not isinstance(name, str):
        raise TraceError(f"{where}: event #{i} has a name that is {_json_type(name)} ({_short(name)}), "
                         "expected a string")
    args = e.get("args")
    if args is not None and not isinstance(args, dict):
        raise TraceError(f"{where}: {_label(e, i)} has args that is {_json_type(args)}, expected an object")
    for key in ("ts", "dur"):
        v = e.get(key)
        if v is not None and (type(v) not in (int, float) or not -MAX_TIME_US <= v <= MAX_TIME_US):
            raise TraceError(f"{where}: {_label(e, i)} has {key} {_short(v)}, expected a finite number of µs "
                             f"within ±{MAX_TIME_US:.0e}")
    if is_step_event(e):
        if e.get("ph") != "X":
            raise TraceError(f"{where}: {_label(e, i)} has ph {_short(e.get('ph'))}; a step's host range must "
                             "be a complete event (\"ph\": \"X\") with ts and dur")
        if e.get("ts") is None or e.get("dur") is None:
            raise TraceError(f"{where}: {_label(e, i)} has no numeric ts/dur; a step's host range needs both")
        if e["dur"] <= 0:
            raise TraceError(f"{where}: {_label(e, i)} lasts {e['dur']!r} µs; a step must last more than 0")


def no_steps_error(events: list, where: str) -> TraceError:
    """The error for a trace in which the parser found no step: says what the ProfilerStep#N events that are
    there lack, if there are any."""
    named = [(i, e) for i, e in enumerate(events) if isinstance(e, dict) and isinstance(e.get("name"), str)
             and STEP_NAME.match(e["name"])]
    return steps_missing_error(len(named), named[0] if named else None, where)


def steps_missing_error(count: int, first: tuple[int, dict] | None, where: str) -> TraceError:
    """``no_steps_error`` from the number of ProfilerStep#N events and the first of them (its index and
    the event), for a parser that does not hold the events."""
    if not count:
        return TraceError(f"{where}: no ProfilerStep#N events; profile with a schedule and call prof.step() "
                          "once per training step")
    i, e = first
    return TraceError(f"{where}: {count} ProfilerStep#N events but none is a host step range: event #{i} "
                      f"has cat {_short(e.get('cat'))}, ph {_short(e.get('ph'))} (expected cat user_annotation "
                      "or Operator, ph X)")


def _label(e: dict, i: int) -> str:
    return f"event #{i} ({_short(e.get('name'))}, cat {_short(e.get('cat'))})"


def _json_type(v) -> str:
    for kind, word in ((bool, "a boolean"), (str, "a string"), ((int, float), "a number"), (dict, "an object"),
                       (list, "an array"), (type(None), "null")):
        if isinstance(v, kind):
            return word
    return type(v).__name__


def _short(v, n: int = 40) -> str:
    text = repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"

"""The first steps of a large trace file, as a small trace file of the same events, for checks that must
load a whole trace and cannot afford to at gigabyte size.

    path = excerpt(Path("out/w.1.pt.trace.json.gz"), Path("/tmp/x/excerpt.pt.trace.json"), steps=3)

Two streamed passes over the file (trace/jsonstream.py), never holding it: the first finds the
ProfilerStep#N starts; the second keeps, byte for byte, every event that starts before step ``steps + 1``
begins (and those without a time: process and thread names), then writes them with the file's other
top-level keys. Returns the excerpt's path, or None when the file has ``steps`` steps or fewer (the file is
its own excerpt) or cannot be streamed.

    path = step_window(Path("big.pt.trace.json.gz"), Path("/tmp/x/w.pt.trace.json"), first=40, stop=43)

``step_window`` is the same for any steps ProfilerStep#first .. #stop-1: it keeps every event that starts
from step ``first``'s start until step ``stop`` begins (the trace's end when ``stop`` is past its last
step), and every event without a time or of phase "M" (process and thread names). Torch-free.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from stepscope.trace import schema
from stepscope.trace.jsonstream import TraceStream
from stepscope.trace.vocabulary import STEP_PREFIX

_Timed = schema.view("name", "ts", "ph")  # only these fields of the one event schema
_TIMED = msgspec.json.Decoder(list[_Timed])
_RAW = msgspec.json.Decoder(list[msgspec.Raw])


def _step_starts(path: Path) -> list[float]:
    starts = []
    with TraceStream(path) as ts:
        for events in ts.decode_events(_TIMED.decode):
            starts += [e.ts for e in events if isinstance(e.name, str) and e.name.startswith(STEP_PREFIX)
                       and isinstance(e.ts, (int, float))]
    return sorted(starts)


def _both(text) -> list[tuple]:
    text = bytes(text)  # the raw events keep a reference to it; the stream's buffer is reused
    return list(zip(_RAW.decode(text), _TIMED.decode(text), strict=True))


def excerpt(path: Path, out: Path, steps: int) -> Path | None:
    """See the module docstring."""
    try:
        starts = _step_starts(Path(path))
        if len(starts) <= steps:
            return None
        cutoff = starts[steps]
        with TraceStream(Path(path)) as ts:
            kept = [bytes(raw) for events in ts.decode_events(_both) for raw, timed in events
                    if not (isinstance(timed.ts, (int, float)) and timed.ts >= cutoff)]
            header = ts.header
        write_excerpt(Path(out), kept, header)
    except (OSError, EOFError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Path(out)


def _numbered_starts(path: Path) -> dict[int, float]:
    """ProfilerStep#N -> its start, for every step of the trace."""
    starts: dict[int, float] = {}
    with TraceStream(path) as ts:
        for events in ts.decode_events(_TIMED.decode):
            for e in events:
                if (isinstance(e.name, str) and e.name.startswith(STEP_PREFIX) and isinstance(e.ts, (int, float))
                        and e.name[len(STEP_PREFIX):].isdigit()):
                    starts[int(e.name[len(STEP_PREFIX):])] = e.ts
    return starts


def step_window(path: Path, out: Path, first: int, stop: int) -> Path | None:
    """See the module docstring. None when no step of the trace lies in [first, stop), or when the file
    cannot be streamed."""
    try:
        starts = _numbered_starts(Path(path))
        inside = [n for n in starts if first <= n < stop]
        if not inside:
            return None
        begin = starts[min(inside)]
        later = [starts[n] for n in starts if n >= stop]
        end = min(later) if later else float("inf")
        with TraceStream(Path(path)) as ts:
            kept = [bytes(raw) for events in ts.decode_events(_both) for raw, timed in events
                    if timed.ph == "M" or not isinstance(timed.ts, (int, float)) or begin <= timed.ts < end]
            header = ts.header
        write_excerpt(Path(out), kept, header)
    except (OSError, EOFError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Path(out)


def write_excerpt(out: Path, events: list[bytes], header: dict) -> None:
    """An excerpt file: ``events`` (each one event's JSON, in file order), then the top-level ``header`` keys."""
    with open(out, "wb") as f:
        f.write(b'{"traceEvents":[' + b",".join(events) + b"]")
        for key, value in header.items():
            f.write(b"," + msgspec.json.encode(key) + b":" + msgspec.json.encode(value))
        f.write(b"}")

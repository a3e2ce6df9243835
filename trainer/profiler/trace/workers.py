"""How many processes may parse traces at once within a memory budget, and the default budget. Torch-free.

    plan = plan_processes(files, budget_bytes=2 << 30)     # Plan(per_file=...)
    stepscope analyze logs/ddp --max-memory 2G             # the budget, from the command line

A trace's streamed parse (stream_parse.py) holds its event objects (about ``EVENT_BYTES_PER_FILE_BYTE`` per
byte of uncompressed JSON, measured on the ResNet-18 replicas of BENCHMARKS.md) plus the piece being decoded
and the interpreter, so its peak is ``BASE_BYTES + EVENT_BYTES_PER_FILE_BYTE * size`` at most. Several
traces (ranks) are parsed in ``per_file`` forked processes at once (report.in_processes), capped by the CPU
count and by what fits the budget; 1 means "in this process". Runs with less JSON than ``SPLIT_FROM`` in all
stay in this process: starting processes would cost more than it saves, and a training process that calls
the analysis is never forked for a small run. Traces parsed in this process that are uncompressed and at
least ``SPLIT_FROM`` long are cut into ``parts_for(path, plan)`` byte ranges, parsed at once by this process
and forked helpers (stream_ranges.py); the helpers hold only columns, so the budget is the same.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

BASE_BYTES = 80 << 20  # interpreter, msgspec, decode buffers and one decoded piece
EVENT_BYTES_PER_FILE_BYTE = 1.0
GZ_RATIO_GUESS = 10  # when the gzip trailer cannot say (files over 4 GiB uncompressed)
SPLIT_FROM = 64 << 20


MAX_PARTS = 4  # byte ranges of one trace: more leaves this process rebuilding the others' events alone


@dataclass(frozen=True)
class Plan:
    per_file: int  # processes parsing whole traces at once
    parts: int = 1  # byte ranges a large trace parsed in this process is cut into


def default_budget() -> int:
    """A quarter of the machine's RAM."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError):
        return 4 << 30


def json_size(path: Path) -> int:
    """Bytes of JSON in ``path``: its size, or for .gz the size the gzip trailer records (mod 4 GiB)."""
    path = Path(path)
    size = path.stat().st_size
    if not path.name.endswith(".gz") or size < 18:
        return size
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        (isize,) = struct.unpack("<I", f.read(4))
    return isize if isize >= size else size * GZ_RATIO_GUESS


def peak_bytes(json_bytes: int) -> int:
    return BASE_BYTES + int(EVENT_BYTES_PER_FILE_BYTE * json_bytes)


def plan_processes(paths: list[Path], budget_bytes: int, cpus: int | None = None) -> Plan:
    """How many of ``paths`` to parse at once (module docstring)."""
    cpus = cpus or os.cpu_count() or 1
    parts = max(1, min(cpus, MAX_PARTS))
    sizes = [json_size(p) for p in paths]
    if len(paths) < 2 or sum(sizes) < SPLIT_FROM:
        return Plan(1, parts)
    fits = budget_bytes // max(peak_bytes(s) for s in sizes)
    per_file = max(1, min(cpus, len(paths), fits))
    return Plan(per_file, parts if per_file == 1 else 1)


def parts_for(path: Path, plan: Plan) -> int:
    """Byte ranges to parse ``path`` in, in this process (module docstring)."""
    path = Path(path)
    if plan.parts < 2 or path.name.endswith(".gz") or path.stat().st_size < SPLIT_FROM:
        return 1
    return plan.parts

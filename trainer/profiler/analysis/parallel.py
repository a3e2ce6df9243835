"""How many processes may parse at once within a memory budget, and the default budget.

    plan = plan_processes(files, budget_bytes=2 << 30)     # Plan(per_file=..., ranges=...)

A trace's parse holds its columns (about ``COLUMN_BYTES_PER_FILE_BYTE`` per byte of uncompressed JSON,
measured on the ResNet-18 traces of BENCHMARKS.md) plus the piece being decoded and the interpreter, so its
peak is ``BASE_BYTES + COLUMN_BYTES_PER_FILE_BYTE * size`` at most. Several traces (ranks) are parsed in
``per_file`` processes at once, each parsing and analysing whole traces; a single trace is cut into
``ranges`` byte ranges parsed in parallel when it is uncompressed and large. Both are capped by the CPU
count and by what fits the budget; 1 means "in this process".
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

BASE_BYTES = 80 << 20  # interpreter, numpy, decode buffers and one decoded piece
COLUMN_BYTES_PER_FILE_BYTE = 0.25
GZ_RATIO_GUESS = 10  # when the gzip trailer cannot say (files over 4 GiB uncompressed)
SPLIT_FROM = 64 << 20  # runs with less JSON than this, in all, are parsed in this process


@dataclass(frozen=True)
class Plan:
    per_file: int  # processes parsing whole traces at once
    ranges: int  # processes parsing parts of one trace (when there is one trace)


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
    return BASE_BYTES + int(COLUMN_BYTES_PER_FILE_BYTE * json_bytes)


def plan_processes(paths: list[Path], budget_bytes: int, cpus: int | None = None) -> Plan:
    cpus = cpus or os.cpu_count() or 1
    sizes = [json_size(p) for p in paths]
    if sum(sizes) < SPLIT_FROM:
        return Plan(1, 1)  # starting processes costs more than it saves; and no fork from a training process
    if len(paths) > 1:
        fits = budget_bytes // max(peak_bytes(s) for s in sizes)
        return Plan(per_file=max(1, min(cpus, len(paths), fits)), ranges=1)
    (path,), (size,) = paths, sizes
    if path.name.endswith(".gz") or size < SPLIT_FROM:
        return Plan(1, 1)
    # n workers hold a 1/n share of the columns each, and this process the merged columns.
    for n in range(cpus, 1, -1):
        if n * BASE_BYTES + 2 * peak_bytes(size) <= budget_bytes:
            return Plan(1, n)
    return Plan(1, 1)

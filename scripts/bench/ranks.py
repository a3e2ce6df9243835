"""Build an N-rank job from real rank traces, with stragglers of a known cause: a benchmark and a test fixture.

    spec = JobSpec(ranks=64, stragglers=(Straggler(rank=17, cause="host_outside_ops", ms_per_step=5.0),))
    build_job(spec, Path("/tmp/job64"))        # job64/job_rank<i>.<span>.pt.trace.json, ..., truth.json
    stepscope.analyze("/tmp/job64")            # names rank 17, for host work outside ops

The sources are the ranks of a recorded job (default: tests/data/suite_ddp/balanced, 2 H200s over NCCL,
no straggler), taken in turn: rank i of the built job is a copy of source ``i % len(sources)``. Each copy
gets its own ``distributedInfo`` rank and world size, its own file name, and its own timing jitter (every
time and duration scaled by a factor within 1 +- ``jitter``, drawn from ``seed`` and the rank). Its profiled
steps are repeated ``repeat`` times, one after the other, with fresh correlation, flow, External, Python and
record-function ids and renumbered ``ProfilerStep#N``, which makes a rank as large as needed (a source rank
is about 0.6 MB of JSON, 3 steps; 30 repeats make about 16 MB).

A straggler gets ``ms_per_step`` more time per step, of one cause (the phases of analysis/straggler_why.py):

  ``host_outside_ops``  host work outside torch ops: at the start of each step, on the training loop's
                        thread, time is inserted (everything later moves later; the host ranges around the
                        point, ``ProfilerStep#N`` and Python frames, grow), inside a ``record_function``
                        range named ``INJECTED_RANGE``;
  ``data``              a longer data wait: the same, inside a DataLoader range (``DATALOADER_RANGE``);
  ``gpu_kernels``       slower GPU kernels: each compute kernel of the step runs longer, by an equal share
                        of ``ms_per_step`` (everything later on the timeline moves later).

The other ranks are left as recorded: they are not made to wait for the straggler in their collectives, so
each rank's own breakdown is that of its source. The truth (which ranks, which cause, how much) is written
beside the ranks as ``truth.json``.

Each rank is written streaming, one event at a time, so memory stays near that of one source rank (held
whole: they are small) whatever the size of the rank; ``build_job(..., workers=K)`` writes K ranks at once
in worker processes.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import random
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from stepscope.trace.discover import discover
from stepscope.trace.files import load_trace
from stepscope.trace.workers import fork_pool

from bench import REPO

CAUSES = ("host_outside_ops", "data", "gpu_kernels")
INJECTED_RANGE = "injected_host_work"
DATALOADER_RANGE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
DEFAULT_SOURCES = REPO / "tests" / "data" / "suite_ddp" / "balanced"
ID_ARGS = ("correlation", "External id", "Record function id", "Ev Idx", "Python id", "Python parent id")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}  # activities: they move, and grow only if slowed
TRUTH = "truth.json"


@dataclass(frozen=True)
class Straggler:
    rank: int
    cause: str  # one of CAUSES
    ms_per_step: float


@dataclass(frozen=True)
class JobSpec:
    ranks: int
    stragglers: tuple[Straggler, ...] = ()
    sources: tuple[str, ...] = ()  # trace files or run directories; () is DEFAULT_SOURCES
    repeat: int = 1  # copies of the source's profiled steps in each rank
    jitter: float = 0.02
    seed: int = 0
    name: str = "job"
    gz: bool = False
    span: str = field(default="1795000000000000000")  # one profiling cycle, as tensorboard_trace_handler names

    def check(self) -> None:
        if self.ranks < 1 or self.repeat < 1 or not 0 <= self.jitter < 0.5:
            raise ValueError("ranks and repeat must be >= 1, jitter within [0, 0.5)")
        for s in self.stragglers:
            if s.cause not in CAUSES or not 0 <= s.rank < self.ranks or s.ms_per_step <= 0:
                raise ValueError(f"bad straggler {s}: cause one of {CAUSES}, rank below {self.ranks}, "
                                 "ms_per_step > 0")
        if len({s.rank for s in self.stragglers}) != len(self.stragglers):
            raise ValueError("one cause per straggler")


def source_files(sources: tuple[str, ...]) -> tuple[Path, ...]:
    """The source traces, in rank order (``distributedInfo.rank``, else file order)."""
    paths: list[Path] = []
    for s in sources or (str(DEFAULT_SOURCES),):
        p = Path(s)
        if not p.exists():
            raise ValueError(f"{p}: no such trace or folder (the default sources are a source checkout's "
                             "tests/data/suite_ddp/balanced; pass sources= elsewhere)")
        paths += [tf.path for tf in discover(p).traces] if p.is_dir() else [p]
    if not paths:
        raise ValueError(f"no traces in {', '.join(sources)}")
    return tuple(sorted(paths, key=lambda p: (_source(p).rank, str(p))))


def build_job(spec: JobSpec, out: Path, workers: int = 1) -> Path:
    """Write every rank of the job and its truth.json into ``out``; returns ``out``."""
    spec.check()
    files = source_files(spec.sources)
    for s in spec.stragglers:
        _check_cause(s, _source(files[s.rank % len(files)]))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if workers > 1:
        with fork_pool(workers) as pool:  # the one place process pools are made
            list(pool.map(write_rank, [spec] * spec.ranks, range(spec.ranks), [out] * spec.ranks,
                          [files] * spec.ranks, chunksize=max(1, spec.ranks // (4 * workers))))
    else:
        for r in range(spec.ranks):
            write_rank(spec, r, out, files)
    truth = {"world_size": spec.ranks, "sources": [str(p) for p in files], "repeat": spec.repeat,
             "jitter": spec.jitter, "seed": spec.seed,
             "stragglers": sorted((asdict(s) for s in spec.stragglers), key=lambda s: s["rank"])}
    (out / TRUTH).write_text(json.dumps(truth, indent=1) + "\n")
    return out


def rank_path(spec: JobSpec, rank: int, out: Path) -> Path:
    return Path(out) / f"{spec.name}_rank{rank}.{spec.span}.pt.trace.json{'.gz' if spec.gz else ''}"


def write_rank(spec: JobSpec, rank: int, out: Path, files: tuple[Path, ...] | None = None) -> Path:
    """Write one rank, streamed, under a temporary name renamed at the end (readers see all or nothing)."""
    files = files or source_files(spec.sources)
    src = _source(files[rank % len(files)])
    straggler = next((s for s in spec.stragglers if s.rank == rank), None)
    if straggler is not None:
        _check_cause(straggler, src)
    path = rank_path(spec, rank, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}.partial")
    scale = 1.0 + random.Random(f"{spec.seed}:{rank}").uniform(-spec.jitter, spec.jitter)
    head = dict(src.head)
    info = dict(head.get("distributedInfo") or {})
    info.update(rank=rank, world_size=spec.ranks)
    head["distributedInfo"] = info
    head.pop("traceName", None)
    try:
        with (gzip.open(tmp, "wb", compresslevel=1) if spec.gz else open(tmp, "wb")) as f:
            f.write(json.dumps(head)[:-1].encode() + b', "traceEvents": [\n')
            first = True
            for e in _events(src, spec.repeat, straggler, scale):
                f.write((b"" if first else b",\n") + json.dumps(e).encode())
                first = False
            f.write(b'\n], "traceName": ' + json.dumps(str(path)).encode() + b"}\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _check_cause(s: Straggler, src: _Source) -> None:
    if s.cause == "gpu_kernels" and not src.kernels:
        raise ValueError(f"{src.path}: no GPU kernels to slow down (rank {s.rank}, a copy of it)")


@dataclass(frozen=True)
class _Source:
    path: Path
    rank: int
    head: dict
    events: tuple[dict, ...]
    block: tuple[float, float]  # [start, end): the profiled steps and the gap that follows the last one
    steps: tuple[tuple[float, float], ...]  # (start, point of injection) of each ProfilerStep
    kernels: tuple[int, ...]  # indexes into events of the compute kernels inside the block
    step_span: int  # how much ProfilerStep#N grows from one copy of the steps to the next
    id_stride: int


@cache
def _source(path: Path) -> _Source:
    trace = load_trace(path)
    events = tuple(e for e in trace["traceEvents"] if isinstance(e, dict))
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    rank = (trace.get("distributedInfo") or {}).get("rank", 0)
    steps = sorted((e for e in events if e.get("ph") == "X" and PROFILER_STEP.match(str(e.get("name", "")))),
                   key=lambda e: e["ts"])
    if not steps:
        raise ValueError(f"{path}: no ProfilerStep#N ranges")
    ends = [s["ts"] + s["dur"] for s in steps]
    gap = max(steps[1]["ts"] - ends[0], 0.0) if len(steps) > 1 else 0.0
    block = (steps[0]["ts"], ends[-1] + gap)
    numbers = [int(PROFILER_STEP.match(s["name"]).group(1)) for s in steps]
    ids = [0]
    for e in events:
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            ids.append(e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            ids += [v for k in ID_ARGS if isinstance(v := args.get(k), int)]
    kernels = tuple(i for i, e in enumerate(events) if e.get("cat") == "kernel" and e.get("ph") == "X"
                    and "nccl" not in str(e.get("name", "")).lower() and block[0] <= e["ts"] < block[1])
    return _Source(path, rank if isinstance(rank, int) else 0, head, events, block,
                   tuple(zip((s["ts"] for s in steps), _injection_points(steps, events), strict=True)), kernels,
                   max(numbers) - min(numbers) + 1, max(ids) + 1)


def _injection_points(steps: list[dict], events: tuple[dict, ...]) -> list[float]:
    """Just after each step starts, before the first op or range its thread runs in it."""
    starts: dict = defaultdict(list)  # per thread, the sorted starts of its ops and ranges
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            starts[e.get("tid")].append(e["ts"])
    for lst in starts.values():
        lst.sort()
    out = []
    for step in steps:
        t0, t1 = step["ts"], step["ts"] + step["dur"]
        lst = starts[step["tid"]]
        i = bisect.bisect_right(lst, t0)
        first = lst[i] if i < len(lst) and lst[i] < t1 else t1
        out.append(t0 + min(1.0, (first - t0) / 2))
    return out


class _Warp:
    """Time inserted at points of the timeline: an event starting after a point moves later by what was
    inserted there; a host event around a point grows by it, and so does a device event that owns it."""

    def __init__(self, points: list[tuple[float, float, object]]):
        points.sort(key=lambda p: p[0])
        self.at = [p[0] for p in points]
        self.before = [0.0]
        for _, d, _ in points:
            self.before.append(self.before[-1] + d)
        self.owned = {owner: d for _, d, owner in points if owner is not None}

    def shift(self, t: float) -> float:
        """Time inserted strictly before t."""
        return self.before[bisect.bisect_left(self.at, t)]


def _events(src: _Source, repeat: int, straggler: Straggler | None, scale: float) -> Iterator[dict]:
    b0, b1 = src.block
    length = b1 - b0
    points: list[tuple[float, float, object]] = []
    ranges: list[tuple[float, float]] = []  # (point, µs) of each injected range, in the unwarped timeline
    if straggler is not None:
        extra = straggler.ms_per_step * 1e3
        for k in range(repeat):
            if straggler.cause == "gpu_kernels":
                per_kernel = extra * len(src.steps) / len(src.kernels)
                for i in src.kernels:
                    e = src.events[i]
                    points.append((e["ts"] + k * length + e["dur"] / 2, per_kernel, (k, i)))
            else:
                for _, p in src.steps:
                    points.append((p + k * length, extra, None))
                    ranges.append((p + k * length, extra))
    warp = _Warp(points)
    origin = min((e["ts"] for e in src.events if isinstance(e.get("ts"), (int, float))), default=0.0)

    def place(e: dict, k: int, index: int, ts: float, end: float | None) -> dict:
        """e at ``ts`` (ending at ``end``) of the repeated timeline, warped and scaled, with copy k's ids."""
        out = dict(e)
        start = ts + warp.shift(ts)
        if end is not None:
            if e.get("cat") in DEVICE_CATEGORIES:
                stop = start + (end - ts) + warp.owned.get((k, index), 0.0)
            else:
                stop = end + warp.shift(end)
            out["dur"] = (stop - start) * scale
        out["ts"] = origin + (start - origin) * scale
        if k:
            _renumber(out, k, src)
        return out

    for k in range(repeat):
        for index, e in enumerate(src.events):
            ts = e.get("ts")
            if e.get("ph") == "M" or not isinstance(ts, (int, float)):
                if k == 0:
                    yield e
                continue
            dur = e.get("dur") if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float)) else None
            end = ts + dur if dur is not None else None
            if b0 <= ts < b1:
                yield place(e, k, index, ts + k * length, end + k * length if end is not None else None)
            elif k == 0 and ts < b0:  # before the steps: stays, and grows around the repeated block
                grown = end + (repeat - 1) * length if end is not None and end >= b1 else end
                yield place(e, 0, index, ts, grown)
            elif k == repeat - 1 and ts >= b1:  # after them: moves past every copy
                yield place(e, 0, index, ts + k * length, end + k * length if end is not None else None)
    if ranges:
        name = INJECTED_RANGE if straggler.cause == "host_outside_ops" else DATALOADER_RANGE
        tid = next(e["tid"] for e in src.events if PROFILER_STEP.match(str(e.get("name", ""))))
        pid = next(e["pid"] for e in src.events if PROFILER_STEP.match(str(e.get("name", ""))))
        for p, d in ranges:
            start = p + warp.shift(p)
            yield {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid,
                   "ts": origin + (start - origin) * scale, "dur": d * scale, "args": {}}


def _renumber(e: dict, k: int, src: _Source) -> None:
    m = PROFILER_STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * src.step_span}"
    if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
        e["id"] += k * src.id_stride
    args = e.get("args")
    if isinstance(args, dict):
        args = e["args"] = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int) and (key != "Python parent id" or args[key] > 0):
                args[key] += k * src.id_stride

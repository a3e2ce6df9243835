"""What was in memory when a loop ran out of it: written before the error propagates, never instead of it.

    cap = OomCapture(Path("logs/run"), "host_123")      # stepscope.profile, trace_handler and the trainer make one
    cap.capture(error)                                  # -> logs/run/oom/<worker>.<time_ns>/, or None on failure

A capture folder holds:

    oom.json        the error's message, its figures (requested, free, allocated, reserved but unallocated), the
                    allocator's counters then, the memory telemetry of the unprofiled steps before (the window
                    edges of stepscope.schedule or the trainer: peaks, allocated, retries) and the diagnosis
    diagnosis.md    what was live at the failure and the likely cause, in words, with the remedy
    snapshot.pickle torch.cuda.memory._snapshot(): segments and blocks, with allocation stacks when the user
                    turned torch.cuda.memory._record_memory_history() on (open it at pytorch.org/memory_viz)

Where it is written from: on CUDA, an out-of-memory observer of the caching allocator (attached once CUDA is
initialised, at the first window edge) takes the snapshot at the failing allocation itself, before the error is
raised; then the error, passing through ``stepscope.profile``'s exit, the trainer's loop or, for a loop that
lets it end the process, ``sys.excepthook``, adds its message and the diagnosis. Without CUDA (a simulated
failure on a CPU, a CPU loop) the snapshot is absent and oom.json says so. The error is never caught here: it
propagates unchanged, and a failure to write the capture is one line on stderr.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import threading
import time
from pathlib import Path

import torch

OOM_DIR = "oom"
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "bytes": 1}
FIGURES = {  # torch's out-of-memory message (c10/cuda/CUDACachingAllocator.cpp), figure by figure
    "requested": re.compile(r"Tried to allocate ([\d.]+) (\w+)"),
    "capacity": re.compile(r"total capacity of ([\d.]+) (\w+)"),
    "free": re.compile(r"of which ([\d.]+) (\w+) is free"),
    "allocated": re.compile(r"([\d.]+) (\w+) is allocated by PyTorch"),
    "reserved_unallocated": re.compile(r"([\d.]+) (\w+) is reserved by PyTorch but unallocated"),
}
GIB = float(1 << 30)
FRAGMENTED_SHARE = 0.25  # reserved-but-unallocated this share of what PyTorch holds, and above the request
NEAR_LIMIT = 0.90  # the windows' peak reserved this share of capacity: the usual step was at the limit
CREEP_MIB_PER_STEP = 1.0

_captures: list[OomCapture] = []  # the latest last: the one the observer and the excepthook write to
_lock = threading.Lock()
_observer_attached = False
_hook_installed = False


def figures(message: str) -> dict:
    """The bytes torch's out-of-memory message states, by FIGURES name (those it states)."""
    out = {}
    for name, pattern in FIGURES.items():
        m = pattern.search(message)
        if m and m.group(2) in UNITS:
            out[name] = int(float(m.group(1)) * UNITS[m.group(2)])
    return out


def is_oom(error: BaseException | None) -> bool:
    return isinstance(error, torch.OutOfMemoryError)


class OomCapture:
    """See the module docstring. ``telemetry``: a callable returning the memory telemetry of the steps before
    (a dict with ``windows``: [{step, peak_allocated, ...}] and the flat mem_* figures), or None."""

    def __init__(self, folder: Path, worker: str, telemetry=None) -> None:
        self.folder = Path(folder)
        self.worker = worker
        self.telemetry = telemetry
        self.last: Path | None = None  # the capture the observer wrote, awaiting its error's message
        self.last_error: int | None = None  # id() of the error already written
        with _lock:
            _captures.append(self)
            del _captures[:-8]
        install_excepthook()

    def capture(self, error: BaseException | None = None, observed: dict | None = None) -> Path | None:
        """Write (or complete) a capture for ``error``; None when it was written already or could not be."""
        if error is not None and id(error) == self.last_error:
            return None
        try:
            return self._write(error, observed)
        except Exception as e:  # noqa: BLE001 - the user's error must propagate, whatever happens here
            print(f"stepscope: could not write the out-of-memory capture under {self.folder / OOM_DIR}: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            return None

    def _write(self, error: BaseException | None, observed: dict | None) -> Path:
        if error is not None and self.last is not None and (self.last / "oom.json").is_file():
            where = self.last  # the observer's capture of this failure: add the message
            info = json.loads((where / "oom.json").read_text())
            self.last = None
        else:
            where = self.folder / OOM_DIR / f"{self.worker}.{time.time_ns()}"
            where.mkdir(parents=True, exist_ok=True)
            info = {"worker": self.worker, "time": time.time(), "observed": observed}
            snap = _snapshot()
            if snap is None:
                info["snapshot"] = None
                info["snapshot_note"] = ("no allocator snapshot: CUDA is not available or was never initialised "
                                         "in this process")
            else:
                _atomic(where / "snapshot.pickle", pickle.dumps(snap))
                info["snapshot"] = "snapshot.pickle"
                info["snapshot_live"] = live_blocks(snap)
            info["memory_stats"] = _stats()
            info["telemetry"] = self.telemetry() if self.telemetry is not None else None
            if error is None:
                self.last = where
        if error is not None:
            info["error"] = {"type": f"{type(error).__module__}.{type(error).__qualname__}",
                             "message": str(error)}
            info["figures"] = figures(str(error))
            self.last_error = id(error)
        info["diagnosis"] = diagnose(info)
        _atomic(where / "oom.json", json.dumps(info, indent=1, default=str).encode())
        _atomic(where / "diagnosis.md", markdown(info).encode())
        return where


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _snapshot():
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.memory._snapshot()


def _stats() -> dict | None:
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    s = torch.cuda.memory_stats()
    keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak", "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms")
    return {k: s.get(k) for k in keys}


def live_blocks(snap: dict, top: int = 10) -> dict:
    """What the snapshot holds: segments, bytes in active blocks and in inactive ones (free pieces of reserved
    segments), and the largest active blocks with the innermost Python frames of their allocation when the
    history recorded them."""
    active, inactive, segments, blocks = 0, 0, 0, []
    for seg in snap.get("segments", []):
        segments += 1
        for b in seg.get("blocks", []):
            size = b.get("size", 0)
            if b.get("state") == "active_allocated":
                active += size
                frames = b.get("frames") or []
                # the innermost frame outside torch (a script, a module, or `python -c`'s "<string>")
                where = next((f"{f.get('filename')}:{f.get('line')} {f.get('name')}" for f in frames
                              if _user_frame(str(f.get("filename", "")))), None)
                blocks.append({"bytes": size, "where": where, "frames": bool(frames)})
            elif b.get("state") == "inactive":
                inactive += size
    stacks = any([b.pop("frames") for b in blocks])  # a list: every block loses the key
    blocks.sort(key=lambda b: -b["bytes"])
    by_place: dict = {}
    for b in blocks:
        if b["where"]:
            by_place[b["where"]] = by_place.get(b["where"], 0) + b["bytes"]
    return {"segments": segments, "active_bytes": active, "inactive_bytes": inactive,
            "largest": blocks[:top], "by_place": sorted(by_place.items(), key=lambda kv: -kv[1])[:top],
            "stacks": stacks}


def _user_frame(filename: str) -> bool:
    return bool(filename) and "/torch/" not in filename and not filename.startswith(("<frozen", "<built-in"))


def diagnose(info: dict) -> dict:
    """The likely cause of the failure, from the message's figures, the snapshot and the windows before it."""
    f = info.get("figures") or {}
    observed = info.get("observed") or {}
    live = info.get("snapshot_live") or {}
    tel = info.get("telemetry") or {}
    requested = f.get("requested", observed.get("alloc"))
    capacity = f.get("capacity")
    allocated = f.get("allocated", live.get("active_bytes"))
    unallocated = f.get("reserved_unallocated", live.get("inactive_bytes"))
    held = (allocated or 0) + (unallocated or 0)
    live_line = None
    if allocated is not None:
        live_line = f"{allocated / GIB:.2f} GiB was allocated by tensors"
        if unallocated is not None:
            live_line += f" and {unallocated / GIB:.2f} GiB reserved but free"
        if requested is not None:
            live_line += f" when {requested / GIB:.2f} GiB more was asked for"
        if live.get("by_place"):
            live_line += "; the most, by allocation site: " + ", ".join(
                f"{place} {b / GIB:.2f} GiB" for place, b in live["by_place"][:3])
    creep = tel.get("mem_creep_mib_per_step", 0.0) or 0.0
    peak_before = tel.get("mem_peak_reserved_mib")
    if unallocated and requested and held and unallocated >= requested and unallocated >= FRAGMENTED_SHARE * held:
        cause, remedy = ("fragmentation", f"{unallocated / GIB:.2f} GiB was reserved but free, more than the "
                         f"{requested / GIB:.2f} GiB asked for, in pieces too small for it",
                         ), "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; keep shapes steady (pad or bucket)"
    elif creep >= CREEP_MIB_PER_STEP:
        cause, remedy = ("memory_creep", f"allocated between steps rose by {creep:.1f} MiB a step over the windows "
                         "before: the run keeps tensors across steps until none is left"), (
            "find what keeps tensors across steps (a loss kept without .item(), a growing list or cache): compare "
            "two snapshots a few steps apart")
    elif peak_before is not None and capacity and peak_before * (1 << 20) >= NEAR_LIMIT * capacity:
        cause, remedy = ("at_the_limit", f"the steps before already peaked at {peak_before / 1024:.2f} GiB reserved "
                         f"of {capacity / GIB:.1f} GiB: a slightly larger input tipped it over"), (
            "cut the step's peak: activation checkpointing, bf16 autocast, a smaller micro-batch with gradient "
            "accumulation")
    elif peak_before is not None:
        cause, remedy = ("larger_than_usual", f"the steps before peaked at only {peak_before / 1024:.2f} GiB "
                         "reserved: this step asked for much more (a larger batch or sequence, variable shapes, "
                         "an evaluation or checkpoint step)"), (
            "bound the input's size (pad or bucket to a maximum), or give that step its own smaller batch")
    else:
        cause, remedy = ("step_too_large", "the step needs more memory than the device has (no unprofiled steps "
                         "were measured before it)"), (
            "a smaller batch with gradient accumulation, activation checkpointing, bf16 autocast")
    return {"cause": cause[0], "why": cause[1], "live": live_line, "remedy": remedy}


def markdown(info: dict) -> str:
    d = info["diagnosis"]
    err = info.get("error") or {}
    out = ["# Out of memory", "", f"`{err.get('type', 'observed by the allocator')}`: "
           f"{(err.get('message') or '').splitlines()[0] if err.get('message') else '(message not yet seen)'}", "",
           f"**Likely cause: {d['cause']}**: {d['why']}.", ""]
    if d.get("live"):
        out += [f"What was live: {d['live']}.", ""]
    out += [f"Remedy: {d['remedy']}.", ""]
    if info.get("snapshot") is None:
        out += [f"No snapshot: {info.get('snapshot_note')}.", ""]
    else:
        stacks = (info.get("snapshot_live") or {}).get("stacks")
        out += ["The allocator's snapshot is `snapshot.pickle` (drag it onto https://pytorch.org/memory_viz)"
                + ("." if stacks else "; it has no allocation stacks: call "
                   "torch.cuda.memory._record_memory_history() before the loop to record them."), ""]
    tel = info.get("telemetry") or {}
    if tel:
        out += ["The unprofiled steps before it (the allocator's counters at the window edges):", "",
                "| figure | value |", "|---|---:|"] + [f"| {k} | {v:g} |" for k, v in tel.items()
                                                      if isinstance(v, (int, float))] + [""]
    return "\n".join(out)


def attach_observer() -> None:
    """The caching allocator's out-of-memory observer, attached once (when CUDA is initialised): the latest
    capture writes its snapshot at the failing allocation, before the error is raised."""
    global _observer_attached
    if _observer_attached or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return
    _observer_attached = True

    def observer(device, alloc, device_allocated, device_free) -> None:
        with _lock:
            cap = _captures[-1] if _captures else None
        if cap is not None:
            cap.capture(observed={"device": device, "alloc": alloc, "device_allocated": device_allocated,
                                  "device_free": device_free})

    attach(observer)


def install_excepthook() -> None:
    """For a loop that lets an out-of-memory error end the process: the latest capture is completed with it
    just before Python prints the traceback (the frames, and the tensors they hold, are still alive)."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if is_oom(value):
            with _lock:
                cap = _captures[-1] if _captures else None
            if cap is not None:
                cap.capture(value)
        previous(kind, value, tb)

    sys.excepthook = hook

"""The step as it runs without the profiler: the figures and buckets that the verdict is taken from.

    view = unprofiled_view(profiled_breakdown, metrics, inflation, telemetry=run_telemetry)
    view.breakdown            # a Breakdown of the unprofiled step (ms summed over the steps, like the trace's)
    view.basis                # "telemetry" | "overhead_model"
    view.low, view.high       # the same under the model's low and high inflation (None with telemetry)

What the profiler leaves alone and what it does not:
- GPU work (kernels, copies, collectives, the GPU's own gaps) runs as long as without it, so those buckets are
  taken from the trace as they are;
- the host is slower: every recorded event costs it time (overhead.py), so the step is shorter without the
  profiler, and all of the difference is host-caused GPU idle.
The unprofiled step time comes from the run itself where it was measured (the trainer times every unprofiled
step and its phases: trainer/demo/timing.py), else from the trace less the modelled inflation:

    step = max(GPU path, profiled step - inflation)

Telemetry scales time; it never reclassifies it. A field the run measured replaces the trace's figure for its
bucket (``data_ms``: the wait for each batch; ``copy_ms``: the input copy on the GPU's stream); a field it did
not measure (no ``data_ms`` where the loop's loader was not wrapped in stepscope.loader, no ``copy_ms`` without
stepscope.input_copy) is unknown, never zero: the trace's own time for that bucket then grows or shrinks
with the measured step like the host's other work.

A loader paces the step only where it loads in the background while the GPU works: a DataLoader whose
workers prefetch (the trace shows its waits holding little work), on a GPU. A step that waits for such a
loader on the run's unprofiled steps (telemetry), or on every profiled step (the trace alone), is paced by it:
making anything else faster would only lengthen the wait, so the verdict is data_bound unless the GPU is busy
for most of the step (findings.py). Loading in the main process (``num_workers=0``, a DataLoader whose
iterator is ``_SingleProcessDataLoaderIter``, or waits full of ops and Python), and any loading on a CPU-only
loop, runs one after the rest of the step: its wait simply adds to the step, and it is the verdict only where
it is the step's largest cost (``serial``).
The unprofiled step time itself has one exception: when every profiled step waited for a DataLoader whose
workers load in other processes, the loader paces the step and the profiler does not slow it, so the step
stays and the inflation becomes waiting for data. Loading in the main process is host code like any other:
its share of the inflation comes off the data wait. The host-caused idle time (step - GPU path) is split into data (the measured wait, at
most all of it) and then launch, sync and other host work in the proportions the trace shows. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from stepscope.analysis.breakdown import Breakdown, host_sets
from stepscope.analysis.columns import op_columns
from stepscope.analysis.events import ParsedTrace, Times
from stepscope.analysis.intervals import IntervalSet
from stepscope.analysis.overhead import Inflation
from stepscope.analysis.steps import StepWindow
from stepscope.analysis.vocabulary import CPU_BUCKETS, DATA, DEVICE_BUCKETS, GPU_BUCKETS, GPU_BUSY, TRANSFER
from stepscope.trace.vocabulary import DATALOADER_PREFIX

# The modelled inflation takes at most this share of the profiled step: the profiler never cost more than
# about 3x the step it recorded (unprofiled / profiled 0.24 at the least over the 80 H100 calibration rows of
# tests/data/calibration/), while a model that charges every recorded event can exceed the whole step on a
# loop of sub-millisecond CPU steps (a 0.20 ms step read as 0.00 ms).
MAX_INFLATION_SHARE = 0.8
# the step's idle that is neither data nor device time, split by the trace's proportions: on a GPU trace the
# host buckets (launch, sync, other_host), on a CPU trace every bucket but data
HOST_SPLIT = tuple(b for b in GPU_BUCKETS if b not in DEVICE_BUCKETS and b != DATA)
CPU_SPLIT = tuple(b for b in CPU_BUCKETS if b != DATA)
# A DataLoader paces the step when every profiled step waits for it at least this long (ms, and share)...
PACING_WAIT_MS, PACING_WAIT_SHARE = 0.5, 0.02
# ... and its batches come from worker processes: few ops and Python frames inside the wait per step
IN_PROCESS_OPS, IN_PROCESS_FRAMES = 20, 200
SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"  # torch's DataLoader iterator for num_workers=0


@dataclass(frozen=True)
class UnprofiledView:
    breakdown: Breakdown
    basis: str
    low: Breakdown | None = None  # under the low inflation estimate (the step longer)
    high: Breakdown | None = None  # under the high one (the step shorter)
    loader_paced: bool = False  # the DataLoader sets the step's pace (see telemetry_paced, loader_paced)
    data_measured: bool = False  # the wait for data comes from the run's unprofiled steps (telemetry data_ms)


def telemetry_paced(telemetry: dict) -> bool:
    """The run's unprofiled steps waited for their batches: the mean wait is over the pacing threshold (a
    loader that keeps up hands a ready batch over in 0.1-0.3 ms). The mean, since workers that finish
    together make alternate steps wait long and the others not at all."""
    step, data = telemetry.get("step_ms") or 0.0, telemetry.get("data_ms") or 0.0
    return data >= max(PACING_WAIT_MS, PACING_WAIT_SHARE * step)


def _per_step(bd: Breakdown) -> dict[str, float]:
    return {b: bd.ms_per_step(b) for b in bd.buckets}


def rebuild(profiled: Breakdown, step_ms: float, data_ms: float | None, measured: bool,
            copy_ms: float | None = None) -> Breakdown:
    """The unprofiled step's buckets (ms per step in, sums over the steps out), given its length and the
    host's wait for data (None: not measured, so the trace's wait scales with the host's other work). A
    `measured` step shorter than the trace's GPU path scales that path down (the GPU ran a little faster
    unprofiled); an estimated one is never shorter than the GPU path. `copy_ms` is the input copy's time on
    the GPU's stream as measured unprofiled (CUDA events around it): the trainer's step copies nothing else,
    so that is its transfer time. The trace's copy time differs both ways: a pageable copy's chunks, staged
    by the host, run slower under the profiler, and the trace counts only the chunks, not the stream's waits
    between them."""
    p = _per_step(profiled)
    gpu = GPU_BUSY in p
    device = {b: p[b] for b in DEVICE_BUCKETS} if gpu else {}
    if gpu and measured and copy_ms is not None:
        device[TRANSFER] = max(copy_ms, 0.0)
    device_ms = sum(device.values())
    if measured and device_ms > step_ms > 0:
        device = {b: v * step_ms / device_ms for b, v in device.items()}
        device_ms = step_ms
    step_ms = max(step_ms, device_ms)
    idle = step_ms - device_ms
    data = min(idle, max(data_ms, 0.0)) if data_ms is not None else 0.0
    rest = idle - data
    split = (HOST_SPLIT if gpu else CPU_SPLIT) + ((DATA,) if data_ms is None else ())
    weights = {b: p[b] for b in split}
    total = sum(weights.values())
    if total <= 0:
        weights, total = {split[0]: 1.0}, 1.0
    buckets = dict.fromkeys(profiled.buckets, 0.0)
    buckets.update(device)
    buckets[DATA] = data
    for b, w in weights.items():
        buckets[b] = rest * w / total
    n = profiled.steps
    return Breakdown({b: v * 1e3 * n for b, v in buckets.items()}, step_ms * 1e3 * n, n)


def unprofiled_view(profiled: Breakdown, profiled_step_ms: float, profiled_data_ms: float,
                    inflation: Inflation, loader_paced: bool, telemetry: dict | None = None,
                    serial: bool = False) -> UnprofiledView:
    """See the module docstring. `telemetry` is the run's own {"step_ms", "data_ms", ...} means; `serial`:
    the step's loading runs one after its other work (in_process, or a CPU-only trace), so no wait paces it.
    Without a measured ``data_ms`` the trace's own evidence of pacing (`loader_paced`) stands."""
    if telemetry and telemetry.get("step_ms"):
        data_ms = telemetry.get("data_ms")
        return UnprofiledView(rebuild(profiled, telemetry["step_ms"], data_ms, measured=True,
                                      copy_ms=telemetry.get("copy_ms")), "telemetry",
                              loader_paced=not serial and (telemetry_paced(telemetry) if data_ms is not None
                                                           else loader_paced),
                              data_measured=data_ms is not None)

    share_in_data = inflation.in_data_ms / inflation.ms_per_step if inflation.ms_per_step > 0 else 0.0

    def at(inflation_ms: float) -> Breakdown:
        inflation_ms = min(inflation_ms, MAX_INFLATION_SHARE * profiled_step_ms)
        if loader_paced:
            return rebuild(profiled, profiled_step_ms, profiled_data_ms + inflation_ms, measured=False)
        # loading in the main process was slowed like any host code
        return rebuild(profiled, profiled_step_ms - inflation_ms, profiled_data_ms - share_in_data * inflation_ms,
                       measured=False)

    return UnprofiledView(at(inflation.ms_per_step), "overhead_model", low=at(inflation.low), high=at(inflation.high),
                          loader_paced=loader_paced and not serial)


def _loader_spans(trace: ParsedTrace) -> list:
    return [d for d in trace.data_spans if d.name.startswith(DATALOADER_PREFIX)]


def _work_in_waits(trace: ParsedTrace, windows: list[StepWindow]) -> tuple[float, float]:
    """Torch ops and Python frames per step inside the waits for data (DataLoader and ``data`` ranges)."""
    data = host_sets(trace).data
    n = len(windows)
    ops = int(np.count_nonzero(data.covers_each(op_columns(trace).start))) / n
    starts = Times(trace.python_calls)
    frames = sum(starts.count_between(t0, t1) for t0, t1 in data) / n
    return ops, frames


def worker_fed(trace: ParsedTrace, windows: list[StepWindow]) -> bool:
    """A DataLoader feeds the steps from worker processes: not torch's single-process iterator, and its
    waits hold few ops and Python frames."""
    loader = _loader_spans(trace)
    if not loader or not windows or any(SINGLE_PROCESS_ITER in d.name for d in loader):
        return False
    ops, frames = _work_in_waits(trace, windows)
    return ops < IN_PROCESS_OPS and frames < IN_PROCESS_FRAMES


def in_process(trace: ParsedTrace, windows: list[StepWindow]) -> bool:
    """The steps' batches are loaded in the training process, one after the rest of the step: torch's
    single-process DataLoader iterator (num_workers=0), or waits for data (a DataLoader's or a ``data``
    range) that hold the loading's own ops and Python."""
    if not windows or not trace.data_spans:
        return False
    if any(SINGLE_PROCESS_ITER in d.name for d in _loader_spans(trace)):
        return True
    ops, frames = _work_in_waits(trace, windows)
    return ops >= IN_PROCESS_OPS or frames >= IN_PROCESS_FRAMES


def loader_paced(trace: ParsedTrace, windows: list[StepWindow]) -> bool:
    """Every step waited for a worker-fed DataLoader (see the module docstring). Only the loader's own calls
    count: a ``data`` range around them also holds the batch's copy to the device, which is no wait. A
    ready batch's hand-off (0.1-0.3 ms on an H100 host) stays under the threshold."""
    if not worker_fed(trace, windows):
        return False
    loader = IntervalSet((d.start, d.end) for d in trace.data_spans if d.name.startswith(DATALOADER_PREFIX))
    return all(loader.length_within(w.host_start, w.host_end) / 1e3
               >= max(PACING_WAIT_MS, PACING_WAIT_SHARE * w.dur / 1e3) for w in windows)

"""The demonstration trainer's profiler: `stepscope.schedule` and `stepscope.trace_handler`, as a user's loop gets
them, plus the trainer's extras.

    prof = build_profiler(cfg.profile, run_dir, worker_name(rank), device, span_base, log=log, guard=stop.deferred)
    with prof:
        for ...:
            step(); prof.step()
            prof.is_tracing()      # this step is profiled (warm-up, recording, or the export at its end)
    prof.close()                   # the cycle worker's last diagnoses are written (bounded wait)

Each cycle goes through the handler (handler.py): its raw trace exported under `raw/<span>/` inside
`prof.step()`, then in the handler's background thread (cycle_worker.py) the copy torch-tb-profiler 0.4.3
reads, the cycle's diagnosis with the telemetry of the unprofiled steps around it, cycles.jsonl, diagnosis.md
and the TensorBoard Text `diagnosis` and Scalars `diagnosis/*`, written by the run's one event writer (`log`).
The trainer's extras (`TraceExtras`), also inside `prof.step()`: a trace cut short by a full disk raised as
ENOSPC (Kineto reports no write error), and optionally a plain Chrome trace, an SVG flame graph of the call
stacks and the memory timeline as HTML, each through a temporary name and a rename.

Cycle k is span `span_base + k`. Under torchrun every rank gets rank 0's `span_base`, so the k-th cycles of
all ranks share one span: the plugin pairs them for its Distributed view, and `raw/<span>/` holds one file
per rank, as Holistic Trace Analysis wants. The traces carry torch's own `distributedInfo` (backend, rank,
world size, process groups) whenever a process group exists.

Without `--profile` the loop gets `NullProfiler`, which has the same interface and does nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import warnings
from pathlib import Path

import torch
from stepscope.capture.flamegraph import keep_working_threads, render_flamegraph
from stepscope.capture.handler import EXIT_TIMEOUT_S, StepscopeTraceHandler
from stepscope.capture.options import ProfileConfig
from stepscope.capture.schedule import schedule
from stepscope.plugin_copy.stream_write import copy_file_atomic
from stepscope.trace.atomic import write_text_atomic
from torch.profiler import ProfilerAction, ProfilerActivity, profile

FULL_BYTES = 1 << 20  # a trace exported with less than this left on the disk was cut short for want of space
TRACED_ACTIONS = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def worker_name(rank: int) -> str:
    """`<host>_<pid>_rank<N>`: unique per process; the plugin reads `<host>` as the node and pid as the process."""
    return f"{socket.gethostname()}_{os.getpid()}_rank{rank}"


class NullProfiler:
    """What the loop gets without --profile: every method is a no-op."""

    handler = None

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def step(self) -> None:
        pass

    def is_tracing(self) -> bool:
        return False

    def observer_busy(self) -> bool:
        return False

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> bool:
        return True


class Profiler:
    """`torch.profiler.profile` under a `stepscope.schedule` with a `stepscope.trace_handler`, plus what the loop
    asks of it: is this step traced, is the handler's thread at work?

    `guard` (e.g. `StopSignal.deferred`) wraps every call that may write a trace, `step()` and the exit: a
    signal that arrives while a cycle's trace is being written takes effect once the trace is complete."""

    def __init__(self, prof: profile, handler: StepscopeTraceHandler, guard=contextlib.nullcontext) -> None:
        self.prof, self.handler, self.guard = prof, handler, guard
        self.schedule = prof.schedule

    def __enter__(self) -> Profiler:
        self.prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        # on Ctrl-C too: a cycle that was recording is stopped and its trace written
        with self.guard():
            self.prof.__exit__(*exc)

    def step(self) -> None:
        with self.guard():
            self.prof.step()

    def is_tracing(self) -> bool:
        """True while the profiler is warming up or recording, or will export at the next step()."""
        return self.prof.current_action in TRACED_ACTIONS

    def observer_busy(self) -> bool:
        """The handler's thread is working on a cycle: the loop's steps take turns with it (cycle_worker.busy)."""
        return self.schedule.observer_busy

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> bool:
        """The loop is over: wait (at most `timeout` s) for the cycles' diagnoses; True when all are done."""
        return self.handler.close(timeout)


def build_profiler(cfg: ProfileConfig, run_dir: Path, worker: str, device: torch.device, span_base: int,
                   log=None, guard=contextlib.nullcontext) -> Profiler:
    """The profiler for `cfg` (CUDA activities on a CUDA `device`): `stepscope.schedule` with the arguments
    torch.profiler.schedule takes, a `stepscope.trace_handler` writing under `run_dir` as `worker` (spans from
    `span_base`, Text and Scalars through `log`), and the trainer's extras. `env.configure_process` has set
    TEARDOWN_CUPTI for GPU runs before this is built."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # torch warns, once per process, that without acc_events each cycle's events are dropped at the next; the
    # trainer reads each cycle from its exported trace, which is what it wants, so users need not be told
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
    experimental = None
    if cfg.flamegraph:
        # export_stacks() only has stacks to export when the profiler keeps them verbosely
        experimental = torch._C._profiler._ExperimentalConfig(verbose=True)
    sched = schedule(skip_first=cfg.skip_first, wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                     repeat=cfg.repeat)
    handler = StepscopeTraceHandler(run_dir, worker, cfg.gzip, span_base=span_base,
                                    extras=TraceExtras(cfg, device), log=log)
    prof = profile(
        activities=activities,
        schedule=sched,
        on_trace_ready=handler,
        record_shapes=cfg.record_shapes,
        profile_memory=cfg.profile_memory,
        with_stack=cfg.with_stack,
        with_flops=cfg.with_flops,
        with_modules=cfg.with_modules,
        experimental_config=experimental,
        # acc_events stays off: with it on, torch turns every recorded event into a Python object at the end of
        # each cycle (tens of GB for a window whose data loading runs Python in the main process); the
        # run's top-ops table comes from our own parse of the trace instead (diagnose.py)
    )
    return Profiler(prof, handler, guard)


class TraceExtras:
    """The trainer's part of a cycle beside the handler's, called by it inside `prof.step()` once the raw
    trace is exported (`extras(prof, raw, stem, worker)`, `stem` = `run_dir/<worker>.<span>`)."""

    def __init__(self, cfg: ProfileConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device

    def __call__(self, prof: profile, raw: Path, stem: Path, worker: str) -> None:
        # Kineto reports no write error: on a full disk it leaves a truncated file, which the handler's thread
        # could only fail on later; the run stops here instead (one line, exit code 2), with nothing half-written
        if shutil.disk_usage(raw.parent).free < FULL_BYTES:
            raw.unlink(missing_ok=True)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(raw))
        if self.cfg.export_chrome_trace:
            copy_file_atomic(raw, Path(f"{stem}.chrome_trace.json"))
        if self.cfg.flamegraph:
            self._flamegraph(prof, Path(f"{stem}.flamegraph.svg"), worker)
        if self.cfg.memory_timeline:
            self._memory_timeline(prof, Path(f"{stem}.memory_timeline.html"))

    def _flamegraph(self, prof: profile, out: Path, worker: str) -> None:
        cuda = self.device.type == "cuda"
        metric = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        folded = out.with_suffix(".folded.tmp")
        try:
            prof.export_stacks(str(folded), metric)
            text = folded.read_text()
        finally:
            folded.unlink(missing_ok=True)
        # on the CPU, torch ops count CPU time but Python calls count wall time (waits included)
        unit = "µs of device time" if cuda else "µs of self time (ops: CPU, Python calls: wall)"
        title = f"{worker} ({metric}, threads that ran torch code)"
        write_text_atomic(out, render_flamegraph(keep_working_threads(text), title=title, unit=unit))

    def _memory_timeline(self, prof: profile, out: Path) -> None:
        dev = f"cuda:{self.device.index or 0}" if self.device.type == "cuda" else "cpu"
        tmp = out.with_name(f".tmp-{out.name}")
        try:
            prof.export_memory_timeline(str(tmp), device=dev)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)

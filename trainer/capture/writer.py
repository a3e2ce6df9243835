"""The trainer's profiler (build_profiler, from its ProfileConfig) and the trace writer each finished cycle calls.

Each cycle is exported once with `export_chrome_trace`, as `stepscope.trace_handler` does (handler.export_raw):
the untouched original under `raw/<span>/` (Perfetto, Holistic Trace Analysis), then rewritten streamed into a
copy that torch-tb-profiler 0.4.3 reads correctly, under a name it lists (cycle_worker.write_plugin_copy).
Both go through a temporary name and a rename, so no half-written trace is ever visible. Optional per-cycle exports: a plain Chrome trace, an
SVG flame graph of the call stacks, and the memory timeline as HTML.

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
from stepscope.capture.options import ProfileConfig
from stepscope.trace.atomic import write_text_atomic
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

FULL_BYTES = 1 << 20  # a trace export that failed with less than this left on the disk failed for want of space
TRACED_ACTIONS = (ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def worker_name(rank: int) -> str:
    """`<host>_<pid>_rank<N>`: unique per process; the plugin reads `<host>` as the node and pid as the process."""
    return f"{socket.gethostname()}_{os.getpid()}_rank{rank}"


class NullProfiler:
    """What the loop gets without --profile: every method is a no-op."""

    def __enter__(self) -> NullProfiler:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def step(self) -> None:
        pass

    def is_tracing(self) -> bool:
        return False


class Profiler:
    """`torch.profiler.profile` plus what the loop asks of it: is this step traced?

    `guard` (e.g. `StopSignal.deferred`) wraps every call that may write a trace, `step()` and the exit: a
    signal that arrives while a cycle's trace is being written takes effect once the trace is complete."""

    def __init__(self, prof: profile, guard=contextlib.nullcontext) -> None:
        self.prof = prof
        self.guard = guard

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


def build_profiler(cfg: ProfileConfig, cuda: bool, on_trace_ready) -> profile:
    """The `torch.profiler.profile` for `cfg` (CUDA activities when `cuda`); `on_trace_ready(prof)` gets each
    finished cycle. `env.configure_process` has set TEARDOWN_CUPTI for GPU runs before this is built."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # torch warns, once per process, that without acc_events each cycle's events are dropped at the next; the
    # trainer reads each cycle from its exported trace, which is what it wants, so users need not be told
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
    experimental = None
    if cfg.flamegraph:
        # export_stacks() only has stacks to export when the profiler keeps them verbosely
        experimental = torch._C._profiler._ExperimentalConfig(verbose=True)
    return profile(
        activities=activities,
        schedule=schedule(skip_first=cfg.skip_first, wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                          repeat=cfg.repeat),
        on_trace_ready=on_trace_ready,
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


class TraceWriter:
    """`on_trace_ready` for our run layout (see trainer/trace/files.py).

    Cycle k is span `span_base + k`. Under torchrun every rank gets rank 0's `span_base`, so the k-th
    cycles of all ranks share one span: the plugin pairs them for its Distributed view, and `raw/<span>/`
    holds one file per rank, as Holistic Trace Analysis wants. The traces carry torch's own
    `distributedInfo` (backend, rank, world size, process groups) whenever a process group exists.
    """

    def __init__(self, cfg: ProfileConfig, run_dir: Path, worker: str, device: torch.device,
                 span_base: int) -> None:
        self.cfg, self.run_dir, self.worker, self.device = cfg, Path(run_dir), worker, device
        self.span_base = span_base  # time.time_ns(): the plugin sorts spans as strings, so keep the width
        self.cycles = 0

    def __call__(self, prof: profile) -> None:
        # the trace handler's core (handler.py, cycle_worker.py) with the trainer's extras; the rewrite runs here,
        # not in a thread: the trainer diagnoses the whole run at its end, from these copies
        from stepscope.capture.cycle_worker import gzip_raw, write_plugin_copy
        from stepscope.capture.handler import export_raw
        from stepscope.plugin_copy import write_adapted_pair
        from stepscope.plugin_copy.stream_write import copy_file_atomic
        from stepscope.trace.files import load_trace

        span = str(self.span_base + self.cycles)
        stem = self.run_dir / f"{self.worker}.{span}"
        raw = export_raw(prof, self.run_dir, self.worker, span)  # a full disk that left no file: ENOSPC
        try:
            try:
                # streamed: the plugin's copy written event by event, so the trace is never held in memory (a
                # Python-heavy window is gigabytes as objects)
                write_plugin_copy(self.run_dir, self.worker, span, raw, self.cfg.gzip)
            except ValueError:
                if shutil.disk_usage(self.run_dir).free < FULL_BYTES:
                    raise  # a trace cut short by the full disk (below)
                # what the streamed reader refuses (e.g. NaN literals) but Python's json reads
                write_adapted_pair(self.run_dir, self.worker, span, load_trace(raw), self.cfg.gzip)
            if self.cfg.export_chrome_trace:
                copy_file_atomic(raw, Path(f"{stem}.chrome_trace.json"))
            if self.cfg.gzip and raw.exists():
                gzip_raw(self.run_dir, self.worker, span, raw)
        except (FileNotFoundError, ValueError):
            raw.unlink(missing_ok=True)
            # Kineto reports no write error: on a full disk it leaves a truncated file
            if shutil.disk_usage(self.run_dir).free < FULL_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(raw)) from None
            raise
        self.cycles += 1
        if self.cfg.flamegraph:
            self._flamegraph(prof, Path(f"{stem}.flamegraph.svg"))
        if self.cfg.memory_timeline:
            self._memory_timeline(prof, Path(f"{stem}.memory_timeline.html"))

    def _flamegraph(self, prof: profile, out: Path) -> None:
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
        title = f"{self.worker} ({metric}, threads that ran torch code)"
        write_text_atomic(out, render_flamegraph(keep_working_threads(text), title=title, unit=unit))

    def _memory_timeline(self, prof: profile, out: Path) -> None:
        dev = f"cuda:{self.device.index or 0}" if self.device.type == "cuda" else "cpu"
        tmp = out.with_name(f".tmp-{out.name}")
        try:
            prof.export_memory_timeline(str(tmp), device=dev)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)

"""`stepscope.trace_handler`: a drop-in `on_trace_ready` for your own loop that never makes training wait.

    sched = stepscope.schedule(wait=50, warmup=1, active=3)      # or torch.profiler.schedule(...)
    handler = stepscope.trace_handler("logs/myrun")              # was: tensorboard_trace_handler("logs/myrun")
    with torch.profiler.profile(schedule=sched, on_trace_ready=handler) as prof:
        for batch in stepscope.loader(loader):
            train_step(batch)
            prof.step()
    handler.close()          # optional: waits (bounded) for the last diagnosis; also done at exit
    # then: tensorboard --logdir logs     (or: stepscope tensorboard --logdir logs)

It takes the arguments of `torch.profiler.tensorboard_trace_handler(dir_name, worker_name, use_gzip)`.
Inside `prof.step()` it only exports the cycle's raw trace, atomically, to `raw/<span>/<worker>.trace.json`.
Everything else happens once per cycle in a background thread (cycle_worker.py), and lands in `dir_name`
(trace/files.py's layout):

    <worker>.<span>.pt.trace.json[.gz]      the copy torch-tb-profiler 0.4.3 reads correctly (plugin_copy/, streamed)
    raw/<span>/<worker>.trace.json[.gz]     the untouched original (Perfetto, Holistic Trace Analysis)
    diagnosis.md, cycles.jsonl,             the run's diagnosis, merged from per-cycle summaries: Text
    events.out.tfevents.*                   "diagnosis" and Scalars "diagnosis/*" at step = cycle number

When the profiler's schedule is a `stepscope.schedule`, each cycle is diagnosed with the telemetry of the
unprofiled steps around it, exactly as a stepscope trainer run: the verdict, busy and breakdown describe the
loop without the profiler, the profiled figures beside them. With torch's own schedule, the analysis models the
profiler's cost instead. Prints nothing unless the exit has to stop waiting (one line on stderr). The default
`worker_name` is `<host>_<pid>`, as with tensorboard_trace_handler, so the ranks of a torch.distributed job
sharing `dir_name` get one trace file each; every rank appends its cycles to cycles.jsonl, and diagnosis.md is
the last rank's view of its own cycles (`stepscope analyze dir_name` reads them all together, each trace with
its own cycle's telemetry from the row naming its worker and span). report.json is the job's report, so a rank
of several (torch.distributed's world size, else torchrun's $WORLD_SIZE, above 1) writes none: the folder's
report.json is then the trainer's rank 0's at the end of the run, and a user's folder of several ranks is
analysed as a whole by whoever reads it.
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from stepscope.capture.cycle_worker import MAX_PENDING, SETTLE_S, CycleTrace, CycleWorker
from stepscope.capture.oom import OomCapture
from stepscope.capture.schedule import StepscopeSchedule, latest
from stepscope.trace import files as trace_files

EXIT_TIMEOUT_S = 60.0
FULL_BYTES = 1 << 20  # an export that left no file with less than this free failed for want of space


class StepscopeTraceHandler:
    """The callable `on_trace_ready` returned by `trace_handler`."""

    def __init__(self, dir_name: str | os.PathLike, worker_name: str | None = None, use_gzip: bool = True,
                 settle_s: float = SETTLE_S, max_pending: int = MAX_PENDING, *, span_base: int | None = None,
                 extras=None, log=None) -> None:
        """``span_base``: cycle k is span ``span_base + k`` (ranks that share it pair their cycles), instead
        of the time of the export; ``extras(prof, raw, stem, worker)``: more of the cycle to write inside
        ``prof.step()`` (the demonstration trainer's, capture/profiler.py); ``log``: the event writer
        (tensorboard/tb_events.py EventLog) for the Text and Scalars, instead of one of the handler's own."""
        self.dir = Path(dir_name)
        self.worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        self.use_gzip = use_gzip
        self.cycles = 0
        self.span_base = span_base
        self.extras = extras
        self.export_s: list[float] = []  # the synchronous part of each cycle: the raw trace's export
        self.schedule: StepscopeSchedule | None = None
        self.work = CycleWorker(self.dir, self.worker, use_gzip, settle_s, max_pending, log=log)
        self._exit_hook = False
        self._closed = False
        # an out-of-memory error in the loop: what was live, written under dir_name/oom/ before it propagates
        self.oom = OomCapture(self.dir, self.worker, telemetry=self._memory_telemetry)

    def _memory_telemetry(self) -> dict | None:
        """The schedule's allocator counters at its window edges (the steps before an out-of-memory error)."""
        sched = self.schedule or latest()
        if sched is None:
            return None
        m = sched.memory
        return {**m.telemetry(windows=len(m.edges)), "windows": [{"step": s, **r} for s, r in m.edges]}

    def __call__(self, prof) -> None:
        t0 = time.perf_counter()
        span = str(time.time_ns() if self.span_base is None else self.span_base + self.cycles)
        raw = export_raw(prof, self.dir, self.worker, span)
        if self.extras is not None:
            self.extras(prof, raw, self.dir / f"{self.worker}.{span}", self.worker)
        sched = getattr(prof, "schedule", None)
        cycle = None
        if isinstance(sched, StepscopeSchedule):
            self.schedule = sched
            cycle = sched.cycle_at(prof.step_num)
        self.work.one_rank = world_size() == 1  # a rank of several writes no report.json (module docstring)
        self.work.submit(CycleTrace(span, raw, cycle, self.schedule))
        self.cycles += 1
        if not self._exit_hook:
            atexit.register(self._at_exit)
            self._exit_hook = True
        self.export_s.append(time.perf_counter() - t0)

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> bool:
        """The loop is over: finish the cycles' diagnoses, waiting at most `timeout` s. True when all are done;
        otherwise one line on stderr says what is left (the raw traces are all on disk)."""
        if self.schedule is not None:
            self.schedule.finish()
        left_before = self.work.pending()
        done = self.work.close(timeout)
        if not done:
            left = self.work.pending()
            print(f"stepscope: stopped waiting for the trace handler after {timeout:g} s: {left} of "
                  f"{max(left, left_before)} profiling cycle(s) not yet diagnosed (their raw traces are under "
                  f"{self.dir / trace_files.RAW_DIR})", file=sys.stderr)
        self._closed = True
        return done

    def _at_exit(self) -> None:
        if not self._closed or self.work.pending():
            self.close(EXIT_TIMEOUT_S)

    def report(self):
        """The run's Report merged from the cycles diagnosed so far (None before the first)."""
        return self.work.report()

    @property
    def memo(self):
        """The evidence of the cycles' traces (engine.Memo): ``stepscope.analyze(dir_name, telemetry=...,
        memo=handler.memo)`` reports them again with other telemetry without reading them."""
        return self.work.memo

    @property
    def summaries(self):
        return list(self.work.summaries)


def world_size() -> int:
    """How many processes the job has: torch.distributed's world size once its group is initialised, else
    torchrun's $WORLD_SIZE, else 1."""
    dist = sys.modules.get("torch.distributed")  # the loop has imported torch; never import it here
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def export_raw(prof, run_dir: Path, worker: str, span: str) -> Path:
    """The cycle's trace, exported as it is to `raw/<span>/<worker>.trace.json` under a temporary name that
    neither the plugin nor discovery lists, then renamed: all that a cycle asks of the loop. Kineto reports no
    write error (a full disk leaves a truncated file or none): a missing file with under FULL_BYTES free is
    raised as ENOSPC."""
    raw = trace_files.raw_path(Path(run_dir), worker, span, gz=False)
    raw.parent.mkdir(parents=True, exist_ok=True)
    tmp = raw.with_name(f".tmp-{raw.name}.partial")
    try:
        prof.export_chrome_trace(str(tmp))
        if not tmp.is_file() and shutil.disk_usage(raw.parent).free < FULL_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(raw))
        os.replace(tmp, raw)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".tmp").unlink(missing_ok=True)  # where Kineto may write first
    return raw


def trace_handler(dir_name: str | os.PathLike, worker_name: str | None = None,
                  use_gzip: bool = True) -> StepscopeTraceHandler:
    """`on_trace_ready` writing the raw trace at once, and in a background thread the TensorBoard copy and the
    diagnosis (with the unprofiled steps' telemetry when the schedule is `stepscope.schedule`)."""
    return StepscopeTraceHandler(dir_name, worker_name, use_gzip)

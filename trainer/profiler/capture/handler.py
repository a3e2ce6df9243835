"""A drop-in `on_trace_ready` for your own training loop: what stepscope's trainer writes, per profiler cycle.

    from stepscope.profiler.capture.handler import stepscope_trace_handler
    with torch.profiler.profile(schedule=..., on_trace_ready=stepscope_trace_handler("logs/myrun")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    # then: tensorboard --logdir logs     (or: stepscope tensorboard --logdir logs)

It replaces `torch.profiler.tensorboard_trace_handler(dir_name, worker_name, use_gzip)` with the same
arguments. Each finished cycle writes, into `dir_name` (files.py's layout):

    <worker>.<span>.pt.trace.json[.gz]      the copy torch-tb-profiler 0.4.3 reads correctly (tbfix)
    raw/<span>/<worker>.trace.json[.gz]     the untouched original (Perfetto, Holistic Trace Analysis)
    diagnosis.md, events.out.tfevents.*     the diagnosis of every cycle so far: Text "diagnosis" and
                                            Scalars "diagnosis/*" at step = cycle number (0, 1, ...)

Prints nothing; every file appears atomically. The default `worker_name` is `<host>_<pid>`, as with
tensorboard_trace_handler, so the ranks of a torch.distributed job sharing `dir_name` get one file each;
each rank's diagnosis then covers the traces already in the folder when its cycle ends. Needs no torch
import of its own.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

from ..analysis import TraceError
from ..front import analyze
from ..serve.diagnose import write_diagnosis
from ..serve.tb_events import EventLog
from ..tbfix import write_adapted_pair
from ..trace.files import load_trace


class StepscopeTraceHandler:
    """The callable `on_trace_ready` returned by `stepscope_trace_handler`."""

    def __init__(self, dir_name: str | os.PathLike, worker_name: str | None = None, use_gzip: bool = True) -> None:
        self.dir = Path(dir_name)
        self.worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        self.use_gzip = use_gzip
        self.cycles = 0
        self.written: list[Path] = []  # the adapted copies, one per cycle
        self._log: EventLog | None = None

    def __call__(self, prof) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        span = str(time.time_ns())
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".chrome.json.partial", dir=self.dir)
        os.close(fd)
        try:
            prof.export_chrome_trace(tmp)
            trace = load_trace(Path(tmp))
        finally:
            Path(tmp).unlink(missing_ok=True)
        adapted, _raw = write_adapted_pair(self.dir, self.worker, span, trace, self.use_gzip)
        self.written.append(adapted)
        self._diagnose()
        self.cycles += 1

    def _diagnose(self) -> None:
        try:
            report = analyze(self.dir, cpus=1)  # in the user's training process: never forked
        except TraceError as e:  # e.g. a cycle without prof.step(): the trace is kept, the diagnosis says why
            report = None
            message = f"no diagnosis: {e}"
        if self._log is None:
            self._log = EventLog(self.dir)
        if report is None:
            self._log.text("diagnosis", message, self.cycles)
        else:
            write_diagnosis(self.dir, report, self._log, self.cycles)
        self._log.flush()


def stepscope_trace_handler(dir_name: str | os.PathLike, worker_name: str | None = None,
                            use_gzip: bool = True) -> StepscopeTraceHandler:
    """`on_trace_ready` writing the adapted trace, the original under raw/, and the diagnosis in TensorBoard."""
    return StepscopeTraceHandler(dir_name, worker_name, use_gzip)

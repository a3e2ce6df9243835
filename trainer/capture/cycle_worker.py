"""The trace handler's background thread: everything about a cycle except writing its raw trace.

    worker = CycleWorker(run_dir, worker_name, use_gzip)
    worker.submit(CycleTrace(span, raw_path, cycle))   # returns at once
    worker.close(timeout=60)                    # False if work was left undone

For each cycle, in order, once: the copy for torch-tb-profiler 0.4.3 (plugin_copy/'s streamed rewrite, so the
trace is never held in memory; the read that plans it also parses the trace for the analysis,
plugin_copy/one_pass.py), the analysis of that parse through the door (`stepscope.analyze`) with the unprofiled steps' telemetry of that cycle (waiting, up to `settle_s`, for the steps after the
cycle to be timed), the raw trace gzipped when asked, then the run's report merged from the cycles' reports
(cycle_summary.py): report.json (front.write_report; only while ``one_rank``: a rank of a job of several
covers only its own traces, and the job's report is written once, by the trainer's rank 0 at the end of the
run), diagnosis.md, cycles.jsonl, TensorBoard Text `diagnosis` and Scalars `diagnosis/*` at step = cycle number.
Each cycle's evidence stays in ``memo`` (report/engine.py's Memo, about 30 KB a cycle), so that a later
analysis of the run in this process (the trainer's end of run) reads none of its traces again.

It is a thread of the training process: it never forks and starts no process (the rewrite and the parse are
asked for no helpers). Python runs one thread at a time, so its work still takes turns with the loop's host
code; the loop itself never waits for it. When more than `max_pending` cycles wait, a new cycle keeps only its
raw trace and its row says so.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stepscope.analysis.events import ParsedTrace
from stepscope.analysis.render import summary_scalars
from stepscope.analysis.report import Report
from stepscope.capture.cycle import Cycle
from stepscope.capture.cycle_summary import CycleSummary, merged_report, render_cycles
from stepscope.capture.schedule import StepscopeSchedule
from stepscope.plugin_copy.one_pass import read_both
from stepscope.plugin_copy.stream_write import copy_file_atomic, write_adapted_stream
from stepscope.report.front import Memo, analyze, write_report
from stepscope.report.telemetry import as_dict
from stepscope.tensorboard.tb_events import EventLog
from stepscope.trace import files as trace_files
from stepscope.trace.atomic import write_text_atomic
from stepscope.trace.discover import STEPSCOPE, Found
from stepscope.trace.errors import TraceError

SETTLE_S = 30.0  # longest wait for the steps after a cycle to be timed
MAX_PENDING = 32
POLL_S = 0.05
SWITCH_S = 0.0005  # see busy()


@dataclass(frozen=True)
class CycleTrace:
    """One profiling cycle's exported trace, handed to the worker to copy and analyse."""

    span: str
    raw: Path  # the raw trace, plain JSON, as exported
    cycle: Cycle | None  # the stepscope schedule's record of it, if the schedule is stepscope's
    schedule: StepscopeSchedule | None = None


@contextmanager
def busy(schedule: StepscopeSchedule | None) -> Iterator[None]:
    """This thread works: the loop's steps take turns with its Python code, so the slowdown detector asks for
    twice the usual slowdown (triggers.py), and Python hands the interpreter back to a waiting thread after
    SWITCH_S rather than its default 5 ms, so the loop waits less for each turn."""
    if schedule is not None:
        schedule.observer_busy = True
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_S))
    try:
        yield
    finally:
        if sys.getswitchinterval() == min(interval, SWITCH_S):
            sys.setswitchinterval(interval)
        if schedule is not None:
            schedule.observer_busy = False


class CycleWorker:
    def __init__(self, run_dir: Path, worker: str, use_gzip: bool, settle_s: float = SETTLE_S,
                 max_pending: int = MAX_PENDING, log=None) -> None:
        self.dir, self.worker, self.use_gzip = Path(run_dir), worker, use_gzip
        self.settle_s, self.max_pending = settle_s, max_pending
        self.summaries: list[CycleSummary] = []
        self.busy_s: list[float] = []  # this thread's time per cycle (excluding the wait for telemetry)
        self._jobs: deque[tuple[int, CycleTrace, bool]] = deque()  # (cycle index, job, over max_pending)
        self._cv = threading.Condition()
        self._closing = False
        self._active = 0  # jobs taken and not yet done
        self._thread: threading.Thread | None = None
        self._log: EventLog | None = log  # the caller's event writer, else one of its own at the first cycle
        self._count = 0  # cycles submitted
        self.one_rank = True  # the job is this process alone: its report is this worker's to write
        # each cycle's evidence: a later analysis of the run in this process (the trainer's end of run, with
        # the whole run's telemetry) reports the cycles again without reading their traces (engine.Memo)
        self.memo = Memo()

    def submit(self, job: CycleTrace) -> None:
        index = self._count
        self._count += 1
        with self._cv:
            # over max_pending: a marker the thread turns into the cycle's row at once
            self._jobs.append((index, job, len(self._jobs) >= self.max_pending))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stepscope-trace-handler", daemon=True)
                self._thread.start()
        # no notify(): waking the thread now would hand it the interpreter in the middle of prof.step(), and the
        # loop would wait up to Python's switch interval (5 ms) to get it back; the thread looks every POLL_S

    def pending(self) -> int:
        with self._cv:
            return len(self._jobs) + self._active

    def close(self, timeout: float) -> bool:
        """Stop waiting for telemetry, finish the queued cycles within `timeout` s; True when all are done."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._closing = True
            self._cv.notify_all()
            while self._jobs or self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        if self._log is not None:
            self._log.flush()
        return True

    def _run(self) -> None:
        while True:
            with self._cv:
                item = self._jobs.popleft() if self._jobs else None
                self._active += item is not None
            if item is None:
                time.sleep(POLL_S)
                continue
            index, job, skip = item
            try:
                if skip:
                    self._record(CycleSummary(index, job.span, _trigger(job), _steps(job), None, None,
                                              error=f"not analysed: {self.max_pending} cycles were already waiting "
                                                    f"(the raw trace is {job.raw})", worker=self.worker))
                else:
                    self._process(index, job)
            except Exception as e:  # never let one cycle stop the thread; its row says what happened
                self._record(CycleSummary(index, job.span, _trigger(job), _steps(job), None, None,
                                          error=f"{type(e).__name__}: {e}", worker=self.worker))
                traceback.print_exc()
            finally:
                with self._cv:
                    self._active -= 1
                    self._cv.notify_all()

    def _process(self, index: int, job: CycleTrace) -> None:
        # first the steps after the cycle are timed, with this thread idle: its work takes turns with the loop's
        # Python code, and would slow exactly the steps the cycle is diagnosed with
        waited = self._await_telemetry(job.cycle)
        t0 = time.perf_counter()
        with busy(job.schedule):
            self._work(index, job, waited)
        self.busy_s.append(time.perf_counter() - t0)

    def _work(self, index: int, job: CycleTrace, waited: bool) -> None:
        notes = []
        parsed = None  # the analysis' parse, from the copy's read of the trace
        try:
            _, parsed = write_plugin_copy_and_parse(self.dir, self.worker, job.span, job.raw, self.use_gzip)
        except Exception as e:  # the raw trace stays; the analysis says what it can
            notes.append(f"no TensorBoard copy ({type(e).__name__}: {e})")
        telemetry = job.cycle.telemetry() if job.cycle is not None else None
        report, error = None, None
        try:
            report = analyze_cycle(job.raw, self.worker, job.span, as_dict(telemetry), parsed, self.memo)
        except TraceError as e:
            error = str(e)
        if self.use_gzip:
            self.memo.moved(job.raw, gzip_raw(self.dir, self.worker, job.span, job.raw))
        if not waited:
            notes.append(f"the steps after the cycle were still being timed after {self.settle_s:g} s")
        self._record(CycleSummary(index, job.span, _trigger(job), _steps(job), telemetry,
                                  report.spans[0] if report is not None else None, error, tuple(notes),
                                  self.worker, report))

    def _await_telemetry(self, cycle: Cycle | None) -> bool:
        if cycle is None:
            return True
        deadline = time.monotonic() + self.settle_s
        while not cycle.done:
            with self._cv:
                if self._closing:
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _record(self, summary: CycleSummary) -> None:
        self.summaries.append(summary)
        report = merged_report(str(self.dir), self.summaries)
        md = render_cycles(str(self.dir), self.summaries, report.verdict if report else None)
        self.dir.mkdir(parents=True, exist_ok=True)
        if report is not None and self.one_rank:
            write_report(self.dir, report)  # before diagnosis.md: the two never disagree for long
        write_text_atomic(self.dir / "diagnosis.md", md)
        with open(self.dir / trace_files.CYCLES, "a") as f:
            f.write(summary.json_line())
        if self._log is None:
            self._log = EventLog(self.dir)
        self._log.text("diagnosis", md, summary.index)
        if summary.cycle_report is not None:
            self._log.scalars(summary_scalars(summary.cycle_report), summary.index)
        self._log.flush()

    def report(self) -> Report | None:
        """The run so far, merged from the cycles' reports."""
        return merged_report(str(self.dir), list(self.summaries))


def analyze_cycle(raw: Path, worker: str, span: str, telemetry: dict | None,
                  parsed: ParsedTrace | None = None, memo: Memo | None = None) -> Report:
    """One cycle's raw trace through the door, with the telemetry of the unprofiled steps around it (None:
    the analysis models the profiler's cost), in this thread (a training process never forks). ``parsed``:
    the parse the copy's read made of it (None: the door reads the trace, and says why it cannot). ``memo``
    keeps the trace's evidence (engine.Memo)."""
    found = Found(Path(raw), STEPSCOPE, worker, span, "")
    report = analyze(raw, traces=[found], telemetry=telemetry, tables=True,
                     parsed={Path(raw): parsed} if parsed is not None else None, memo=memo)
    assert isinstance(report, Report)  # one trace is one job
    return report


def write_plugin_copy_and_parse(run_dir: Path, worker: str, span: str, raw: Path,
                                gz: bool) -> tuple[Path, ParsedTrace | None]:
    """The copy torch-tb-profiler 0.4.3 lists, rewritten from the raw trace event by event (plugin_copy/'s
    streamed plan and write: the trace is never held in memory, and no helper process is started), and the
    analysis' parse of the trace from the same read of it (plugin_copy/one_pass.py; None: the door reads the raw
    trace and says why there is none)."""
    adapted = Path(run_dir) / trace_files.plugin_name(worker, span, gz)
    both = read_both(raw, worker, span)  # one process (a training process never forks)
    write_adapted_stream(raw, adapted, both.plan, both.header)
    return adapted, both.parsed


def gzip_raw(run_dir: Path, worker: str, span: str, raw: Path) -> Path:
    """The plain raw trace replaced by its gzipped copy (which appears whole, then the plain one goes)."""
    out = trace_files.raw_path(Path(run_dir), worker, span, True)
    copy_file_atomic(raw, out)
    raw.unlink()
    return out


def _trigger(job: CycleTrace) -> str:
    return job.cycle.trigger if job.cycle is not None else "schedule"


def _steps(job: CycleTrace) -> tuple[int, int] | None:
    c = job.cycle
    return (c.start, c.end) if c is not None and c.end is not None else None

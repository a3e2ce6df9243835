"""One run's analysis in a process of its own, for the tab's cache (cache.py).

    python -m stepscope.tensorboard.tab.analyse ROOT < traces.json > jobs.json

stdin: the traces of a run, or of the run folders that may be one job (runs.py), as discovered under the
logdir: ``[{"path", "kind", "worker", "span", "run", "folder"}, ...]`` (``run``: the trace's run folder
relative to the logdir, ``folder``: that folder's path); ROOT: the run's folder, or the logdir. stdout:
``{"jobs": [{"folders": [run, ...], "measured": Measured}, ...]}``, one entry per job that ``stepscope
analyze`` makes of those traces (report/jobs.py: a run folder is a job unless the traces join folders),
each with its Measured (measure.py) from its Report (``stepscope.analyze``, the one door). A TraceError is
one line on stderr and exit code 2. Only runs that nobody diagnosed come here: cache.py reads a fresh
report.json (the trainer's, the trace handler's, `stepscope tensorboard`'s) instead.

TensorBoard serves from many threads, and a forked child inherits their locks in whatever state they were;
the analysis of a large run may fork helper processes (trace/workers.py) and holds the trace's columns at
their peak. Here, in a process of its own with one thread, its forks inherit no other thread's state, and the
memory goes back to the system when it ends, not to TensorBoard's heap. Being no training process, it uses
the command line's worker policy (``Workers.local()``): a large trace is parsed in byte ranges by
several processes, ranks in parallel, within a quarter of the memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stepscope.analysis.report import Report
from stepscope.report.front import analyze
from stepscope.report.measure import measured
from stepscope.trace.discover import Found
from stepscope.trace.errors import TraceError, print_error
from stepscope.trace.workers import Workers, keep_heap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0])
    given = json.load(sys.stdin)
    traces = [Found(Path(t["path"]), t["kind"], t["worker"], t["span"], t["run"]) for t in given]
    folder_of = {t["run"]: Path(t["folder"]) for t in given}
    keep_heap()  # this process only reads traces: their pieces' memory is reused, not faulted in afresh
    try:
        report = analyze(root, traces=traces, workers=Workers.local(), tables=True)
        jobs = [report] if isinstance(report, Report) else [r for _, r in report.runs]
        out = []
        for job in jobs:
            folders = sorted({t.found.run for t in job.traces})
            path = folder_of[folders[0]] if len(folders) == 1 else None  # a joined job has no run.json
            out.append({"folders": folders, "measured": measured(job, path).to_dict()})
    except TraceError as e:
        print_error(str(e))
        return 2
    json.dump({"jobs": out}, sys.stdout, allow_nan=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

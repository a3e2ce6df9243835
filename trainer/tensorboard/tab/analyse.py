"""One run's analysis in a process of its own, for the tab's cache (cache.py).

    python -m stepscope.tensorboard.tab.analyse RUN_FOLDER < traces.json > measured.json

stdin: the run's discovered traces, ``[{"path", "kind", "worker", "span", "run"}, ...]``; stdout: its
Measured (measure.py) as JSON, from the run's Report (``stepscope.analyze``, the one door). A TraceError is
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

from stepscope.report.front import analyze
from stepscope.report.measure import measured
from stepscope.trace.discover import Found
from stepscope.trace.errors import TraceError, print_error
from stepscope.trace.workers import Workers


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0])
    traces = [Found(Path(t["path"]), t["kind"], t["worker"], t["span"], t["run"]) for t in json.load(sys.stdin)]
    try:
        m = measured(analyze(folder, traces=traces, workers=Workers.local(), tables=True), folder)
    except TraceError as e:
        print_error(str(e))
        return 2
    json.dump(m.to_dict(), sys.stdout, allow_nan=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

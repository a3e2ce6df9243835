"""Start TensorBoard on a loopback port and print what the PyTorch Profiler tab shows for a run, as JSON.

    python scripts/plugin_check.py LOGDIR RUN [RUN ...]

For each run: the views, and for the first worker/span: the Overview's step-time breakdown (Kernel, Memcpy,
Memset, Runtime, DataLoader, CPU Exec, Other, in µs averaged over steps), the recommendations, the sum of
operator device self time, the sum of kernel time, and the number of operators with non-zero device time.
For a multi-rank run, also the Distributed view: GPU info, each worker's computation/overlap/communication
time, wait time, and its collective calls.
This is how the GPU claims in BENCHMARKS.md and the README are checked: through the plugin's own HTTP API.

A RUN that holds no trace the plugin would list is refused at once (one line naming the runs that do, exit
code 2), before TensorBoard starts. Nothing is written under LOGDIR or beside it: TensorBoard's own log goes
to a temporary directory that is removed on exit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stepscope.tensorboard.tbserver import TensorBoard
from stepscope.trace.files import WORKER_PATTERN


def profiler_runs(logdir: Path) -> list[str]:
    """The runs torch-tb-profiler lists: every folder under `logdir` holding a trace it recognises, by path."""
    runs = set()
    for path in logdir.rglob("*"):
        if WORKER_PATTERN.match(path.name) and path.is_file():
            rel = path.parent.relative_to(logdir)
            runs.add("." if rel == Path(".") else rel.as_posix())
    return sorted(runs)


def overview_breakdown(ov: dict) -> dict:
    cols = [c.get("name") for c in ov["steps"]["columns"]]
    rows = ov["steps"]["rows"]
    out = {}
    for i, name in enumerate(cols):
        if i == 0 or name is None or not rows or not isinstance(rows[0][i], (int, float)):
            continue
        out[name] = sum(r[i] for r in rows) / len(rows)
    return out


def summarize(tb: TensorBoard, run: str) -> dict:
    views = tb.profiler("views", run=run)
    worker, span = tb.first_worker_span(run)
    q = dict(run=run, worker=worker, span=span)
    ov = tb.profiler("overview", **q)
    res = {"views": views, "worker": worker, "span": span, "steps": len(ov["steps"]["rows"]),
           "overview_us_per_step": overview_breakdown(ov), "recommendations": ov.get("recommendations", "")}
    table = tb.profiler("operation/table", group_by="Operation", **q)["data"]
    ops = table if isinstance(table, list) else table.get("data", [])
    res["operators"] = len(ops)
    res["operator_device_self_us"] = sum(o.get("device_self_duration", 0) or 0 for o in ops)
    res["operators_with_device_time"] = sum(1 for o in ops if (o.get("device_self_duration") or 0) > 0)
    if "Kernel" in views:
        kt = tb.profiler("kernel/table", group_by="Kernel", **q)["data"]
        rows, cols = kt["rows"], [c["name"] for c in kt["columns"]]
        total_col = cols.index("Total Duration (us)")
        res["kernel_total_us"] = sum(r[total_col] for r in rows)
        res["kernels"] = len(rows)
    if "Distributed" in views:
        res["distributed"] = distributed_summary(tb, run)
    return res


def distributed_summary(tb: TensorBoard, run: str) -> dict:
    span = tb.profiler("spans", run=run, worker="All")[0]
    q = dict(run=run, worker="All", span=span)
    ops = tb.profiler("distributed/commops", **q)["data"]
    return {"span": span, "gpuinfo": tb.profiler("distributed/gpuinfo", **q),
            "overlap_us": tb.profiler("distributed/overlap", **q)["data"],
            "waittime_us": tb.profiler("distributed/waittime", **q)["data"],
            "commops_calls": {w: {row[0]: row[1] for row in t["rows"]} for w, t in ops.items()}}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: plugin_check.py LOGDIR RUN [RUN ...]", file=sys.stderr)
        return 2
    logdir = Path(argv[0])
    if not logdir.is_dir():
        print(f"plugin_check.py: error: LOGDIR {logdir} is not a directory", file=sys.stderr)
        return 2
    runs = profiler_runs(logdir)
    unknown = [r for r in argv[1:] if r not in runs]
    if unknown:
        print(f"plugin_check.py: error: no run {unknown[0]!r} with profiler traces in {logdir}; runs there: "
              f"{', '.join(runs) or 'none'}", file=sys.stderr)
        return 2
    with TensorBoard(logdir) as tb:
        tb.wait_for_runs(argv[1:])
        print(json.dumps({run: summarize(tb, run) for run in argv[1:]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The handler's cycle work on one trace, two ways: the copy's plan and the analysis' parse from one read of
the trace (plugin_copy/one_pass.py), against the two readers alone (plan_edits, then analyze_path), as a
cycle did them before. Each way runs in a subprocess of its own (its peak RSS is its own), alternating.

    python scripts/bench_one_pass.py /tmp/bench/r100/w.1.pt.trace.json --repeat 3
    STEPSCOPE_PURE_PYTHON=1 python scripts/bench_one_pass.py ...   # the msgspec reader alone

Prints one line per run (way, wall seconds, CPU seconds, peak RSS in MB) and the medians; checks that both
ways write the same copy and make the same report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("separate", "one_pass")


def work(way: str, path: Path, out: Path) -> dict:
    """The cycle's copy and report of ``path``, ``way``; what it took and what it made."""
    from stepscope.analysis.report import analyze_parsed_file, analyze_path
    from stepscope.plugin_copy.one_pass import read_both
    from stepscope.plugin_copy.stream_plan import plan_edits
    from stepscope.plugin_copy.stream_write import write_adapted_stream

    t0, c0 = time.perf_counter(), time.process_time()
    if way == "separate":
        plan, header = plan_edits(path)
        write_adapted_stream(path, out, plan, header)
        report = analyze_path(path, "w", "1")
    else:
        both = read_both(path, "w", "1")
        write_adapted_stream(path, out, both.plan, both.header)
        report = analyze_parsed_file(both.parsed, path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"way": way, "wall_s": wall, "cpu_s": cpu,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "copy": hashlib.sha256(out.read_bytes()).hexdigest(),
            "report": hashlib.sha256(json.dumps(report.to_dict(), sort_keys=True).encode()).hexdigest()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # run one way here (the subprocess)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(work(a.one, a.trace, a.out)))
        return 0
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeat):
            for way in WAYS:
                r = subprocess.run([sys.executable, __file__, str(a.trace), "--one", way, "--out",
                                    str(Path(tmp) / "copy.json")], capture_output=True, text=True, check=True)
                rows.append(json.loads(r.stdout))
                row = rows[-1]
                print(f"{way:9} {row['wall_s']:7.2f} s wall {row['cpu_s']:7.2f} s CPU {row['peak_mb']:7.0f} MB peak",
                      flush=True)
    for way in WAYS:
        mine = [r for r in rows if r["way"] == way]
        print(f"median {way:9} {statistics.median(r['wall_s'] for r in mine):7.2f} s wall "
              f"{statistics.median(r['cpu_s'] for r in mine):7.2f} s CPU "
              f"{statistics.median(r['peak_mb'] for r in mine):7.0f} MB peak")
    same = len({(r["copy"], r["report"]) for r in rows}) == 1
    print("same copy and report both ways" if same else "DIFFERENT copies or reports")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""CPU time of each test file of the default set, one file at a time: the table of docs/testing.md's "Test suite cost".

    python scripts/test_cost.py                          # every tests/test_*.py, default markers (pyproject)
    python scripts/test_cost.py tests/test_tbfix.py      # some files
    python scripts/test_cost.py -m slow                  # the slow set instead
    python scripts/test_cost.py --json cost.json         # also write the rows

Each file runs in its own `python -m pytest -q -p no:xdist -p no:cacheprovider FILE` process. CPU time is user +
system of that process and its children (trainer runs, TensorBoard, compilers): it is what a file costs the
2-core CI machine, and it moves less with the machine's load than wall time does. Run it on an idle machine;
files run one after another, so the whole table takes about as long as the default set on one core.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUDGET_TOTAL_S = 600  # the default set on the 2-core CI machine: 6 minutes of wall time, start-up included
BUDGET_FILE_S = 150  # with --dist loadfile one file runs on one worker: a longer one bounds the wall time


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cost(path: Path, marker: str | None, timeout: float) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", str(path)]
    if marker is not None:
        command += ["-m", marker]
    cpu0, t0 = children_cpu(), time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        tail = (done.stdout.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        tail = f"timed out after {timeout:.0f} s"
    summary = re.sub(r"=+", "", tail).strip()
    summary = re.sub(r" in [\d.]+s.*$", "", summary)
    return {"file": str(path.relative_to(REPO)), "cpu_s": round(children_cpu() - cpu0, 1),
            "wall_s": round(time.perf_counter() - t0, 1), "result": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="test files (default: every tests/test_*.py)")
    parser.add_argument("-m", dest="marker", help="marker expression instead of pyproject's default")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per file (default 900)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    files = [p.resolve() for p in args.files] or sorted((REPO / "tests").glob("test_*.py"))
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        print(f"test_cost.py: error: no such test file: {missing[0]}", file=sys.stderr)
        return 2
    rows = []
    for path in files:
        rows.append(cost(path, args.marker, args.timeout))
        r = rows[-1]
        print(f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['file']}  ({r['result']})", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: -r["cpu_s"])
    total = sum(r["cpu_s"] for r in rows)
    print("| file | CPU s | wall s | result |\n|---|---:|---:|---|")
    for r in rows:
        flag = " (over the per-file budget)" if r["cpu_s"] > BUDGET_FILE_S else ""
        print(f"| {r['file']} | {r['cpu_s']:.1f}{flag} | {r['wall_s']:.1f} | {r['result']} |")
    print(f"| **total** | **{total:.1f}** (budget {BUDGET_TOTAL_S}) | | |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

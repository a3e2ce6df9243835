"""Slowdown captures on a shared CPU machine: catches of docs/loops.md's stall, and false captures on steady loops.

    python scripts/capture_noise.py --runs 10 --steady-steps 2000 --out capture_noise.json
    python scripts/capture_noise.py --runs 10 --steady-steps 2000 --load 1     # plus one busy process per core

Runs docs/loops.md's example as written (a fresh process each, in a temporary folder, threads not pinned)
`--runs` times: the stall is caught when a slowdown capture starts within its steps (150-179) and reads
`data_bound` (the example prints each cycle's trigger and verdict); every other slowdown capture is noise. Then the same loop with the stall taken out
(`if 150 <= i < 180:` made `if False:`) and `--steady-steps` steps, `--runs` times: every slowdown capture is a
false one, counted per 1,000 kept steps. `--load N` keeps N busy Python processes per core running meanwhile; `--threads N` sets
OMP_NUM_THREADS for the loops (not set by default, as a user runs the example).
Prints one line per run and a summary; `--out` writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STALL = range(150, 180)


def doc_example() -> str:
    text = (REPO / "docs" / "loops.md").read_text()
    m = re.search(r"<!-- loops-example -->\s*```python\n(.*?)```\s*<!-- /loops-example -->", text, re.S)
    if not m:
        sys.exit("docs/loops.md holds no loops-example block")
    return m.group(1)


def steady(code: str, steps: int) -> str:
    out = code.replace("if 150 <= i < 180:", "if False:").replace("batches(300)", f"batches({steps})")
    if out == code:
        sys.exit("the example's stall or step count changed: update scripts/capture_noise.py")
    return out


def run(code: str, threads: int | None) -> tuple[list[dict], str, float]:
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "example.py").write_text(code)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "example.py"], cwd=d, capture_output=True, text=True, timeout=600,
                           env=env)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit(f"the example failed: {p.stderr[-2000:]}")
        rows = [json.loads(line) for line in (Path(d) / "logs/my_loop/cycles.jsonl").read_text().splitlines()]
        printed = [line for line in p.stdout.splitlines() if "loader wait:" in line or "slowdown:" in line]
        return rows, " | ".join(printed), wall


def burn() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steady-steps", type=int, default=2000)
    ap.add_argument("--load", type=int, default=0, help="busy processes per core while the loops run")
    ap.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the loops (default: not set, as written)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.runs < 1 or a.steady_steps < 300 or a.load < 0 or (a.threads is not None and a.threads < 1):
        print("capture_noise: need --runs >= 1, --steady-steps >= 300, --load >= 0, --threads >= 1", file=sys.stderr)
        return 2
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(a.load * (os.cpu_count() or 1))]
    for b in burners:
        b.start()
    code, result = doc_example(), {"doc": [], "steady": [], "load": a.load, "cores": os.cpu_count(), "threads": a.threads,
                                   "loadavg": os.getloadavg()}
    try:
        for i in range(a.runs):
            rows, last, wall = run(code, a.threads)
            slow = [r for r in rows if r["trigger"] != "schedule"]
            caught = [r for r in slow if r["steps"][0] in STALL and r["verdict"] == "data_bound"]
            noise = [r for r in slow if r["steps"][0] not in STALL]
            result["doc"].append({"caught": bool(caught), "noise": len(noise), "printed": last,
                                  "triggers": [r["trigger"] for r in slow], "wall_s": round(wall, 1)})
            print(f"doc run {i}: caught={bool(caught)} noise={len(noise)} printed: {last}; "
                  f"{[(r['steps'], r['trigger'], r.get('verdict')) for r in slow]}", flush=True)
        for i in range(a.runs):
            rows, _, wall = run(steady(code, a.steady_steps), a.threads)
            slow = [r for r in rows if r["trigger"] != "schedule"]
            result["steady"].append({"steps": a.steady_steps, "false": len(slow),
                                     "triggers": [r["trigger"] for r in slow], "wall_s": round(wall, 1)})
            print(f"steady run {i}: {len(slow)} false capture(s) in {a.steady_steps} steps "
                  f"{[r['trigger'] for r in slow]}", flush=True)
    finally:
        for b in burners:
            b.terminate()
    doc, st = result["doc"], result["steady"]
    steps = sum(r["steps"] for r in st)
    result["summary"] = {"caught": sum(r["caught"] for r in doc), "runs": len(doc),
                         "noise_in_doc_runs": sum(r["noise"] for r in doc),
                         "false_per_1000_steps": 1000 * sum(r["false"] for r in st) / steps, "steady_steps": steps}
    print(json.dumps(result["summary"]))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Images/s scaling from 1 to N GPUs, from the run.json files of runs named `<kind>-<N>gpu-<rep>`.

    python scripts/ddp_scaling.py LOGDIR        # the runs that scripts/gpu_verify.sh's ddp part writes

Prints one line per run (status, world size, median and mean step ms, timed steps, images/s), then per step
kind: the median images/s over the repeats at 1 GPU and at each larger world size, and the scaling factor.
Images/s = global batch / the run's median step time (rank 0's CUDA events).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def collect(logdir: Path) -> dict[tuple[str, int], list[float]]:
    rows: dict[tuple[str, int], list[float]] = {}
    for rj in sorted(logdir.glob("*/run.json")):
        r = json.loads(rj.read_text())
        kind, gpus = r["step_kind"], r["world_size"]  # what the run was, not what its name says
        f = r["final"]
        if r["status"] != "completed" or not f.get("median_step_ms"):
            print(f"{rj.parent.name}: {r['status']}, no timing")
            continue
        img_s = r["global_batch_size"] / (f["median_step_ms"] / 1e3)
        print(f"{rj.parent.name}: world {r['world_size']}, median {f['median_step_ms']:.3f} ms, mean "
              f"{f['mean_step_ms']:.3f} ms, {f['timed_steps']} timed steps, {img_s:.0f} images/s")
        rows.setdefault((kind, gpus), []).append(img_s)
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: ddp_scaling.py LOGDIR (a directory of <kind>-<N>gpu-<rep> runs)", file=sys.stderr)
        return 2
    rows = collect(Path(argv[0]))
    for kind in sorted({k for k, _ in rows}):
        one = rows.get((kind, 1))
        for n in sorted(g for k, g in rows if k == kind and g > 1):
            many = rows[(kind, n)]
            if one:
                print(f"{kind}: 1 GPU {statistics.median(one):.0f} images/s ({len(one)} runs), {n} GPUs "
                      f"{statistics.median(many):.0f} ({len(many)} runs): {statistics.median(many) / statistics.median(one):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

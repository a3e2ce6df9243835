"""Profiler overhead: the same training run with and without `--profile`, in pairs, as separate processes.

    python scripts/profiler_overhead.py --arch resnet18 --batch-size 128 --steps 600 --pairs 6   # one GPU
    python scripts/profiler_overhead.py --concurrent --pairs 4 ...     # 2 GPUs: each pair runs side by side
    python scripts/profiler_overhead.py --device cpu --arch resnet8 --batch-size 32 --steps 60 --pairs 1

The code lives in bench.overhead (scripts/bench/overhead.py); this is its command.
"""

import sys

from bench.overhead import main

if __name__ == "__main__":
    sys.exit(main())

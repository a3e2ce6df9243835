"""The memory diagnosis against the GPU's own counters: per-step peaks, the predicted largest batch, injected
causes and a real out-of-memory capture (needs one CUDA device).

    python scripts/verify_memory.py --out $OUT/memory [--parts peaks oom] [--reps 3]

The code lives in bench.memory_truth (scripts/bench/memory_truth.py); this is its command.
"""

import sys

from bench.memory_truth import main

if __name__ == "__main__":
    sys.exit(main())

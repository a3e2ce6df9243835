"""Native vs custom elementwise ops as users run them: one unprofiled `train.py` process per op set, many

    python scripts/bench_ops_processes.py --pairs 16 [--steps 250] [--arch resnet18] [--batch-size 128]

The code lives in bench.ops_processes (scripts/bench/ops_processes.py); this is its command.
"""

import sys

from bench.ops_processes import main

if __name__ == "__main__":
    sys.exit(main())

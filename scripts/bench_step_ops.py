"""Native vs custom elementwise ops in the trainer's own training step, both in one process, steps interleaved.

    python scripts/bench_step_ops.py [--arch resnet18] [--batch-size 128] [--steps 300] [--compile MODE]

The code lives in bench.step_ops (scripts/bench/step_ops.py); this is its command.
"""

import sys

from bench.step_ops import main

if __name__ == "__main__":
    sys.exit(main())

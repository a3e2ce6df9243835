"""A pageable host-to-device copy timed three ways (on a CUDA machine).

    python scripts/bench_copy_timing.py --scenario pageable_copy

The code lives in stepscope.bench.copy_timing (trainer/bench/copy_timing.py); this is its command.
"""

import sys

from stepscope.bench.copy_timing import main

if __name__ == "__main__":
    sys.exit(main())

"""A pageable host-to-device copy timed three ways (on a CUDA machine).

    python scripts/bench_copy_timing.py --scenario pageable_copy

The code lives in bench.copy_timing (scripts/bench/copy_timing.py); this is its command.
"""

import sys

from bench.copy_timing import main

if __name__ == "__main__":
    sys.exit(main())

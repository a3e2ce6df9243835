"""Does a loop run slower after torch.profiler has recorded a cycle, and what brings its speed back?

    python scripts/bench_after_profiling.py --out OUT

The code lives in bench.after_profiling (scripts/bench/after_profiling.py); this is its command.
"""

import sys

from bench.after_profiling import main

if __name__ == "__main__":
    sys.exit(main())

"""What stepscope.schedule and stepscope.loader cost a loop per step, against torch.profiler.schedule.

    python scripts/bench_schedule.py                 # ns per call, median of interleaved rounds
    python scripts/bench_schedule.py --json

The code lives in bench.schedule (scripts/bench/schedule.py); this is its command.
"""

import sys

from bench.schedule import main

if __name__ == "__main__":
    sys.exit(main())

"""The cost of the trainer's per-step telemetry (trainer/timing.py) on the host, without a model.

    python scripts/bench_telemetry.py [--steps 20000] [--repeat 5]

The code lives in stepscope.bench.telemetry (trainer/bench/telemetry.py); this is its command.
"""

import sys

from stepscope.bench.telemetry import main

if __name__ == "__main__":
    sys.exit(main())

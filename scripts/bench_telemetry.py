"""The cost of the trainer's per-step telemetry (trainer/demo/timing.py) on the host, without a model.

    python scripts/bench_telemetry.py [--steps 20000] [--repeat 5]

The code lives in bench.telemetry (scripts/bench/telemetry.py); this is its command.
"""

import sys

from bench.telemetry import main

if __name__ == "__main__":
    sys.exit(main())

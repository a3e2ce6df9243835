"""Recalibrate the overhead model: predicted (from a trace alone) vs measured unprofiled step, per family, loop
style and recording option.

    python scripts/calibrate_overhead.py --out OUT                       # all families, styles and options
    python scripts/calibrate_overhead.py --out OUT --families gru --styles eager,lightning --options none,stacks
    python scripts/calibrate_overhead.py --out OUT --device cpu --families tiny --styles eager --steps 20  # smoke
    python scripts/calibrate_overhead.py --table OUT/*/calibration.json     # one table of several runs' rows

The code lives in bench.calibration (scripts/bench/calibration.py); this is its command.
"""

import sys

from bench.calibration import main

if __name__ == "__main__":
    sys.exit(main())

"""A Lightning run profiled by Lightning's own PyTorchProfiler, with its truth measured without the profiler.

    python scripts/record_lightning.py --out OUT/traces      # needs lightning and a GPU

The code lives in bench.verdicts.lightning (scripts/bench/verdicts/lightning.py); this is its command.
"""

import sys

from bench.verdicts.lightning import main

if __name__ == "__main__":
    sys.exit(main())

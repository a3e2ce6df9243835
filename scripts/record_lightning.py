"""A Lightning run profiled by Lightning's own PyTorchProfiler, with its truth measured without the profiler.

    python scripts/record_lightning.py --out OUT/traces      # needs lightning and a GPU

The code lives in stepscope.bench.verdicts.lightning (trainer/bench/verdicts/lightning.py); this is its command.
"""

import sys

from stepscope.bench.verdicts.lightning import main

if __name__ == "__main__":
    sys.exit(main())

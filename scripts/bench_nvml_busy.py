"""The GPU's busy share as the driver samples it (NVML), against duty cycles whose truth is known.

    python scripts/bench_nvml_busy.py [--out rows.json]

The code lives in bench.nvml_busy (scripts/bench/nvml_busy.py); this is its command.
"""

import sys

from bench.nvml_busy import main

if __name__ == "__main__":
    sys.exit(main())

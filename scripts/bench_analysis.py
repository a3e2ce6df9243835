"""Time and peak memory of the trace analysis and export on large traces built from a real one.

    python scripts/bench_analysis.py build --size 100M --out /tmp/bench/r100     # a 100 MB run directory
    python scripts/bench_analysis.py measure /tmp/bench/r100 --repeat 2          # one table row per command
    python scripts/bench_analysis.py parsers /tmp/bench/r100                     # JSON libraries on it
    python scripts/bench_analysis.py plugin /tmp/bench/x/out     # an exported run: time until it shows

The code lives in bench.analysis_speed (scripts/bench/analysis_speed.py); this is its command.
"""

import sys

from bench.analysis_speed import main

if __name__ == "__main__":
    sys.exit(main())

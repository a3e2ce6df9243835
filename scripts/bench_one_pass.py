"""The handler's cycle work on one trace: one read for the copy's plan and the analysis, against two readers.

    python scripts/bench_one_pass.py /tmp/bench/r100/w.1.pt.trace.json --repeat 3

The code lives in bench.one_pass (scripts/bench/one_pass.py); this is its command.
"""

import sys

from bench.one_pass import main

if __name__ == "__main__":
    sys.exit(main())

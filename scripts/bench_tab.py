"""How long the stepscope tab takes on a large run: its first analysis, its summary once cached, a window.

    python scripts/bench_analysis.py build --size 1G --out /tmp/bench/logs/r1g    # a 1 GB run (real events)
    python scripts/bench_tab.py /tmp/bench/logs --run r1g --steps 40:43

The code lives in bench.tab_speed (scripts/bench/tab_speed.py); this is its command.
"""

import sys

from bench.tab_speed import main

if __name__ == "__main__":
    sys.exit(main())

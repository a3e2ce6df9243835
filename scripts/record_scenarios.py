"""Record the small real traces under tests/data/ that the analysis and trace-fix tests run on.

    python scripts/record_scenarios.py --out /tmp/scenarios            # all scenarios
    python scripts/record_scenarios.py --out /tmp/s --only tiny_ops    # one
    python scripts/record_scenarios.py --out tests/data --device cpu --only cpu_resnet

The code lives in bench.scenarios (scripts/bench/scenarios.py); this is its command.
"""

import sys

from bench.scenarios import main

if __name__ == "__main__":
    sys.exit(main())

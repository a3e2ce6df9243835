"""Record the small real traces under tests/data/ that the analysis and trace-fix tests run on.

    python scripts/record_scenarios.py --out /tmp/scenarios            # all scenarios
    python scripts/record_scenarios.py --out /tmp/s --only tiny_ops    # one
    python scripts/record_scenarios.py --out tests/data --device cpu --only cpu_resnet

The code lives in stepscope.bench.scenarios (trainer/bench/scenarios.py); this is its command.
"""

import sys

from stepscope.bench.scenarios import main

if __name__ == "__main__":
    sys.exit(main())

"""Record the small real 2-rank DDP trace under tests/data/ddp_gloo/ that the cross-rank analysis tests use.

    torchrun --nproc_per_node 2 scripts/record_ddp_scenario.py --out tests/data/ddp_gloo

The code lives in bench.ddp_scenario (scripts/bench/ddp_scenario.py); this is its command.
"""

import sys

from bench.ddp_scenario import main

if __name__ == "__main__":
    sys.exit(main())

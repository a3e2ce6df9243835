"""Multi-rank verdict scenarios under torchrun: communication-bound, a straggler, and a balanced run.

    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case comm --out DIR       # nccl on GPUs, gloo on CPU
    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case straggler --out DIR
    torchrun --nproc_per_node 2 scripts/verdict_ddp.py --case balanced --out DIR

The code lives in bench.verdicts.ddp (scripts/bench/verdicts/ddp.py); this is its command.
"""

import sys

from bench.verdicts.ddp import main

if __name__ == "__main__":
    sys.exit(main())

"""Images/s scaling from 1 to N GPUs, from the run.json files of runs named `<kind>-<N>gpu-<rep>`.

    python scripts/ddp_scaling.py LOGDIR        # the runs that scripts/gpu_verify.sh's ddp part writes

The code lives in bench.ddp_scaling (scripts/bench/ddp_scaling.py); this is its command.
"""

import sys

from bench.ddp_scaling import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

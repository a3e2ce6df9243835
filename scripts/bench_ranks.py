"""Analysis time and peak memory of an N-rank job vs ranks and vs workers, and its straggler verdict vs the truth.

    python scripts/bench_ranks.py build --ranks 64 --out /tmp/ranks/r64                  # 64 ranks, 0.6 MB each
    python scripts/bench_ranks.py build --ranks 1024 --rank-mb 16 --out /tmp/ranks/r1024 --workers 16
    python scripts/bench_ranks.py measure /tmp/ranks/r64 --workers 1,2 [--cluster] [--hta]
    python scripts/bench_ranks.py sweep --ranks 8,64 --workers 1,2 --scratch /tmp/ranks  # build + measure each
    python scripts/bench_ranks.py sweep --ranks 8,64 --rank-mb 16 --workers 1,2,4,8,16 --cluster --hta \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 256 --rank-mb 16 --workers 1,2,4,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 1024 --rank-mb 16 --workers 1,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16
    python scripts/bench_ranks.py sweep --ranks 64 --rank-mb 100 --workers 1,8,16 --cluster \
        --scratch /tmp/ranks --build-workers 16

The code lives in bench.rank_scaling (scripts/bench/rank_scaling.py); this is its command.
"""

import sys

from bench.rank_scaling import main

if __name__ == "__main__":
    sys.exit(main())

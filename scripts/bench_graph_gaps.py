"""Where a CUDA-graph replay's time goes: kernels, or the gaps between them (on a CUDA machine).

    python scripts/bench_graph_gaps.py --only bert_bs8 vit_tiny_bs8

The code lives in bench.graph_gaps (scripts/bench/graph_gaps.py); this is its command.
"""

import sys

from bench.graph_gaps import main

if __name__ == "__main__":
    sys.exit(main())

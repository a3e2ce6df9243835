"""Benchmark the stepscope elementwise ops against eager PyTorch, torch.compile and copy_.

    python scripts/bench_ops.py --out bench.json --plot sweep.png      # GPU (about 3 min on an H100)
    python scripts/bench_ops.py --device cpu --quick --no-compile --out /tmp/b.json --plot /tmp/s.png
    python scripts/bench_ops.py --per-call --out per_call.json         # only the per-call costs (about 1 min)

The code lives in bench.ops (scripts/bench/ops.py); this is its command.
"""

import sys

from bench.ops import main

if __name__ == "__main__":
    sys.exit(main())

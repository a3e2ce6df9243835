"""How often is the verdict right? Scenarios with injected, known causes, truth measured without the profiler.

    python scripts/verdict_bench.py --out /tmp/vb                     # every GPU scenario (one GPU run)
    python scripts/verdict_bench.py --out /tmp/vb --only gpt_tiny tiny_ops
    python scripts/verdict_bench.py --out /tmp/vb --device cpu        # the CPU subset (CI-sized)
    python scripts/verdict_bench.py --out /tmp/vbh --set holdout      # families the analysis was never fitted on
    python scripts/verdict_bench.py --rescore /tmp/vb                 # re-analyse saved traces, no GPU needed

The code lives in bench.verdicts.bench (scripts/bench/verdicts/bench.py); this is its command.
"""

import sys

from bench.verdicts.bench import main

if __name__ == "__main__":
    sys.exit(main())

"""The verdict suite's scenarios as plain user loops: stepscope.schedule + stepscope.trace_handler, no trainer.

    python scripts/verdict_loops.py --out /tmp/vl                          # every GPU scenario of the suite
    python scripts/verdict_loops.py --out /tmp/vlh --set holdout           # the held-out families
    python scripts/verdict_loops.py --out /tmp/vl --only gpt_tiny loader_two_workers

The code lives in bench.verdicts.loops (scripts/bench/verdicts/loops.py); this is its command.
"""

import sys

from bench.verdicts.loops import main

if __name__ == "__main__":
    sys.exit(main())

"""The Lightning and Hugging Face integrations on a GPU, each on one scenario with its truth.

    python scripts/verdict_integrations.py --out OUT

The code lives in bench.verdicts.integrations (scripts/bench/verdicts/integrations.py); this is its
command.
"""

import sys

from bench.verdicts.integrations import main

if __name__ == "__main__":
    sys.exit(main())

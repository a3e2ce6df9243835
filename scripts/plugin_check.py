"""Start TensorBoard on a loopback port and print what the PyTorch Profiler tab shows for a run, as JSON.

    python scripts/plugin_check.py LOGDIR RUN [RUN ...]

The code lives in bench.plugin_view (scripts/bench/plugin_view.py); this is its command.
"""

import sys

from bench.plugin_view import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

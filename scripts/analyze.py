"""Say why training steps are slow, from the torch.profiler traces in a file or a directory.

    python scripts/analyze.py logs/myrun                 # verdict + evidence + top findings per trace
    python scripts/analyze.py logs/myrun --json          # the whole report as one JSON document
    python scripts/analyze.py plain_run --export-tensorboard logs/plain_fixed   # + a plugin-ready copy

The same as `stepscope analyze`, run from this checkout; what it prints and accepts is described in
trainer/cli/analyze.py. Bad input: one line on stderr, exit code 2, nothing written.
"""

import sys

from stepscope.trace.workers import one_blas_thread

one_blas_thread()  # before numpy is imported
from stepscope.cli.analyze import main  # noqa: E402
from stepscope.cli.quick_exit import quick_exit  # noqa: E402

if __name__ == "__main__":
    sys.exit(quick_exit(main(prog="analyze.py")))  # no interpreter teardown (trainer/cli/quick_exit.py)

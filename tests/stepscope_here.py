"""The `stepscope` command for tests, run with this interpreter: `python tests/stepscope_here.py analyze ...`.

The editable install makes `stepscope` this checkout's trainer/ (pyproject's package-dir); running the
command through `sys.executable` keeps the tests off whatever `stepscope` script is first on PATH.
"""

import sys

from stepscope.cli.main import main

if __name__ == "__main__":
    sys.exit(main())

"""The `stepscope` command of this checkout, for tests: `python tests/stepscope_here.py analyze ...`.

The installed `stepscope` script may belong to another checkout (an editable install); this one binds
`stepscope` to the checkout it lives in first, like scripts/_checkout.py does for scripts.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import _checkout  # noqa: E402,F401
from stepscope.trainer.command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

"""Check that this checkout reports and exports exactly what another checkout does, on every run in a folder.

    git worktree add /tmp/before 96f345e
    (cd /tmp/before && python setup.py -q build_ext --inplace)     # its compiled trace reader, where it has one
    python scripts/same_reports.py /tmp/before tests/data          # every run folder under tests/data
    python scripts/same_reports.py /tmp/before big/replica --no-export

The code lives in bench.same_reports (scripts/bench/same_reports.py); this is its command.
"""

import sys

from bench.same_reports import main

if __name__ == "__main__":
    sys.exit(main())

"""README's two set-up commands are exactly what CI runs."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = re.search(r"<!-- setup-commands -->\s*```(?:bash|sh)?\n(.*?)```", readme, re.S)
    assert block, "README.md must hold the set-up commands in a fenced block after <!-- setup-commands -->"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_readme_has_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2, cmds
    assert "pip install -e" in cmds[0] and "scripts/train.py --profile" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_commands_verbatim():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    for cmd in setup_commands():
        assert cmd in [ln.strip() for ln in ci], f"{cmd!r} is not a line of .ci/run"

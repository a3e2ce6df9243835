"""The documents keep their shape: a README of at most 200 lines, links and repository paths that lead somewhere,
and a BENCHMARKS.md that opens with one table of current numbers, each row dated, with its device, torch version
and command.

    pytest tests/test_docs_layout.py -q
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "BENCHMARKS.md", REPO / "kernels" / "README.md",
         *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def test_the_readme_has_at_most_200_lines():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_benchmarks_opens_with_one_table_of_current_numbers():
    lines = (REPO / "BENCHMARKS.md").read_text().splitlines()
    body = [ln for ln in lines[1:] if ln.strip()]  # below the title
    assert body[0] == "## Current numbers"
    header = [c.strip() for c in body[1].strip("|").split("|")]
    assert header == ["what", "result", "date", "device", "torch", "command"]
    rows = []
    for line in body[3:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert len(rows) >= 10
    for row in rows:
        assert len(row) == 6, row
        what, result, date, device, torch, command = row
        assert what and result and device and torch, row
        assert re.match(r"20\d\d-\d\d-\d\d", date), row
        assert "`" in command, row  # a command one can run


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, broken


PATH_IN_TEXT = re.compile(r"(?<![\w/.-])((?:trainer|scripts|tests|docs|kernels)/[\w./-]*\w)")


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "history.md"], ids=lambda p: str(p.relative_to(REPO)))
def test_every_repository_path_a_page_names_exists(page):
    """A file or folder of this repository named in the text (`trainer/report/front.py`, `scripts/bench/`) is
    there: a room renamed or a script moved takes its docs along. Patterns and placeholders (`*`, `<run>`) and
    the older measurements of docs/history.md are left out."""
    text = page.read_text()
    named = {m.group(1) for m in PATH_IN_TEXT.finditer(text)
             if text[m.end():m.end() + 1] not in ("*", "<", "[") and text[m.start() - 1:m.start()] != "<"}
    assert not sorted(p for p in named if not (REPO / p).exists()), page

"""The documentation's shape: a README a newcomer reads to the end, links that stay inside the repository,
and a headline figure only with the command that printed it and the day it did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = sorted(p for p in ROOT.rglob("*.md")
                  if not any(part.startswith(".") or part in {"node_modules", "build", "out"}
                             for part in p.relative_to(ROOT).parts))
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines; history goes to bench/README.md, design to docs/"


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve_inside_the_repository(doc: Path) -> None:
    broken = []
    for m in _LINK.finditer(doc.read_text()):
        target = m.group("target")
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT.resolve()):
            broken.append(f"{target} (leaves the repository)")
        elif not path.exists():
            broken.append(f"{target} (no such file)")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"


def test_every_headline_figure_names_its_command_and_date() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 6, row
        command, date = cells[4], cells[5]
        assert re.fullmatch(r"`[^`]+`", command), f"no command in {row}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), f"no date in {row}"
        script = re.search(r"(bench/\S+\.py|tests/\S+\.py)", command)
        assert script and (ROOT / script.group(1)).exists(), f"{command} names no file of the repository"

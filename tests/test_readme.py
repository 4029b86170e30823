"""The Python snippets in the READMEs run as written (so they never rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "core" / "README.md"]


def _snippets() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)):
            out.append((f"{doc.relative_to(ROOT)}#{i}", block))
    return out


@pytest.mark.parametrize(("where", "code"), _snippets(), ids=[w for w, _ in _snippets()])
def test_snippet_runs(where: str, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Troubleshooting: an API in the snippet changed; update the README with it."""
    exec(compile(code, where, "exec"), {"__name__": "__readme__"})
    if "print(" in code and "# 0 True" in code:
        assert capsys.readouterr().out.strip() == "0 True"

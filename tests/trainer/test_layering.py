"""molt-trainer imports molt.store / molt.backends / molt.governance, never molt.gateway or molt.control."""

from __future__ import annotations

import ast
from pathlib import Path

import molt_trainer

SRC = Path(molt_trainer.__file__).parent


def test_trainer_never_imports_gateway_or_control() -> None:
    bad = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.startswith(("molt.gateway", "molt.control"))]
    assert bad == []


def test_public_names_resolve_and_all_is_sorted() -> None:
    assert molt_trainer.__all__ == sorted(molt_trainer.__all__)
    for name in molt_trainer.__all__:
        assert getattr(molt_trainer, name) is not None

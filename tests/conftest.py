"""Shared fixtures: every test gets its own MOLT_HOME so no state is shared by accident."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def molt_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``MOLT_HOME`` for each test."""
    home = tmp_path / "molt-home"
    home.mkdir()
    monkeypatch.setenv("MOLT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MOLT_STORAGE_OPTIONS", raising=False)
    return home


@pytest.fixture
def store(molt_home: Path) -> Iterator[object]:
    """An empty LanceDB store under MOLT_HOME (compaction on demand only)."""
    from molt.store import Store

    s = Store.open(molt_home / "store", auto_compact=False)
    yield s
    s.close()

"""Adapter-test configuration shared by every framework's environment (imports nothing framework-specific)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared conformance suite lives in tests/conformance; make ``import conformance`` work under
# pytest's importlib import mode (which leaves sys.path alone).
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# Frameworks that warn at import or on use about things that are theirs to fix, not ours. Targeted by
# message and category so that any other warning still fails the test (pyproject: filterwarnings=error).
_IGNORED: tuple[str, ...] = ()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/adapters/" in str(item.path):
            for spec in _IGNORED:
                item.add_marker(pytest.mark.filterwarnings(spec))

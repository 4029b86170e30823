"""Adapter-test configuration shared by every framework's environment (imports nothing framework-specific)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from molt.capture import MemorySink, Recorder
from molt.control.versions import AgentVersion, VersionRegistry
from molt.store import Store

# Frameworks that warn at import or on use about things that are theirs to fix, not ours. Targeted by
# message and category so that any other warning still fails the test (pyproject: filterwarnings=error).
_IGNORED: tuple[str, ...] = ()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/adapters/" in str(item.path):
            for spec in _IGNORED:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture
def rec(tmp_path: Path) -> Iterator[Recorder]:
    """A Recorder into a MemorySink (``rec.sink_``), delivering at once. Raw capture, ``pipeline=None``: what
    the adapter maps, value by value (governance would redact some of it)."""
    sink = MemorySink()
    r = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, pipeline=None)
    r.sink_ = sink  # type: ignore[attr-defined]
    yield r
    r.close()


@pytest.fixture()
def registry(tmp_path: Path) -> Iterator[VersionRegistry]:
    """A version registry on a fresh store (what an adapter's ``versions=`` reads)."""
    with Store.open(tmp_path / "store") as store:
        yield VersionRegistry(store)


class SwitchableSource:
    """A version source that reads ``registry`` until ``down`` is set, then fails as an unreachable store."""

    def __init__(self, registry: VersionRegistry) -> None:
        self.registry = registry
        self.down = False

    def live(self, tenant_id: str, agent_id: str) -> AgentVersion | None:
        if self.down:
            raise ConnectionError("the store is unreachable")
        return self.registry.live(tenant_id, agent_id)


@pytest.fixture()
def switchable(registry: VersionRegistry) -> Any:
    """A :class:`SwitchableSource` over ``registry``."""
    return SwitchableSource(registry)

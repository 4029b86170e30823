"""Reliability and security campaign (issue 10): shared fixtures.

The harness modules here (``relharness``, ``openapi_doc``) are plain modules shared with
``bench/reliability/run.py``; this directory goes on ``sys.path`` so both import them the same way
(pytest's importlib import mode leaves ``sys.path`` alone).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from openapi_doc import KEYS  # noqa: E402  (importable only once the line above ran)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/reliability/" in str(item.path):
            item.add_marker(pytest.mark.reliability)


@pytest.fixture
def gateway_app(tmp_path: Path) -> Iterator[Any]:
    """An in-process gateway app (stub backend, tenant keys, Recorder into a real store) and its parts."""
    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never")
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0, max_body_bytes=64 << 10))
    app = create_app(gw)
    yield app, gw, rec, store
    rec.close()
    store.close()

"""Fixtures for gateway tests: a real uvicorn server on a loopback port, a Recorder into a real store,
and OpenAI clients pointed at it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from molt.backends import BaseBackend, StubBackend
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, RoutingTable, create_app
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store

KEYS = {"sk-operator": ("platform", "operator"), "sk-acme-writer": ("acme", "agent_writer"),
        "sk-acme-admin": ("acme", "admin"), "sk-acme-reader": ("acme", "reader"),
        "sk-globex-writer": ("globex", "agent_writer")}


@dataclass
class Served:
    """A running gateway: its URL, the gateway object, its Recorder and store."""

    url: str
    gateway: Gateway
    recorder: Recorder
    store: Store

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, key: str = "sk-acme-writer", **kw: Any) -> Any:
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, **kw)

    def flush(self) -> None:
        assert self.recorder.flush(timeout=30, deliver=True)

    def events(self, trajectory_id: str, timeout: float = 30.0) -> list[Any]:
        """The trajectory's stored events. The gateway records a call after its response is sent
        (off the request path), so the client can finish reading a stream a moment before the event
        is handed to the Recorder: wait for it, bounded, instead of racing it."""
        from molt.errors import NotFound

        deadline = time.monotonic() + timeout
        while True:
            self.flush()
            try:
                return self.store.trajectory(trajectory_id).events
            except NotFound:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """A factory: ``serve(backends, table=None, keys=True, **config)`` starts a gateway server."""
    stack: list[tuple[ServerThread, Recorder, Store]] = []

    def start(backends: list[BaseBackend] | None = None, table: RoutingTable | None = None, *, keys: bool = True,
              **config: Any) -> Served:
        n = len(stack)
        store = Store.open(tmp_path / f"store{n}", auto_compact=False)
        # raw capture: these tests check what the gateway records value by value (token traces included,
        # which redaction drops when it changes a generation); governed serving: test_governance_default.py
        rec = Recorder(store, spool_dir=tmp_path / f"spool{n}", fsync="never", pipeline=None)
        config.setdefault("health_interval_s", 0)
        gw = Gateway(backends or [StubBackend()], table, recorder=rec, store=store,
                     keyring=KeyRing.from_mapping(KEYS) if keys else None, config=GatewayConfig(**config))
        srv = ServerThread(create_app(gw)).__enter__()
        stack.append((srv, rec, store))
        return Served(srv.url, gw, rec, store)

    yield start
    for srv, rec, store in reversed(stack):
        srv.__exit__()
        rec.close()
        store.close()


@pytest.fixture
def served(serve: Callable[..., Served]) -> Served:
    """A gateway over one stub backend, with tenant keys."""
    return serve()


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


from ..backends.conftest import policy_model_dir  # noqa: E402,F401  (a fixture, shared with backend tests)

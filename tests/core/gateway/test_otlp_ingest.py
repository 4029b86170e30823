"""OTLP/HTTP ingest mounted on the gateway: GenAI spans from any OTel-instrumented stack become the
key's tenant's ATDP events; no key or a role that may not write is refused."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from molt.atdp import EventKind

from .conftest import Served

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _span(sid: str, parent: str, name: str, attrs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    def val(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    return {"traceId": TRACE, "spanId": sid, "parentSpanId": parent, "name": name, "kind": 1,
            "startTimeUnixNano": "1764480000000000000", "endTimeUnixNano": "1764480000250000000",
            "attributes": [{"key": k, "value": val(v)} for k, v in attrs.items()], **kw}


EXPORT = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "home-grown"}, "spans": [
    _span("a1a1a1a1a1a1a1a1", "", "chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                              "gen_ai.usage.input_tokens": 7, "gen_ai.usage.output_tokens": 3}),
    _span("b2b2b2b2b2b2b2b2", "a1a1a1a1a1a1a1a1", "execute_tool lookup",
          {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
          status={"code": 2, "message": "lookup timed out"}),
]}]}]}


def test_otlp_export_lands_as_the_tenants_trajectory(serve: Callable[..., Served]) -> None:
    s = serve()
    url = s.url + "/v1/traces"
    assert httpx.post(url, json=EXPORT).status_code == 401
    assert httpx.post(url, json=EXPORT, headers={"Authorization": "Bearer sk-acme-reader"}).status_code == 403
    r = httpx.post(url, json=EXPORT, headers={"Authorization": "Bearer sk-acme-writer"})
    assert r.status_code == 200, r.text
    # keys of two tenants: the trace id names acme's own (namespaced) trajectory
    tid = s.gateway.namespace.namespaced("acme", TRACE)
    events = s.events(tid)
    assert [e.kind for e in events] == [EventKind.MODEL_CALL, EventKind.TOOL_CALL]
    assert all(e.metadata.tenant_id == "acme" for e in events)
    assert events[1].parent_id == events[0].event_id
    assert events[0].metadata.usage.input_tokens == 7  # type: ignore[union-attr]
    assert events[1].outcome.status == "error"  # type: ignore[union-attr]
    assert s.store.verify(tid).ok
    assert s.store.trajectories(tenant="globex") == []


def test_the_x_molt_agent_header_names_the_agent_of_spans_that_name_none(serve: Callable[..., Served]) -> None:
    s = serve()
    named = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "x"}, "spans": [
        _span("c3c3c3c3c3c3c3c3", "a1a1a1a1a1a1a1a1", "invoke_agent planner",
              {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": "planner"})]}]}]}
    headers = {"Authorization": "Bearer sk-acme-writer", "X-Molt-Agent": "support"}
    for export in (EXPORT, named):
        assert httpx.post(s.url + "/v1/traces", json=export, headers=headers).status_code == 200
    tid = s.gateway.namespace.namespaced("acme", TRACE)
    deadline = time.monotonic() + 30
    while len(events := s.events(tid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e.metadata.agent_id for e in events] == ["support", "support", "planner"]  # the span's own id wins

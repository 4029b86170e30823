"""``X-Molt-Tenant``: an adapter sends its tenant so that its run and the gateway's record are one — never
across a tenant wall. A key's tenant is the key's (another tenant in the header is a 403 and nothing is
recorded); an open gateway, which has no wall, takes the header's tenant for the call and for handed-over
events (OTLP ``molt.event``)."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from molt.atdp import EventKind
from molt.capture.handover import GatewayRecorder


def _chat(served, key: str, tenant: str | None):
    headers = {"X-Molt-Agent": "support", **({"X-Molt-Tenant": tenant} if tenant else {})}
    return served.client(key).chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "hi"}], extra_headers=headers)


def test_a_keys_tenant_is_the_keys(served) -> None:
    raw = _chat(served, "sk-acme-writer", "acme")  # the key's own tenant: as without the header
    tid = raw.headers["x-molt-trajectory"]
    assert {e.metadata.tenant_id for e in served.events(tid)} == {"acme"}
    served.flush()
    before = served.store.count("events")
    with pytest.raises(openai.PermissionDeniedError, match="this key is of tenant 'acme'"):
        _chat(served, "sk-acme-writer", "globex")
    # the handed-over path has the same wall
    r = httpx.post(served.url + "/v1/traces", json={"resourceSpans": []},
                   headers={"authorization": "Bearer sk-acme-writer", "x-molt-tenant": "globex"})
    assert r.status_code == 403
    with pytest.raises(openai.BadRequestError, match="X-Molt-Tenant"):
        _chat(served, "sk-acme-writer", "x" * 200)
    served.flush()
    assert served.store.count("events") == before  # nothing recorded for a refused call


def test_an_open_gateway_takes_the_adapters_tenant(serve) -> None:
    served = serve(keys=False)
    raw = _chat(served, "sk-local", "acme")
    tid = raw.headers["x-molt-trajectory"]
    evs = served.events(tid)
    assert [(e.kind, e.metadata.tenant_id, e.metadata.agent_id) for e in evs] == [
        (EventKind.MODEL_CALL, "acme", "support")]
    # an event handed over by another process joins that trajectory, in the adapter's tenant, after it
    extra = evs[0].model_copy(update={"event_id": evs[0].event_id[:-4] + "beef", "seq": None,
                                      "name": "handed-over"})
    with GatewayRecorder(served.url, api_key="sk-local") as rec:
        assert rec.record(extra)
        assert rec.flush(30)
        assert rec.stats.accepted == 1
    deadline = time.monotonic() + 30
    while len(evs := served.events(tid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [(e.name, e.metadata.tenant_id, e.seq) for e in evs] == [
        ("chat.completions", "acme", 0), ("handed-over", "acme", 1)]
    assert served.store.verify(tid).ok

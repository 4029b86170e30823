"""GenAI evaluation results posted live to the gateway's /v1/traces become late rewards: on the evaluated
span's event (a span event), or — sent later by an evaluator — on the parent of an evaluation span;
appended without touching the causal record, in the posting key's tenant, once per annotation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.backends import StubBackend
from molt.capture import Recorder
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing
from molt.store import Store

TRACE = "7a1c0e5f3b2d4c6e8f9a0b1c2d3e4f50"
CHAT, TOOL, EVAL = "c1c1c1c1c1c1c1c1", "d2d2d2d2d2d2d2d2", "e3e3e3e3e3e3e3e3"
KEYS = {"sk-acme": ("acme", "agent_writer"), "sk-globex": ("globex", "agent_writer")}


def _val(v: Any) -> dict[str, Any]:
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}


def _attrs(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _val(v)} for k, v in d.items()]


def _span(sid: str, parent: str, name: str, attrs: dict[str, Any], events: list[Any] = ()) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": sid, "parentSpanId": parent, "name": name,
            "startTimeUnixNano": "1764480000000000000", "endTimeUnixNano": "1764480000250000000",
            "attributes": _attrs(attrs), "events": [{"name": n, "timeUnixNano": "1764480000300000000",
                                                      "attributes": _attrs(a)} for n, a in events]}


def _export(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "app"},
                                                                              "spans": list(spans)}]}]}


RUN = _export(
    _span(CHAT, "", "chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, [
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.8,
                                      "gen_ai.evaluation.explanation": "Quotes jane.doe@example.com correctly"}),
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "tone", "gen_ai.evaluation.score.label": "polite"}),
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "groundedness", "error.type": "timeout"})]),
    _span(TOOL, CHAT, "execute_tool lookup", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}))
# an evaluator that ran later: its result as a span of its own, parented to the span it judged
LATE = _export(_span(EVAL, TOOL, "gen_ai.evaluation.result", {
    "gen_ai.evaluation.name": "tool_correctness", "gen_ai.evaluation.score.value": 0.0,
    "gen_ai.evaluation.explanation": "Wrong order id for jane.doe@example.com"}))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[str, Gateway, Recorder, Store]]:
    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", hook=None)
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    with ServerThread(create_app(gw)) as srv:
        yield srv.url, gw, rec, store
    rec.close()
    store.close()


def _post(url: str, key: str, body: dict[str, Any]) -> None:
    r = httpx.post(url + "/v1/traces", json=body, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.json() == {}, r.text


def test_evaluations_posted_to_v1_traces_are_tenant_scoped_late_rewards(gateway: Any) -> None:
    url, gw, rec, store = gateway
    _post(url, "sk-acme", RUN)
    assert rec.flush(timeout=30, deliver=True)
    tid = gw.namespace.namespaced("acme", TRACE)
    chat, tool = (e.event_id for e in store.trajectory(tid).events)
    chain = [s.hash for s in store.sealed_events(tid)]
    rewards = store.rewards(tid)
    # the scored evaluation is a reward on the chat call; the label-only and the failed one are not
    assert [(r.event_id, r.value, r.dimensions, r.source.value, r.annotator) for r in rewards] == [
        (chat, 0.8, {"relevance": 0.8}, "judge", "otlp:relevance")]

    _post(url, "sk-acme", LATE)
    _post(url, "sk-acme", RUN)  # an exporter's retry of both: nothing recorded twice
    _post(url, "sk-acme", LATE)
    assert rec.flush(timeout=30, deliver=True)
    rewards = store.rewards(tid)
    assert sorted((r.event_id, r.value) for r in rewards) == sorted([(chat, 0.8), (tool, 0.0)])
    assert all(r.tenant_id == "acme" and r.trajectory_id == tid and r.reason is None for r in rewards)
    # appended, never folded in: the evaluation span is no step, and the chain is as it was
    assert [s.hash for s in store.sealed_events(tid)] == chain and store.verify(tid).ok
    assert "jane.doe" not in str(store.table("rewards").to_arrow().to_pylist())

    # another tenant naming the same trace and span judges its own trajectory, not acme's
    _post(url, "sk-globex", LATE)
    assert rec.flush(timeout=30, deliver=True)
    other = gw.namespace.namespaced("globex", TRACE)
    assert other != tid and len(store.rewards(tid)) == 2
    (g,) = store.rewards(other)
    assert g.tenant_id == "globex" and g.event_id not in (chat, tool)

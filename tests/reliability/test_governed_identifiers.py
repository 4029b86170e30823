"""Issue 27 item 6: identifiers a client chooses that the envelope stores (the OpenAI ``user`` field,
``metadata.task``, the ``X-Molt-Agent`` header, OpenTelemetry resource attributes recorded as tags) are
governed like the payload: with the default policy a planted e-mail address is in neither the store
nor the spool, while ordinary ids stay as they are.
"""

from __future__ import annotations

from pathlib import Path

from openapi_doc import KEYS
from starlette.testclient import TestClient

EMAIL = "jane.doe@example.com"


def test_client_chosen_identifiers_are_redacted_in_store_and_spool(tmp_path: Path) -> None:
    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.governance import GovernancePipeline
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", pipeline=GovernancePipeline())
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    w = {"authorization": "Bearer sk-acme-writer"}
    try:
        with TestClient(create_app(gw)) as c:
            tids = set()
            for turn in ("first", "second"):
                r = c.post("/v1/chat/completions", headers={**w, "x-molt-agent": f"agent-of-{EMAIL}"},
                           json={"model": "stub", "user": EMAIL, "metadata": {"task": f"refund for {EMAIL}"},
                                 "messages": [{"role": "user", "content": f"{turn} turn"}]})
                assert r.status_code == 200, r.text
                tids.add(r.headers["x-molt-trajectory"])
            plain = c.post("/v1/chat/completions", headers={**w, "x-molt-agent": "support-bot"},
                           json={"model": "stub", "user": "user-42", "metadata": {"task": "refund"},
                                 "messages": [{"role": "user", "content": "hi"}]})
            export = {"resourceSpans": [{"resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": f"svc-{EMAIL}"}}]}, "scopeSpans": [{"spans": [{
                    "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7", "name": "chat",
                    "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                    "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}
            assert c.post("/v1/traces", headers=w, json=export).status_code == 200
        assert rec.flush(timeout=30, deliver=True)
        assert len(tids) == 1  # the two turns still share a session (the user field), as before
        [tid] = tids
        events = store.trajectory(tid).events
        assert len(events) == 2 and all(e.session_id and e.metadata.agent_id and e.metadata.task for e in events)
        assert len({e.session_id for e in events}) == 1  # the same user → the same stored value
        rows = [str(r) for b in store.iter_events() for r in b.to_pylist()]
        assert len(rows) == 4
        assert not any(EMAIL in r for r in rows), [r[:300] for r in rows if EMAIL in r]
        for f in (tmp_path / "spool").rglob("*"):
            if f.is_file():
                assert EMAIL.encode() not in f.read_bytes(), f
        [ev] = store.trajectory(plain.headers["x-molt-trajectory"]).events  # ordinary ids untouched
        assert (ev.session_id, ev.metadata.agent_id, ev.metadata.task) == ("user-42", "support-bot", "refund")
    finally:
        rec.close()
        store.close()


def test_a_quarantined_record_keeps_no_client_chosen_identifier_in_clear(tmp_path: Path) -> None:
    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder
    from molt.governance import GovernancePipeline, GovernancePolicy
    from molt.store import Store

    policy = GovernancePolicy.model_validate({"defaults": {"limits": {"max_event_bytes": 1024}}})
    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool", fsync="never", pipeline=GovernancePipeline(policy))
    try:
        too_big = Event(trajectory_id="t-q", session_id=EMAIL, kind=EventKind.USER_MESSAGE,
                        metadata={"tenant_id": "acme", "agent_id": f"agent-of-{EMAIL}", "task": EMAIL},
                        action=UserMessage(content="x" * 4000))
        rec.record(too_big)
        assert rec.flush(timeout=30, deliver=True)
        rows = store.table("quarantine").search().limit(None).to_arrow().to_pylist()
        assert len(rows) == 1 and rows[0]["record"] and "kept redacted" in rows[0]["reason"]
        # the session id holds an address: its keyed digest stands for it (molt.governance.envelope)
        assert EMAIL.encode() not in rows[0]["record"] and b"\"session_id\":\"idh-" in rows[0]["record"]
    finally:
        rec.close()
        store.close()

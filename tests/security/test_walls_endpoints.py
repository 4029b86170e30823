"""Issue 41: every role of tenant acme (and the platform operator, whose tenant is another) against
globex's objects on the feedback and OTLP endpoints — the version-free endpoints the probe found
holding; ``test_walls_tenants`` covers model names, ``/v1/models`` and the admin versions. Each key
either may not use the endpoint (403) or gets the same answer as for an id nobody holds (404), or — for
OTLP — writes into its own tenant only; globex's trajectory ends with its own events and no reward."""

from __future__ import annotations

from typing import Any

import openapi_doc
from openapi_doc import KEYS
from starlette.testclient import TestClient

GLOBEX_W = {"authorization": "Bearer sk-globex-writer"}
PROBERS = [k for k, (t, _) in KEYS.items() if t != "globex"]


def _otlp(trace: str, span: str, name: str) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "probe"}, "spans": [{
        "traceId": trace, "spanId": span, "name": name, "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}


def test_every_role_of_another_tenant_is_walled_off_feedback_and_otlp(gateway_app: Any) -> None:
    app, _gw, rec, store = gateway_app
    trace = "5bf92f3577b34da6a3ce929d0e0e4736"
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-session": "globex-s"},
                   json={"model": "stub", "messages": [{"role": "user", "content": "globex question"}]})
        tid, eid = r.headers["x-molt-trajectory"], r.headers["x-molt-event-id"]
        assert c.post("/v1/traces", headers=GLOBEX_W, json=_otlp(trace, "00f067aa0ba902b1", "globex-span")
                      ).status_code == 200
        assert rec.flush(timeout=30, deliver=True)
        before = {t: len(store.trajectory(t).events) for t in store.trajectory_ids()}
        for i, key in enumerate(PROBERS):
            h = {"authorization": f"Bearer {key}"}
            for path, body, unknown in [
                ("/v1/molt/rewards/trajectory", {"trajectory_id": tid, "value": -1.0},
                 {"trajectory_id": "nobody-holds-this", "value": -1.0}),
                ("/v1/molt/rewards/call", {"call_id": f"chatcmpl-{eid}", "value": -1.0},
                 {"call_id": "chatcmpl-nobody", "value": -1.0}),
                ("/v1/molt/rewards/last-call", {"session_id": "globex-s", "value": -1.0},
                 {"session_id": "nobody-s", "value": -1.0}),
                (f"/v1/molt/trajectories/{tid}/end", None, None),
            ]:
                a = c.post(path, headers=h, json=body)
                b = (c.post(path, headers=h, json=unknown) if unknown is not None
                     else c.post("/v1/molt/trajectories/nobody-holds-this/end", headers=h))
                assert a.status_code == b.status_code and a.status_code in (403, 404), (key, path, a.text, b.text)
                assert openapi_doc.is_openai_error(a.json())
            o = c.post("/v1/traces", headers=h, json=_otlp(trace, f"00f067aa0ba903{i:02x}", f"intruder-{i}"))
            assert o.status_code in (200, 403), (key, o.text)
    assert rec.flush(timeout=30, deliver=True)
    assert store.rewards(tid) == []
    for t, n in before.items():  # globex's trajectories: nothing appended by another tenant
        traj = store.trajectory(t)
        if {str(e.metadata.tenant_id) for e in traj.events} == {"globex"}:
            assert len(traj.events) == n and "intruder" not in traj.model_dump_json(), t
            assert store.verify(t).ok

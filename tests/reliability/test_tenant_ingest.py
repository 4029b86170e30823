"""Issue 27: every ingest path resolves trajectory ids within the caller's tenant.

Random interleavings of two tenants' chat, OTLP and feedback calls over a few colliding ids (the same
``X-Molt-Trajectory``, trace and span ids for both tenants) against a real gateway, Recorder and
LanceDB store: no event lands in the other tenant's trajectory, no event of one tenant is dropped
because the other sent the same ids first, feedback reaches only the caller's own trajectories, and
every stored chain verifies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_doc import KEYS
from starlette.testclient import TestClient

TENANTS = ("acme", "globex")
#: Ids both tenants use: a readable run id, an OTLP-style trace id, and a third.
IDS = ("order-4711-run", "4bf92f3577b34da6a3ce929d0e0e4736", "shared")
SPANS = ("00f067aa0ba902b7", "00f067aa0ba902b8")
KINDS = ("chat", "otlp", "reward", "end")

_op = st.tuples(st.sampled_from(TENANTS), st.sampled_from(KINDS), st.sampled_from(IDS), st.sampled_from(SPANS))


def _otlp(trace: str, span: str, name: str) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "probe"}, "spans": [{
        "traceId": trace, "spanId": span, "name": name, "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]}


def _gateway(home: Path) -> tuple[Any, Any, Any]:
    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, GatewayConfig, create_app
    from molt.governance.access import KeyRing
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=home / "spool", fsync="never")
    gw = Gateway([StubBackend()], recorder=rec, store=store, keyring=KeyRing.from_mapping(KEYS),
                 config=GatewayConfig(health_interval_s=0))
    return create_app(gw), rec, store


@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=3, max_size=14))
def test_interleaved_tenants_with_colliding_ids_never_cross(tmp_path_factory: Any, ops: list[Any]) -> None:
    app, rec, store = _gateway(tmp_path_factory.mktemp("tenants"))
    expected: dict[str, set[str]] = {t: set() for t in TENANTS}  # markers that must be stored, per tenant
    used: dict[str, set[str]] = {t: set() for t in TENANTS}  # ids a tenant has written under
    spans_sent: dict[str, set[tuple[str, str]]] = {t: set() for t in TENANTS}
    rewarded: list[tuple[str, str]] = []  # (tenant, trajectory id) of accepted feedback
    try:
        with TestClient(app) as c:
            for i, (tenant, kind, cid, span) in enumerate(ops):
                key = {"authorization": f"Bearer sk-{tenant}-writer"}
                marker = f"marker-{i}-{tenant}"
                if kind == "chat":
                    r = c.post("/v1/chat/completions", headers={**key, "x-molt-trajectory": cid},
                               json={"model": "stub", "messages": [{"role": "user", "content": marker}]})
                    assert r.status_code == 200, r.text
                    expected[tenant].add(marker)
                    used[tenant].add(cid)
                elif kind == "otlp":
                    assert c.post("/v1/traces", headers=key, json=_otlp(cid, span, marker)).status_code == 200
                    if (cid, span) not in spans_sent[tenant]:  # the tenant's own re-send is a duplicate
                        expected[tenant].add(marker)
                    spans_sent[tenant].add((cid, span))
                    used[tenant].add(cid)
                    assert rec.flush(timeout=30, deliver=True)  # so feedback can find OTLP-only trajectories
                else:
                    r = (c.post("/v1/molt/rewards/trajectory", headers=key, json={"trajectory_id": cid, "value": 1.0})
                         if kind == "reward" else c.post(f"/v1/molt/trajectories/{cid}/end", headers=key))
                    # feedback finds only the caller's own use of an id, never the other tenant's
                    assert r.status_code == (200 if cid in used[tenant] else 404), (tenant, kind, cid, r.text)
                    if r.status_code == 200:
                        rewarded.append((tenant, r.json()["trajectory_id"]))
        assert rec.flush(timeout=30, deliver=True)
        stored: dict[str, str] = {t: "" for t in TENANTS}
        owner: dict[str, str] = {}
        for tid in store.trajectory_ids():
            t = store.trajectory(tid)
            tenants = {e.metadata.tenant_id for e in t.events}
            assert len(tenants) == 1, f"trajectory {tid} mixes tenants {sorted(map(str, tenants))}"
            report = store.verify(tid)
            assert report.ok, report.problems
            owner[tid] = str(tenants.pop())
            stored[owner[tid]] += t.model_dump_json()
        for tenant in TENANTS:
            other = next(x for x in TENANTS if x != tenant)
            missing = [m for m in expected[tenant] if m not in stored[tenant]]
            assert not missing, f"{tenant}'s events were dropped: {missing}"
            assert not re.search(rf"marker-\d+-{other}", stored[tenant]), f"{other}'s events in {tenant}'s"
        for tenant, tid in rewarded:
            assert owner.get(tid) == tenant
            assert all(a.tenant_id == tenant for a in store.rewards(tid))
    finally:
        rec.close()
        store.close()

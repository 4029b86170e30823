"""Write probes across tenants (issue 27), as ``bench/reliability/run.py`` section 5 runs them: with only
acme's keys, try to change what globex is served, write into or erase globex's trajectories, and read
globex's ids out of ``/metrics`` or out of the answers. ``tests/reliability/test_auth_matrix.py`` has
the same probes as separate tests; this module counts them for the bench table.

A *cross-tenant write* is any change acme caused to globex's serving or data (a shared route changed, an
event in a trajectory of the other tenant, an event of globex dropped, a chain that no longer
verifies); a *leak* is anything of globex's that acme could read or tell (an id in ``/metrics``, a
different answer for an id globex holds than for one nobody holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACME_ADMIN, ACME_W, ACME_R = ({"authorization": f"Bearer sk-acme-{r}"} for r in ("admin", "writer", "reader"))
GLOBEX_W = {"authorization": "Bearer sk-globex-writer"}
CHAT = {"model": "stub", "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class WriteProbes:
    """What the probes found."""

    probes: int = 0
    cross_writes: int = 0
    leaks: int = 0
    notes: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, *, leak: bool = False) -> None:
        self.probes += 1
        if not ok:
            if leak:
                self.leaks += 1
            else:
                self.cross_writes += 1
            self.notes.append(what)


def otlp(trace: str, span: str, name: str, parent: str = "") -> dict[str, Any]:
    """An OTLP/JSON export of one finished GenAI chat span."""
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "probe"}, "spans": [{
        "traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000", "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
    }]}]}]}


def run(client: Any, gw: Any) -> WriteProbes:
    """Run every write probe through ``client`` (a TestClient of ``gw``'s app, keys of openapi_doc.KEYS)."""
    out = WriteProbes()
    rec, store = gw.recorder, gw.store
    # 1. shared routing with a tenant admin's key
    before = gw.router.table
    for method, path, body in [
        ("DELETE", "/v1/molt/admin/versions/stub@base", None),
        ("PUT", "/v1/molt/admin/models/stub/weights", {"weights": {"stub@base": 1.0}}),
        ("POST", "/v1/molt/admin/adapters", {"model": "stub", "version": "acme-lora", "path": "/tmp/x"}),
        ("POST", "/v1/molt/admin/versions", {"model": "stub#globex", "spec": {"version": "g", "backends": ["stub"]}}),
    ]:
        r = client.request(method, path, headers=ACME_ADMIN, json=body)
        out.check(r.status_code == 403 and gw.router.table == before, f"acme admin {method} {path}: {r.status_code}")
    out.check(client.post("/v1/chat/completions", headers=GLOBEX_W, json=CHAT).status_code == 200,
              "globex's chat after acme's admin calls")
    # 2. OTLP into globex's trace; 3. globex's span sent first by acme
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    client.post("/v1/traces", headers=GLOBEX_W, json=otlp(trace, "00f067aa0ba902b7", "globex-root"))
    rec.flush(timeout=30, deliver=True)
    client.post("/v1/traces", headers=ACME_W, json=otlp(trace, "00f067aa0ba902b8", "acme-in",
                                                        parent="00f067aa0ba902b7"))
    trace2, span2 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    client.post("/v1/traces", headers=ACME_W, json=otlp(trace2, span2, "acme-first"))
    rec.flush(timeout=30, deliver=True)
    client.post("/v1/traces", headers=GLOBEX_W, json=otlp(trace2, span2, "globex-own"))
    # 5. a client-chosen id acme holds, and acme's generated id, named by globex
    a = client.post("/v1/chat/completions", headers={**ACME_W, "x-molt-trajectory": "order-4711-run"}, json=CHAT)
    g = client.post("/v1/chat/completions", headers=ACME_W, json=CHAT)
    rec.flush(timeout=30, deliver=True)
    taken = client.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": "order-4711-run"},
                        json=CHAT)
    free = client.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": "order-5000-run"},
                       json=CHAT)
    ns = gw.namespace  # globex's answer for an id acme holds has the same form as for a free id
    same_kind = (taken.status_code == free.status_code
                 and taken.headers.get("x-molt-trajectory") == ns.namespaced("globex", "order-4711-run")
                 and free.headers.get("x-molt-trajectory") == ns.namespaced("globex", "order-5000-run"))
    out.check(same_kind and taken.headers.get("x-molt-trajectory") != a.headers["x-molt-trajectory"],
              f"id oracle: globex gets {taken.status_code} for acme's id, {free.status_code} for a free one",
              leak=True)
    client.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": g.headers["x-molt-trajectory"]},
                json=CHAT)
    # 4. /metrics read with acme's key after globex's failing calls on its ids
    client.post("/v1/molt/trajectories/order-4711-run-globex/end", headers=GLOBEX_W)
    text = client.get("/metrics", headers=ACME_R).text
    out.check("order-4711-run-globex" not in text, "globex's id in /metrics read by acme", leak=True)
    rec.flush(timeout=30, deliver=True)
    # every trajectory: one tenant, a chain that verifies; nothing of globex's dropped
    dumped: dict[str, str] = {}
    for tid in store.trajectory_ids():
        t = store.trajectory(tid)
        tenants = {e.metadata.tenant_id for e in t.events}
        out.check(len(tenants) == 1, f"trajectory {tid[:60]} holds events of {sorted(map(str, tenants))}")
        out.check(store.verify(tid).ok, f"trajectory {tid[:60]} does not verify")
        for tenant in tenants:
            dumped[str(tenant)] = dumped.get(str(tenant), "") + t.model_dump_json()
    globex = dumped.get("globex", "")
    for marker in ("globex-root", "globex-own"):
        out.check(marker in globex, f"globex's span {marker} dropped or misplaced")
    out.check("acme-in" not in globex and "acme-first" not in globex, "acme's span in globex's trajectory")
    return out

"""Tenant isolation and auth: every gateway endpoint with no key, a wrong key, another tenant's key and
a role without the permission; the CLI's store-reading commands with another tenant's ``--api-key``.
Every refusal is an OpenAI-style error (HTTP) or one clear line and a non-zero status (CLI), and no
foreign row is ever returned or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openapi_doc
import pytest
from openapi_doc import KEYS
from starlette.testclient import TestClient

from molt.governance.access import Permission, Role

_ROLE_OF = {k: Role(r) for k, (_, r) in KEYS.items()}
_ALLOWED = {Role.OPERATOR: set(Permission), Role.ADMIN: set(Permission) - {Permission.OPERATE},
            Role.TRAINER: {Permission.READ, Permission.EXPORT, Permission.TRAIN},
            Role.READER: {Permission.READ}, Role.AGENT_WRITER: {Permission.WRITE}}
_BODIES: dict[str, Any] = {
    "/v1/chat/completions": {"model": "stub", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "stub", "prompt": "hi"},
    "/v1/molt/rewards/call": {"call_id": "chatcmpl-x", "value": 1.0},
    "/v1/molt/rewards/trajectory": {"trajectory_id": "t", "value": 1.0},
    "/v1/molt/rewards/last-call": {"session_id": "s1", "value": 1.0},
    "/v1/molt/admin/models/stub/weights": {"weights": {"stub@base": 1.0}},
    "/v1/molt/admin/versions": {"model": "stub", "spec": {"version": "v2", "backends": ["stub"]}},
    "/v1/molt/admin/adapters": {"model": "stub", "version": "v3", "path": "/nope"},
    "/v1/traces": {"resourceSpans": []},
}


def _call(c: TestClient, method: str, path: str, key: str | None, tid: str = "t") -> Any:
    headers = {"authorization": f"Bearer {key}"} if key is not None else {}
    path = path.replace("{tid}", tid)
    body = _BODIES.get(path)
    return c.request(method, path, headers=headers, json=body) if body is not None else c.request(
        method, path, headers=headers)


@pytest.mark.parametrize(("method", "path", "needs"), openapi_doc.ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in
                                                                                  openapi_doc.ENDPOINTS])
def test_every_endpoint_refuses_missing_wrong_and_underprivileged_keys(gateway_app: Any, method: str, path: str,
                                                                        needs: str | None) -> None:
    app, *_ = gateway_app
    with TestClient(app) as c:
        for key in (None, "", "sk-wrong", "Bearer", "sk-acme-admin " * 50):
            r = _call(c, method, path, key)
            assert r.status_code == 401, (key, r.status_code, r.text)
            assert openapi_doc.is_openai_error(r.json()) and r.json()["error"]["code"] == "invalid_api_key"
        r = c.request(method, path.replace("{tid}", "t"), headers={"authorization": "Basic c2stYWNtZS1hZG1pbg=="})
        assert r.status_code == 401  # only Bearer (or x-api-key) carries a key
        for key, role in _ROLE_OF.items():
            r = _call(c, method, path, key)
            if needs is not None and Permission(needs) not in _ALLOWED[role]:
                assert r.status_code == 403, (key, r.status_code, r.text)
                assert openapi_doc.is_openai_error(r.json()) and r.json()["error"]["type"] == "permission_error"
            else:
                assert r.status_code not in (401, 403), (key, r.status_code, r.text)


def test_another_tenants_key_cannot_reach_a_trajectory_or_call(gateway_app: Any) -> None:
    app, _gw, rec, store = gateway_app
    acme, globex = {"authorization": "Bearer sk-acme-writer"}, {"authorization": "Bearer sk-globex-writer"}
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", headers={**acme, "x-molt-session": "acme-s"},
                   json=_BODIES["/v1/chat/completions"])
        tid, eid = r.headers["x-molt-trajectory"], r.headers["x-molt-event-id"]
        assert rec.flush(timeout=30, deliver=True)
        probes = [
            ("POST", "/v1/molt/rewards/trajectory", {"trajectory_id": tid, "value": 1.0}),
            ("POST", "/v1/molt/rewards/call", {"call_id": f"chatcmpl-{eid}", "value": 1.0}),
            ("POST", "/v1/molt/rewards/last-call", {"session_id": "acme-s", "value": 1.0}),
            ("POST", "/v1/molt/rewards/last-call", {"trajectory_id": tid, "value": 1.0}),
            ("POST", f"/v1/molt/trajectories/{tid}/end", None),
            ("POST", "/v1/molt/sessions/acme-s/end", None),
        ]
        for method, path, body in probes:
            r = c.request(method, path, headers=globex, json=body)
            assert r.status_code == 404, (path, r.status_code, r.text)
            assert openapi_doc.is_openai_error(r.json())
    assert rec.flush(timeout=30, deliver=True)
    assert {e.metadata.tenant_id for e in store.trajectory(tid).events} == {"acme"}
    assert store.rewards(tid) == []


def test_a_key_cannot_append_to_another_tenants_trajectory_by_naming_its_id(gateway_app: Any) -> None:
    app, gw, rec, store = gateway_app
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", headers={"authorization": "Bearer sk-acme-writer"},
                   json=_BODIES["/v1/chat/completions"])
        tid = r.headers["x-molt-trajectory"]
        assert rec.flush(timeout=30, deliver=True)
        r2 = c.post("/v1/chat/completions", headers={"authorization": "Bearer sk-globex-writer",
                                                      "x-molt-trajectory": tid},
                    json={"model": "stub", "messages": [{"role": "user", "content": "globex text"}]})
        # served, in globex's own trajectory for that id (the same answer as for an id nobody holds)
        assert r2.status_code == 200 and r2.headers["x-molt-trajectory"] == gw.namespace.namespaced("globex", tid)
        r3 = c.post("/v1/molt/rewards/trajectory", headers={"authorization": "Bearer sk-globex-writer"},
                    json={"trajectory_id": tid, "value": -1.0})
        assert rec.flush(timeout=30, deliver=True)
        assert r3.status_code == 200 and r3.json()["trajectory_id"] != tid
    assert rec.flush(timeout=30, deliver=True)
    assert {e.metadata.tenant_id for e in store.trajectory(tid).events} == {"acme"}
    assert store.rewards(tid) == []


# ------------------------------------------------------------------------------------------ write probes
# Issue 27: what one tenant's keys must not be able to change for another tenant.

ACME_ADMIN, ACME_W, ACME_R = ({"authorization": f"Bearer sk-acme-{r}"} for r in ("admin", "writer", "reader"))
GLOBEX_ADMIN, GLOBEX_W, GLOBEX_R = ({"authorization": f"Bearer sk-globex-{r}"} for r in ("admin", "writer", "reader"))
OPERATOR = {"authorization": "Bearer sk-platform-operator"}
_CHAT = _BODIES["/v1/chat/completions"]


def _otlp(trace: str, span: str, name: str, parent: str = "") -> dict[str, Any]:
    """An OTLP/JSON export of one finished GenAI chat span."""
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "probe"}, "spans": [{
        "traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000", "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}],
    }]}]}]}


def _by_tenant(store: Any) -> dict[str, list[Any]]:
    """Every stored trajectory, by the tenants of its events; each chain must verify."""
    out: dict[str, list[Any]] = {}
    for tid in store.trajectory_ids():
        t = store.trajectory(tid)
        tenants = {e.metadata.tenant_id for e in t.events}
        assert len(tenants) == 1, f"trajectory {tid} holds events of tenants {sorted(map(str, tenants))}"
        assert store.verify(tid).ok, store.verify(tid).problems
        out.setdefault(str(tenants.pop()), []).append(t)
    return out


def test_a_tenant_admin_cannot_change_shared_routing(gateway_app: Any) -> None:
    app, gw, _rec, _store = gateway_app
    before = gw.router.table
    with TestClient(app) as c:
        for method, path, body in [
            ("DELETE", "/v1/molt/admin/versions/stub@base", None),
            ("PUT", "/v1/molt/admin/models/stub/weights", {"weights": {"stub@base": 1.0}}),
            ("POST", "/v1/molt/admin/adapters", {"model": "stub", "version": "acme-lora", "path": "/tmp/x"}),
            ("POST", "/v1/molt/admin/versions", {"model": "stub#globex",
                                                 "spec": {"version": "g", "backends": ["stub"]}}),
        ]:
            r = c.request(method, path, headers=ACME_ADMIN, json=body)
            assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error", (path, r.text)
        assert gw.router.table == before
        assert c.post("/v1/chat/completions", headers=GLOBEX_W, json=_CHAT).status_code == 200
        # a tenant admin manages its own agents' canaries: a version of its tenant, under its own key
        r = c.post("/v1/molt/admin/versions", headers=ACME_ADMIN,
                   json={"model": "stub", "spec": {"version": "acme-canary", "backends": ["stub"]}, "weight": 1.0})
        assert r.status_code == 200, r.text
        assert c.put("/v1/molt/admin/models/stub%23acme/weights", headers=ACME_ADMIN,
                     json={"weights": {"acme-canary": 1.0}}).status_code == 200
        assert gw.router.table.versions["acme-canary#acme"].tenant_id == "acme"
        seen = {c.post("/v1/chat/completions", headers={**h, "x-molt-session": f"s{i}"}, json=_CHAT
                       ).headers["x-molt-policy-version"] for i in range(8) for h in (GLOBEX_W,)}
        assert seen == {"stub@base"}  # globex's sessions never reach acme's canary
        assert "acme-canary" in c.post("/v1/chat/completions", headers=ACME_W, json=_CHAT
                                       ).headers["x-molt-policy-version"]
        routes = c.get("/v1/molt/admin/routes", headers=GLOBEX_ADMIN).json()
        assert "acme-canary" not in str(routes) and "stub#acme" not in str(routes)
        # another tenant's version is as unknown as one that does not exist
        # nor serve the weights of a version it cannot see (an adapter loaded for acme)
        gw.router.add_version("stub#acme", gw.router.table.versions["acme-canary#acme"].model_copy(
            update={"version": "acme-lora", "upstream_model": "acme-lora"}), weight=0.0)
        r = c.post("/v1/molt/admin/versions", headers=GLOBEX_ADMIN, json={
            "model": "stub", "spec": {"version": "g2", "backends": ["stub"], "upstream_model": "acme-lora"}})
        assert r.status_code == 404 and "g2#globex" not in gw.router.table.versions
        gone = c.delete("/v1/molt/admin/versions/acme-canary", headers=GLOBEX_ADMIN)
        nope = c.delete("/v1/molt/admin/versions/no-such-version", headers=GLOBEX_ADMIN)
        assert gone.status_code == nope.status_code == 404
        assert c.delete("/v1/molt/admin/versions/acme-canary", headers=ACME_ADMIN).status_code == 200
        # the platform operator owns the shared part
        assert c.put("/v1/molt/admin/models/stub/weights", headers=OPERATOR,
                     json={"weights": {"stub@base": 1.0}}).status_code == 200


def test_otlp_ingest_cannot_write_into_another_tenants_trajectory(gateway_app: Any) -> None:
    app, _gw, rec, store = gateway_app
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    with TestClient(app) as c:
        assert c.post("/v1/traces", headers=GLOBEX_W, json=_otlp(trace, "00f067aa0ba902b7", "globex-root")
                      ).status_code == 200
        assert rec.flush(timeout=30, deliver=True)
        assert c.post("/v1/traces", headers=ACME_W,
                      json=_otlp(trace, "00f067aa0ba902b8", "acme-intruder", parent="00f067aa0ba902b7")
                      ).status_code == 200
        assert c.post("/v1/traces", headers=GLOBEX_W, json=_otlp(trace, "00f067aa0ba902b9", "globex-next",
                                                                 parent="00f067aa0ba902b7")).status_code == 200
    assert rec.flush(timeout=30, deliver=True)
    tenants = _by_tenant(store)  # one tenant per trajectory, every chain verifies
    globex = "".join(t.model_dump_json() for t in tenants["globex"])
    assert "globex-root" in globex and "globex-next" in globex and "acme-intruder" not in globex
    assert "acme-intruder" in "".join(t.model_dump_json() for t in tenants["acme"])


def test_a_tenant_cannot_suppress_another_tenants_span_by_sending_it_first(gateway_app: Any) -> None:
    app, _gw, rec, store = gateway_app
    trace, span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    with TestClient(app) as c:
        assert c.post("/v1/traces", headers=ACME_W, json=_otlp(trace, span, "acme-first")).status_code == 200
        assert rec.flush(timeout=30, deliver=True)
        assert c.post("/v1/traces", headers=GLOBEX_W, json=_otlp(trace, span, "globex-own")).status_code == 200
        assert c.post("/v1/traces", headers=GLOBEX_W, json=_otlp(trace, span, "globex-own")).status_code == 200
    assert rec.flush(timeout=30, deliver=True)
    tenants = _by_tenant(store)
    globex = [e for t in tenants["globex"] for e in t.events]
    assert len(globex) == 1 and "globex-own" in globex[0].model_dump_json()  # stored once: a re-send is a duplicate


def test_metrics_show_no_id_of_another_tenant(gateway_app: Any) -> None:
    app, _gw, _rec, _store = gateway_app
    with TestClient(app) as c:
        r = c.post("/v1/molt/trajectories/order-4711-run/end", headers=GLOBEX_W)
        assert r.status_code == 404
        c.post("/v1/molt/sessions/globex-session-42/end", headers=GLOBEX_W)
        c.get("/v1/molt/no/such/order-4711-path", headers=GLOBEX_W)
        assert c.post("/v1/molt/admin/versions", headers=GLOBEX_ADMIN, json={
            "model": "stub", "spec": {"version": "globex-private-v7", "backends": ["stub"]}, "weight": 1.0,
            "weights": {"stub@base": 0.0}}).status_code == 200
        assert "globex-private-v7" in c.post("/v1/chat/completions", headers=GLOBEX_W, json=_CHAT
                                             ).headers["x-molt-policy-version"]
        for reader in (ACME_R, ACME_ADMIN):
            text = c.get("/metrics", headers=reader).text
            assert "molt_gateway_requests_total" in text
            for secret in ("order-4711", "globex-session-42", "globex-private-v7"):
                assert secret not in text, (secret, [ln for ln in text.splitlines() if secret in ln])
        text = c.get("/metrics", headers=GLOBEX_R).text
        assert 'endpoint="/v1/molt/trajectories/{trajectory_id}/end",status="404"' in text
        assert "globex-private-v7" in text  # its own version's series


def test_client_chosen_trajectory_ids_are_namespaced_per_tenant(gateway_app: Any) -> None:
    app, gw, rec, store = gateway_app
    with TestClient(app) as c:
        a = c.post("/v1/chat/completions", headers={**ACME_W, "x-molt-trajectory": "order-4711-run"}, json=_CHAT)
        assert a.status_code == 200
        assert rec.flush(timeout=30, deliver=True)
        # globex gets the same kind of answer for an id acme holds as for one nobody holds: no oracle
        taken = c.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": "order-4711-run"},
                       json=_CHAT)
        free = c.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": "order-9999-run"},
                      json=_CHAT)
        assert taken.status_code == free.status_code == 200
        assert taken.headers["x-molt-trajectory"] == gw.namespace.namespaced("globex", "order-4711-run")
        assert free.headers["x-molt-trajectory"] == gw.namespace.namespaced("globex", "order-9999-run")
        assert taken.headers["x-molt-trajectory"] != a.headers["x-molt-trajectory"]
        # the client keeps using its own id: feedback and the next call resolve it the same way
        again = c.post("/v1/chat/completions", headers={**GLOBEX_W, "x-molt-trajectory": "order-4711-run"},
                       json=_CHAT)
        assert again.headers["x-molt-trajectory"] == taken.headers["x-molt-trajectory"]
        assert rec.flush(timeout=30, deliver=True)
        r = c.post("/v1/molt/trajectories/order-4711-run/end", headers=GLOBEX_W, json={"reward": 1.0})
        assert r.status_code == 200 and r.json()["trajectory_id"] == taken.headers["x-molt-trajectory"]
        # an id neither tenant used is a 404 for both, like another tenant's
        assert c.post("/v1/molt/rewards/trajectory", headers=GLOBEX_W,
                      json={"trajectory_id": "order-0000-run", "value": 1.0}).status_code == 404
    assert rec.flush(timeout=30, deliver=True)
    tenants = _by_tenant(store)
    assert len(tenants["globex"]) == 2 and len(tenants["acme"]) == 1
    acme_tid = a.headers["x-molt-trajectory"]
    assert store.rewards(acme_tid) == [] and len(store.trajectory(acme_tid).events) == 1


# ------------------------------------------------------------------------------------------ CLI


@pytest.fixture
def two_tenant_home(molt_home: Path) -> dict[str, Any]:
    """A store with one trajectory each for acme and globex, and a key file with both tenants."""
    from molt.atdp import Event, EventKind, UserMessage
    from molt.capture import Recorder
    from molt.store import Store

    lines = [f'[[keys]]\nkey = "{k}"\ntenant = "{t}"\nrole = "{r}"\n' for k, (t, r) in KEYS.items()]
    (molt_home / "keys.toml").write_text("\n".join(lines))
    store = Store.open(molt_home / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=molt_home / "spool")
    tids = {}
    for tenant in ("acme", "globex"):
        tid = rec.new_trajectory()
        tids[tenant] = tid
        for i in range(3):
            rec.record(Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": tenant},
                             action=UserMessage(content=f"{tenant}-secret-{i}")))
    assert rec.flush(timeout=30, deliver=True)
    rec.close()
    store.close()
    return tids


def _molt(capsys: Any, *args: str) -> tuple[int, str]:
    from molt.cli import run

    rc = run(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.slow
def test_cli_reads_with_another_tenants_key_see_nothing_of_it(two_tenant_home: dict[str, Any], tmp_path: Path,
                                                               capsys: Any) -> None:
    acme_tid = two_tenant_home["acme"]
    g = "sk-globex-admin"
    rc, out = _molt(capsys, "trajectories", "ls", "--json", "--api-key", g)
    assert rc == 0 and acme_tid not in out and "acme" not in out and two_tenant_home["globex"] in out
    rc, out = _molt(capsys, "trajectories", "ls", "--tenant", "acme", "--api-key", g)
    assert rc == 2 and acme_tid not in out
    rc, out = _molt(capsys, "trajectories", "show", acme_tid, "--json", "--api-key", g)
    assert rc != 0 and "acme-secret" not in out
    rc, out = _molt(capsys, "verify", acme_tid, "--api-key", g)
    assert rc != 0 and "acme-secret" not in out
    rc, out = _molt(capsys, "reward", acme_tid, "--value", "1", "--api-key", g)
    assert rc == 2
    export = tmp_path / "g.parquet"
    rc, out = _molt(capsys, "trajectories", "export", str(export), "--api-key", g)
    assert rc == 0
    import pyarrow.parquet as pq

    rows = pq.read_table(export).to_pylist()
    assert rows and all(r.get("tenant_id", "globex") == "globex" for r in rows)
    assert acme_tid not in {r["trajectory_id"] for r in rows}
    assert b"acme-secret" not in export.read_bytes()
    rc, out = _molt(capsys, "trajectories", "export", str(tmp_path / "a.parquet"), "--tenant", "acme", "--api-key", g)
    assert rc == 2 and not (tmp_path / "a.parquet").exists()
    rc, out = _molt(capsys, "audit", "--api-key", g, "--json")
    assert "acme-secret" not in out and acme_tid not in out


@pytest.mark.slow
def test_cli_refuses_missing_wrong_and_underprivileged_keys(two_tenant_home: dict[str, Any], tmp_path: Path,
                                                            capsys: Any) -> None:
    tid = two_tenant_home["acme"]
    for argv in (["trajectories", "ls"], ["trajectories", "show", tid], ["verify", tid],
                 ["trajectories", "export", str(tmp_path / "x.parquet")], ["reward", tid, "--value", "1"]):
        rc, out = _molt(capsys, *argv)  # a key file exists: no key is an error
        assert rc == 2 and "api-key" in out.lower(), (argv, out)
        rc, out = _molt(capsys, *argv, "--api-key", "sk-wrong")
        assert rc == 2 and "not known" in out, (argv, out)
        assert "acme-secret" not in out
    rc, out = _molt(capsys, "trajectories", "export", str(tmp_path / "r.parquet"), "--api-key", "sk-acme-reader")
    assert rc == 2 and "may not" in out and not (tmp_path / "r.parquet").exists()
    rc, out = _molt(capsys, "reward", tid, "--value", "1", "--api-key", "sk-acme-reader")
    assert rc == 2 and "may not" in out
    rc, out = _molt(capsys, "trajectories", "ls", "--api-key", "sk-acme-writer")
    assert rc == 2 and "may not" in out
    rc, out = _molt(capsys, "erase", "--tenant", "acme", "--yes", "--api-key", "sk-globex-admin")
    assert rc == 2
    rc, out = _molt(capsys, "erase", "--tenant", "acme", "--yes", "--api-key", "sk-acme-reader")
    assert rc == 2
    rc, out = _molt(capsys, "trajectories", "show", "../../../etc/passwd", "--api-key", "sk-acme-reader")
    assert rc == 2 and "root:" not in out
    rc, out = _molt(capsys, "trajectories", "export", str(tmp_path), "--api-key", "sk-acme-admin")
    assert rc == 2 and "directory" in out


@pytest.mark.slow
def test_replay_cli_needs_a_key_of_the_trajectorys_tenant_when_tenants_are_configured(
        two_tenant_home: dict[str, Any], capsys: Any) -> None:
    rc, out = _molt(capsys, "replay", "show", two_tenant_home["acme"])
    assert rc == 2 and "api-key" in out.lower(), out
    rc, out = _molt(capsys, "replay", "show", two_tenant_home["acme"], "--api-key", "sk-globex-admin")
    assert rc == 2 and "no trajectory" in out.lower(), out
    rc, out = _molt(capsys, "replay", "show", two_tenant_home["acme"], "--api-key", "sk-acme-reader")
    assert rc == 0, out
    rc, out = _molt(capsys, "replay", "window", "--agent", "x:y", "--tenant", "globex", "--api-key", "sk-acme-reader")
    assert rc == 2 and "cannot replay 'globex'" in out, out

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

from molt.governance.access import Action, Role

_ROLE_OF = {k: Role(r) for k, (_, r) in KEYS.items()}
_ALLOWED = {Role.ADMIN: set(Action), Role.TRAINER: {Action.READ, Action.EXPORT, Action.TRAIN},
            Role.READER: {Action.READ}, Role.AGENT_WRITER: {Action.WRITE}}
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
            if needs is not None and Action(needs) not in _ALLOWED[role]:
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
    app, _gw, rec, store = gateway_app
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", headers={"authorization": "Bearer sk-acme-writer"},
                   json=_BODIES["/v1/chat/completions"])
        tid = r.headers["x-molt-trajectory"]
        assert rec.flush(timeout=30, deliver=True)
        r2 = c.post("/v1/chat/completions", headers={"authorization": "Bearer sk-globex-writer",
                                                      "x-molt-trajectory": tid},
                    json={"model": "stub", "messages": [{"role": "user", "content": "globex text"}]})
        assert r2.status_code == 404 and openapi_doc.is_openai_error(r2.json())
        r3 = c.post("/v1/molt/rewards/trajectory", headers={"authorization": "Bearer sk-globex-writer"},
                    json={"trajectory_id": tid, "value": -1.0})
        assert r3.status_code == 404
    assert rec.flush(timeout=30, deliver=True)
    assert {e.metadata.tenant_id for e in store.trajectory(tid).events} == {"acme"}
    assert store.rewards(tid) == []


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

"""Hostile HTTP input against the gateway: schemathesis (positive and negative generation from the
gateway's OpenAPI document, ``openapi_doc.py``) plus hand-made nasties. Zero 5xx; every rejection is a
clear OpenAI-style error object (the OTLP route's body errors are OTLP Status objects, per OTLP/HTTP).

CI runs a few cases per operation; ``bench/reliability/run.py`` runs many more.
"""

from __future__ import annotations

from typing import Any

import openapi_doc
import pytest
from starlette.testclient import TestClient

ADMIN = {"authorization": "Bearer sk-platform-operator"}  # the admin routes here change shared routing


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_only_openai_style_rejections(gateway_app: Any) -> None:
    app, *_ = gateway_app
    stats = openapi_doc.fuzz_gateway(app, max_examples=6, seed=1)
    assert stats.cases > 100
    assert not stats.server_errors, stats.server_errors[:5]
    assert not stats.bad_errors, stats.bad_errors[:5]


def _nasty_requests(tid: str) -> list[tuple[str, str, dict[str, Any]]]:
    chat = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    return [
        ("POST", chat, {"content": b"\xff\xfe\x00garbage"}),
        ("POST", chat, {"content": b'{"model": "stub", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"}),
        ("POST", chat, {"content": b"x" * (70 << 10)}),  # over the 64 KiB body cap of the fixture
        ("POST", chat, {"content": b"{}", "headers": {"content-length": "abc"}}),
        ("POST", chat, {"json": {"model": "stub", "messages": msgs, "n": 10**9}}),
        ("POST", chat, {"json": {"model": "stub", "messages": msgs, "max_tokens": -1}}),
        ("POST", chat, {"content": b'{"model":"stub","messages":[{"role":"user","content":"x"}],"temperature":1e999}'}),
        ("POST", chat, {"json": {"model": "stub", "messages": [{"role": "user", "content": "\u0000\ud7ff" * 100}]}}),
        ("POST", chat, {"json": {"model": "../../etc/passwd", "messages": msgs}}),
        ("POST", chat, {"json": {"model": "stub", "messages": msgs}, "headers": {"x-molt-trajectory": "../" * 100}}),
        ("POST", chat, {"json": {"model": "stub", "messages": msgs, "metadata": {"trajectory_id": "x" * 10_000}}}),
        ("POST", "/v1/completions", {"json": {"model": "stub", "prompt": [[-1, 2**40]]}}),
        ("POST", "/v1/completions", {"json": {"model": "stub", "prompt": "x", "logprobs": 10**6}}),
        ("GET", "/v1/models/..%2F..%2F..%2Fetc%2Fpasswd", {}),
        ("POST", "/v1/molt/trajectories/..%2F..%2Fstore/end", {}),
        ("POST", f"/v1/molt/trajectories/{'a' * 5000}/end", {}),
        ("POST", "/v1/molt/trajectories/%00/end", {}),
        ("POST", "/v1/molt/sessions/..%2F..%2F/end", {"content": b'{"reward": NaN}'}),
        ("POST", "/v1/molt/rewards/trajectory", {"json": {"trajectory_id": "../../x", "value": 1.0}}),
        ("POST", "/v1/molt/rewards/trajectory", {"json": {"trajectory_id": tid, "value": 1.0,
                                                          "reason": "r" * 100_000}}),
        ("POST", "/v1/molt/rewards/call", {"json": {"call_id": "chatcmpl-" + "9" * 150, "value": 1e308}}),
        ("POST", "/v1/molt/admin/adapters", {"json": {"model": "stub", "version": "v2", "path": "/etc/passwd"}}),
        ("POST", "/v1/molt/admin/adapters", {"json": {"model": "stub", "version": "../v", "path": "../../../x"}}),
        ("PUT", "/v1/molt/admin/models/stub/weights", {"json": {"weights": {"stub@base": -1.0}}}),
        ("PUT", "/v1/molt/admin/models/stub/weights", {"json": {"weights": {"nope": 1.0}}}),
        ("DELETE", "/v1/molt/admin/versions/stub@base", {}),
        ("POST", "/v1/molt/admin/versions", {"json": {"model": "stub", "spec": {"version": "v9",
                                                                              "backends": ["../../x"]}}}),
        ("PATCH", "/v1/chat/completions", {}),
        ("GET", "/v1/../../etc/passwd", {}),
    ]


def test_hand_made_hostile_requests_get_clear_4xx_and_the_gateway_stays_up(gateway_app: Any) -> None:
    app, _gw, rec, store = gateway_app
    with TestClient(app) as c:
        ok = c.post("/v1/chat/completions", headers=ADMIN, json={"model": "stub", "messages": [
            {"role": "user", "content": "hi"}]})
        assert ok.status_code == 200
        tid = ok.headers["x-molt-trajectory"]
        seen: list[tuple[str, str, int, str]] = []
        for method, path, kw in _nasty_requests(tid):
            headers = {**ADMIN, **kw.pop("headers", {})}
            r = c.request(method, path, headers=headers, **kw)
            seen.append((method, path, r.status_code, str(kw)[:80]))
            assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
            if r.status_code >= 400:
                assert openapi_doc.is_openai_error(r.json()), (method, path, r.text[:300])
        # accepted as data, by design: NUL/odd text, a path-like or 10 kB trajectory id (cut to 128 chars, only
        # ever a bound SQL value), and the admin's adapter path (a path on the serving host, for the backend)
        accepted = [(m, p, k) for m, p, status, k in seen if status < 400]
        assert len(accepted) <= 6, accepted
        again = c.post("/v1/chat/completions", headers=ADMIN, json={"model": "stub", "messages": [
            {"role": "user", "content": "still up"}]})
        assert again.status_code == 200 and again.json()["choices"][0]["message"]["content"] == "echo: still up"
    assert rec.flush(timeout=30, deliver=True)
    for t in store.trajectory_ids():  # whatever was recorded from hostile input still verifies
        assert store.verify(t).ok

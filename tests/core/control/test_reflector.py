"""The reflector: a model (here a scripted one behind a real HTTP server on loopback, speaking the
OpenAI chat-completions API) writes candidates for a failing cluster; they go through the same gates as
the templates'. Bad answers — invalid JSON, an empty list, personal data, another tenant's data, no
answer in time — are rejected with the reason in the decision log, the cycle completes and the live
version is untouched."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.control.plane import ControlPlane, PlaneSettings
from molt.control.reflector import Reflector, parse_reflection
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, ORDERS, DeskModel, World

FACT = FACTS["refund window"]


class _Scripted(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions`` answering the server's next canned content (after ``delay`` s)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        self.server.headers.append(dict(self.headers))  # type: ignore[attr-defined]
        content, delay = self.server.script.pop(0)  # type: ignore[attr-defined]
        time.sleep(delay)
        out = json.dumps({"id": "r1", "object": "chat.completion", "model": body["model"], "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except OSError:  # the client gave up (the timeout case)
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Any]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    srv.script, srv.requests, srv.headers = [], [], []  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _cands(*items: dict[str, Any]) -> str:
    return json.dumps({"candidates": list(items)})


def _window(store: Store, plane: ControlPlane) -> None:
    """acme: 8 refund-window questions answered wrong, judged by the desk's verifier, never corrected
    (no correction: the templates have no fact to offer); 12 order-status requests answered right.
    A generated id acme's traffic does not hold (``G-7731``) can only be another tenant's, or invented."""
    ids = sorted(ORDERS)
    items = [Traffic("acme", AGENT, f"{FACT.questions[i % 3]} (ticket {i})", "kb_question") for i in range(8)]
    items += [Traffic("acme", AGENT, f"Where is order {ids[i % len(ids)]}? (ticket s{i})", "status") for i in range(12)]
    for t in ("acme", "globex"):
        plane.registry.ensure_base(t, AGENT, base_parts())
    save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), DeskModel())))


def test_parse_reflection_accepts_what_small_models_write_and_refuses_the_rest() -> None:
    good, why = parse_reflection('Sure!\n```json\n{"candidates": [{"kind": "memory", "text": "Fees are 5 EUR."},'
                                 ' {"kind": "bogus"}]}\n```')
    assert why is None and [p.kind for p in good] == ["memory"]
    assert parse_reflection('[{"kind": "tool_rename", "tool": "a_b", "new_name": "c_d"}]')[0][0].new_name == "c_d"
    assert "invalid JSON" in (parse_reflection("I think the agent should remember the fee.")[1] or "")
    assert "empty list" in (parse_reflection('{"candidates": []}')[1] or "")
    assert "schema" in (parse_reflection('{"candidates": [{"kind": "memory"}]}')[1] or "")


def test_reflector_candidate_wins_where_templates_have_none(tmp_path: Path, server: Any) -> None:
    """No correction, so no template memory; the reflector writes the fact (and a rule). The memory, the
    cheaper, is replayed first, fixes the cluster and goes live; the rule is not replayed. The reflector
    saw the cluster: its requests, answers and verdicts, and the agent's tools."""
    server.script.append((_cands({"kind": "harness_rule", "rule": "Every answer must be plain text."},
                                 {"kind": "memory", "text": FACT.text}), 0.0))
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        reflector = Reflector(f"http://127.0.0.1:{server.server_port}/v1", model="reflector-model")
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True), reflector=reflector)
        _window(store, plane)
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "memory_insert", (res.record.reason, res.record.rejected)
        assert res.chosen is not None and res.chosen.payload["source"] == "reflector"
        assert {c["kind"] for c in res.record.candidates} == {"memory_insert"}
        # The rule costs more than the memory, which already fixes the cluster: the cheapest sufficient
        # candidate wins, so the rule is not replayed at all (and says so).
        rules = [c for c in res.record.rejected if c["kind"] == "harness_edit"]  # the reflector's and the template's
        assert {c["payload"].get("source") for c in rules} >= {"reflector"}
        assert all(c["rejected"].startswith("not replayed: memory_insert") and "evidence" not in c for c in rules)
        prompt = server.requests[0]["messages"][1]["content"]
        assert "lookup_order" in prompt and FACT.questions[0] in prompt and "wrong answer" in prompt
        assert reflector.usage["calls"] == 1 and reflector.usage["prompt_tokens"] == 100
        assert any("reflector on" in a for a in res.record.actions)


BAD = [
    ("invalid JSON", "The agent should learn the refund window.", 0.0, "invalid JSON"),
    ("empty list", _cands(), 0.0, "empty list"),
    ("schema", _cands({"kind": "memory", "txt": "x"}), 0.0, "schema"),
    ("another tenant's data", _cands({"kind": "memory", "text": "Order G-7731 of Globex was refunded 45 days ago."}),
     0.0, "tenant:"),
    ("too slow", _cands({"kind": "memory", "text": FACT.text}), 3.0, "no answer within"),
]


def test_bad_reflections_are_rejected_with_the_reason_and_the_live_version_stays(tmp_path: Path,
                                                                               server: Any) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        reflector = Reflector(f"http://127.0.0.1:{server.server_port}/v1", model="reflector-model", timeout_s=1.0)
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True), reflector=reflector)
        _window(store, plane)
        base = plane.registry.live("acme", AGENT)
        for name, content, delay, reason in BAD:
            server.script.append((content, delay))
            res = plane.run_cycle("acme", AGENT)
            assert res.choice == "noop", (name, res.record.reason)
            refl = [r for r in res.record.rejected if reason in str(r.get("rejected"))]
            assert refl, (name, res.record.rejected)
            assert plane.registry.live("acme", AGENT).version_id == base.version_id, name
            assert plane.log.list("acme", AGENT, limit=1)[0].cycle_id == res.record.cycle_id, name


def test_reflection_with_personal_data_is_abstracted_not_lost(tmp_path: Path, server: Any) -> None:
    """The reflector copies a customer's name and email into the memory: the raw text is rejected (logged
    with the entity types), its abstracted form is replayed and goes live without them."""
    server.script.append((_cands({"kind": "memory", "text": f"Tell Maria Lopez (maria.lopez@example.com): "
                                                            f"{FACT.text}"}), 0.0))
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True),
                             reflector=Reflector(f"http://127.0.0.1:{server.server_port}/v1", model="m"))
        _window(store, plane)
        res = plane.run_cycle("acme", AGENT)
        [raw] = [r for r in res.record.rejected if r["kind"] == "reflection"]
        assert "EMAIL_ADDRESS" in raw["rejected"] and "PERSON" in raw["rejected"]
        assert res.choice == "memory_insert", res.record.reason
        text = res.chosen.payload["text"] if res.chosen else ""
        assert "Maria" not in text and "@" not in text and FACT.answer in text


def test_evolve_run_reflector_url(tmp_path: Path, server: Any, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`molt evolve run --reflector-url URL --reflector-model M` asks that endpoint (with the key from
    $MOLT_REFLECTOR_API_KEY) and its candidate is replayed and chosen like a template's; without the flag
    the same window has no candidate to offer (no correction: the templates have no fact)."""
    from molt.cli import run

    monkeypatch.setenv("MOLT_HOME", str(tmp_path))
    monkeypatch.delenv("MOLT_KEYS", raising=False)
    monkeypatch.setenv("MOLT_REFLECTOR_API_KEY", "sk-reflector")
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        _window(store, ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts()))
    cmd = ["evolve", "run", "--tenant", "acme", "--agent", AGENT, "--promote", "--json",
           "--backend", "molt_desk.world:DeskModel", "--live-tools", "molt_desk.world:live_tools"]
    assert run(cmd) == 0
    assert orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])["choice"] == "noop"
    server.script.append((_cands({"kind": "memory", "text": FACT.text}), 0.0))
    assert run([*cmd, "--reflector-url", f"http://127.0.0.1:{server.server_port}/v1",
                "--reflector-model", "big-model", "--reflector-max-tokens", "200"]) == 0
    rec = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["choice"] == "memory_insert", (rec["reason"], rec["rejected"])
    [chosen] = [c for c in rec["candidates"] if c["kind"] == "memory_insert"]
    assert chosen["payload"]["source"] == "reflector"
    [req] = server.requests
    assert req["model"] == "big-model" and req["max_tokens"] == 200
    assert server.headers[0].get("Authorization") == "Bearer sk-reflector"
    assert run([*cmd, "--reflector-url", "llm.example"]) == 2  # not a URL: refused, naming the option
    assert "--reflector-url" in capsys.readouterr().err


def test_plane_settings_name_the_reflector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`molt serve --plane-setting reflector_url=...` builds the plane with PlaneSettings: the settings
    alone give the plane its reflector (the key from the environment, never a setting), or the served
    model with 'served'."""
    monkeypatch.setenv("MOLT_REFLECTOR_API_KEY", "sk-r")
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), settings=PlaneSettings(
            reflector_url="http://127.0.0.1:9/v1", reflector_model="m", reflector_max_tokens=64))
        r = plane.reflector
        assert isinstance(r, Reflector) and r.url == "http://127.0.0.1:9/v1" and r.api_key == "sk-r"
        assert r.model == "m" and r.max_tokens == 64
        served = ControlPlane(store, DeskModel(), settings=PlaneSettings(reflector_url="served")).reflector
        assert served.backend is not None and served.url is None
        assert ControlPlane(store, DeskModel()).reflector is None

"""Issue 41 item 2: personal data planted in every envelope field a client controls — and in the
names, keys and URLs beside the payload, and in Unicode disguises in content — is never stored raw in
an envelope, and ``molt erase --subject`` leaves no raw byte of it anywhere under ``MOLT_HOME``.

Through the real surfaces: ``molt serve`` (chat with ``X-Molt-Trajectory`` / ``X-Molt-Session`` /
``user`` / ``stop`` / tools / an image URL; OTLP spans named after a person; feedback whose dimension
names are personal data), then ``molt trajectories import`` of a Langfuse and a LangSmith export
(trace ids, session ids, observation and run names, ``modelParameters.user``) and of an OTLP file that
names the data subject in each of those trajectories, then ``molt erase --subject``. Every file under
``MOLT_HOME`` (store data and index files, governance tables, spool, status files) is scanned byte by
byte for the planted values as written and in their fullwidth, no-break-space and zero-width forms.

Troubleshooting: a hit in ``store/events.lance/data`` before erasure whose value shows in an
envelope (the test prints the column) means an id, name or key reached the envelope raw (see
``molt.governance.envelope``); a hit after erasure means a payload or an old LanceDB version survived
(``molt.store.erase``).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from molt.gateway.loopback import free_port, wait_healthy

EMAIL, CARD, PHONE, NAME, IBAN = ("zq7781@quortzmail.com", "4111 1111 1111 1111", "(415) 555-0133", "Zelda Quortz",
                                  "DE89 3704 0044 0532 0130 00")
#: One value holding all five, planted in every field (an id field is at most 128 characters).
ALL = f"{NAME} {EMAIL} {CARD} {PHONE} {IBAN}"
SUBJECT = "subject-4711"
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "core" / "interop" / "fixtures"


def _fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else ("\u3000" if c == " " else c) for c in s)


def _disguises(s: str) -> list[str]:
    """``s`` as a reader sees it but a byte match does not: fullwidth, no-break spaces, zero-width spaces."""
    return [_fullwidth(s), s.replace(" ", "\u00a0"), "\u200b".join(s)]


#: What must not be found raw: each value as written, its bare forms, and its disguises.
NEEDLES = sorted({EMAIL, "zq7781", "quortzmail", CARD, CARD.replace(" ", ""), PHONE, "555-0133", "5550133",
                  NAME, "Quortz", IBAN, IBAN.replace(" ", ""), *_disguises(EMAIL), *_disguises(NAME),
                  *_disguises(CARD)})


def raw_hits(root: Path) -> dict[str, list[str]]:
    """``{file: [needles]}`` for every file under ``root`` holding a needle's UTF-8 bytes (the
    Quortz-casefold form too)."""
    hits: dict[str, list[str]] = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            data = p.read_bytes()
            low = data.lower()
            found = [n for n in NEEDLES if n.encode() in data or n.lower().encode() in low]
            if found:
                hits[str(p.relative_to(root))] = found
    return hits


def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    wait_healthy(url, proc, timeout_s=120)


def _span(trace: str, span: str, name: str, attrs: dict[str, str]) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span, "name": name, "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}


def _export(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}


def _subject_span(i: int, trajectory_id: str) -> dict[str, Any]:
    """An OTLP span carrying a Molt event that names the data subject, in ``trajectory_id``."""
    ev = {"event_id": f"00000000-0000-4000-8000-{i:012d}", "trajectory_id": trajectory_id, "kind": "user_message",
          "timestamp": "2026-01-01T00:00:00Z", "action": {"type": "user_message", "content": "I consent"},
          "metadata": {"consent": {"subject_id": SUBJECT, "training": True}}}
    return _span(f"{i:032x}", f"{i:016x}", "user", {"molt.event": json.dumps(ev), "molt.trajectory_id": trajectory_id,
                                                     "molt.kind": "user_message"})


def _langfuse(path: Path) -> str:
    data = json.loads((FIXTURES / "langfuse_traces.json").read_text())
    t = copy.deepcopy(data["data"][0])
    t["id"] = f"lf {ALL}"
    t["sessionId"] = f"lf-session {ALL}"
    t["userId"] = EMAIL
    t["name"] = f"support {NAME}"
    for o in t["observations"]:
        o["traceId"] = t["id"]
        o["name"] = f"{o.get('name')} {ALL}"
        if o.get("type") == "GENERATION":
            o["modelParameters"] = {"temperature": 0, "user": EMAIL, "stop": [CARD, IBAN]}
    data["data"] = [t]
    path.write_text(json.dumps(data))
    return str(t["id"])


def _langsmith(path: Path) -> str:
    data = json.loads((FIXTURES / "langsmith_runs.json").read_text())
    trace = data["runs"][0]["trace_id"]
    runs = [r for r in data["runs"] if r.get("trace_id") == trace]
    for r in runs:
        r["name"] = f"{r['name']} {ALL}"
        r["extra"] = {**(r.get("extra") or {}), "invocation_params": {"model": "gpt-4o-mini", "user": EMAIL,
                                                                       "stop": [PHONE]}}
    data = {"runs": runs}
    path.write_text(json.dumps(data))
    return str(trace)


def _molt(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    got = subprocess.run([sys.executable, "-m", "molt.cli", *args], env=env, capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0, (args, got.stdout[-2000:], got.stderr[-3000:])
    return got


def _envelopes(home: Path) -> list[str]:
    """Every stored event's envelope and index columns, and every reward and governance row, as text."""
    from molt.governance.records import ensure_governance_tables
    from molt.store import Store

    store = Store.open(home / "store", auto_compact=False)
    ensure_governance_tables(store)
    try:
        out = []
        for b in store.iter_events():
            for row in b.to_pylist():
                row.pop("payload")
                row.pop("payload_salt")
                out.append(json.dumps({k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in row.items()},
                                      ensure_ascii=False))
        for name in ("rewards", "governance", "quarantine"):
            out += [str(r) for r in store.table(name).search().limit(None).to_arrow().to_pylist()]
        return out
    finally:
        store.close()


@pytest.mark.slow
def test_no_planted_value_in_any_envelope_and_none_left_after_erasure(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "MOLT_HOME": str(home), "PYTHONWARNINGS": "ignore"}
    env.pop("MOLT_PSEUDONYM_KEY", None)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "molt.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    chat_tid = f"traj {ALL}"
    image = (f"https://img.example.com/u/{NAME.replace(' ', '-')}/{EMAIL}/{CARD.replace(' ', '')}"
             f"/avatar.png?phone={PHONE}&iban={IBAN.replace(' ', '')}")
    content = "Please help: " + " / ".join(_disguises(EMAIL) + _disguises(NAME) + _disguises(CARD))
    try:
        _wait_up(url, proc)
        with httpx.Client(base_url=url, timeout=60) as c:
            for turn in range(2):
                r = c.post("/v1/chat/completions", headers={"x-molt-trajectory": chat_tid,
                                                            "x-molt-session": f"session {ALL}"},
                           json={"model": "stub", "user": ALL, "stop": [NAME, IBAN, CARD],
                                 "tools": [{"type": "function", "function": {
                                     "name": f"notify_{NAME.replace(' ', '_')}", "parameters": {"type": "object"}}}],
                                 "messages": [{"role": "user", "name": NAME.replace(" ", "_"), "content": [
                                     {"type": "text", "text": f"{content} (turn {turn})"},
                                     {"type": "image_url", "image_url": {"url": image}}]}]})
                assert r.status_code == 200, r.text
                assert r.headers["x-molt-trajectory"] == chat_tid  # the client keeps its own id
            # feedback later, with the client's id: it must reach the same (governed) trajectory
            r = c.post("/v1/molt/rewards/trajectory", json={"trajectory_id": chat_tid, "value": 1.0,
                                                            "dimensions": {NAME: 1.0, EMAIL: 0.5, IBAN: 0.2}})
            assert r.status_code == 200, r.text
            spans = [_span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", f"chat {ALL}",
                           {"gen_ai.operation.name": "chat", "gen_ai.request.model": "stub",
                            "gen_ai.conversation.id": f"conv {ALL}"}),
                     _span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b8", f"execute_tool lookup_{EMAIL}",
                           {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"lookup {NAME}"})]
            assert c.post("/v1/traces", json=_export(spans)).status_code == 200
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-3000:]

    lf_tid = _langfuse(tmp_path / "langfuse.json")
    ls_tid = _langsmith(tmp_path / "langsmith.json")
    _molt(env, "trajectories", "import", str(tmp_path / "langfuse.json"), "--format", "langfuse")
    _molt(env, "trajectories", "import", str(tmp_path / "langsmith.json"), "--format", "langsmith")
    # the data subject, named in each of those trajectories (by the ids their clients used)
    subject = [_subject_span(i, t) for i, t in enumerate(
        [chat_tid, "4bf92f3577b34da6a3ce929d0e0e4736", lf_tid, ls_tid], start=1)]
    (tmp_path / "subject.jsonl").write_text(json.dumps(_export(subject)) + "\n")
    _molt(env, "trajectories", "import", str(tmp_path / "subject.jsonl"), "--format", "otlp")

    # before erasure: no envelope, index column, reward, decision or quarantined record holds a value
    rows = _envelopes(home)
    assert len(rows) > 10
    leaked = [(n, r[:400]) for r in rows for n in NEEDLES if n in r or n.lower() in r.lower()]
    assert leaked == [], leaked[:5]
    before = raw_hits(home)
    governed = ("store/events.lance/data/", "spool/")  # where payloads live: what erasure nulls
    assert all(f.startswith(governed) for f in before), before
    print(f"raw hits before erasure: {sum(map(len, before.values()))} in {len(before)} payload files")

    # lookups and feedback by the client's own id reach the governed trajectory
    _molt(env, "reward", chat_tid, "--value", "0.5", "--dim", f"{NAME}=1", "--operator")
    shown = json.loads(_molt(env, "trajectories", "show", chat_tid, "--json").stdout)
    assert shown["trajectory_id"] != chat_tid and shown["trajectory_id"].startswith("idh-")
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds.count("model_call") == 2 and "user_message" in kinds, kinds  # both turns and the subject event
    dims = sorted(sorted(r["dimensions"]) for r in shown["rewards"])
    assert dims == [["<EMAIL_ADDRESS_1>", "<IBAN_CODE_1>", "<PERSON_1>"], ["<PERSON_1>"]], shown["rewards"]
    for tid in (lf_tid, ls_tid):
        assert json.loads(_molt(env, "trajectories", "show", tid, "--json").stdout)["events"]

    assert not [n for r in _envelopes(home) for n in NEEDLES if n in r or n.lower() in r.lower()]

    out = _molt(env, "erase", "--subject", SUBJECT, "--operator")
    said = out.stdout + out.stderr
    assert "4 trajectories" in said and ", 0 failed" in said, said  # the subject's four, each chain still verifies
    after = raw_hits(home)
    assert after == {}, after

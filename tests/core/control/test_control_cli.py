"""`molt versions` and `molt evolve` end to end on a MOLT_HOME store, with the key-file access rules."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from molt.cli import run
from molt.control.log import DecisionLog
from molt.control.plane import ControlPlane
from molt.control.versions import VersionRegistry
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MOLT_HOME", str(tmp_path))
    monkeypatch.delenv("MOLT_KEYS", raising=False)
    monkeypatch.delenv("MOLT_API_KEY", raising=False)
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools())
        plane.registry.ensure_base("acme", AGENT, base_parts())
        plane.registry.ensure_base("globex", AGENT, base_parts())
        f = FACTS["warranty period"]
        items = [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", f.text)
                 for i in range(8)]
        items += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket {i})", "status") for i in range(12)]
        save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), plane.backend)))
    return tmp_path


def test_evolve_then_versions_roundtrip(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["evolve", "run", "--tenant", "acme", "--agent", AGENT, "--promote", "--json",
                "--backend", "molt_desk.world:DeskModel", "--live-tools", "molt_desk.world:live_tools"]) == 0
    rec = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["choice"] == "memory_insert" and rec["applied_version"] == f"{AGENT}@acme:v2"

    assert run(["versions", "ls", "--tenant", "acme", "--json"]) == 0
    rows = [orjson.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [(r["version_id"], r["status"]) for r in rows] == [(f"{AGENT}@acme:v2", "live"),
                                                               (f"{AGENT}@acme:v1", "previous")]
    assert run(["versions", "diff", f"{AGENT}@acme:v1", f"{AGENT}@acme:v2"]) == 0
    assert "memory_ids" in capsys.readouterr().out

    assert run(["versions", "show", f"{AGENT}@acme:v1"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert shown["parts"]["memory_ids"] == [] and shown["status"] == "previous" and shown["lineage"] == []
    # the plane recorded the memory's lineage: its cluster's corrections, from several hands (counts only)
    assert run(["versions", "show", f"{AGENT}@acme:v2"]) == 0
    [lin] = orjson.loads(capsys.readouterr().out)["lineage"]
    assert (lin["kind"], lin["version"], lin["tenants"]) == ("memory", f"{AGENT}@acme:v2", ["acme"])
    assert lin["trajectories"] >= 3

    assert run(["versions", "rollback", "--tenant", "acme", "--agent", AGENT]) == 0
    assert f"{AGENT}@acme:v1 is live" in capsys.readouterr().out
    with Store.open(home / "store", auto_compact=False) as store:
        reg = VersionRegistry(store)
        live = reg.live("acme", AGENT)
        assert live is not None and live.parts == base_parts() and live.parts_bytes == base_parts().canonical()
        assert DecisionLog(store).list("acme")[0].choice == "memory_insert"

    assert run(["evolve", "log", "--tenant", "acme", "--json"]) == 0
    [logged] = [orjson.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert logged["choice"] == "memory_insert" and logged["candidates"]
    assert run(["versions", "promote", "nope@acme:v9"]) == 2
    assert "No policy version" in capsys.readouterr().err


def test_keys_scope_the_commands(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from molt.governance.access import hash_key

    (home / "keys.toml").write_text(
        f'[[keys]]\ntenant = "acme"\nrole = "reader"\nkey_sha256 = "{hash_key("sk-acme-read")}"\n'
        f'[[keys]]\ntenant = "globex"\nrole = "admin"\nkey_sha256 = "{hash_key("sk-globex-admin")}"\n')
    assert run(["versions", "ls", "--json"]) == 2                       # a key file exists: a key is needed
    capsys.readouterr()
    assert run(["versions", "ls", "--json", "--api-key", "sk-acme-read"]) == 0
    rows = [orjson.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert {r["tenant_id"] for r in rows} == {"acme"}
    assert run(["versions", "show", f"{AGENT}@globex:v1", "--api-key", "sk-acme-read"]) == 2
    assert run(["versions", "rollback", "--agent", AGENT, "--api-key", "sk-acme-read"]) == 2   # reader: no admin
    assert run(["evolve", "run", "--tenant", "acme", "--api-key", "sk-globex-admin"]) == 2     # other tenant
    err = capsys.readouterr().err
    assert "cannot act on 'acme'" in err


@pytest.mark.slow
def test_evolve_run_reaches_a_gateway_captured_agent_with_no_registration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """An agent that joined through the gateway only — no @molt.replayable, no policy version, no
    Python registration, no task label — is evolved by `molt evolve run`: replayed from its recording,
    judged by the desk's checker (registered for the agent), its users' correction becomes a memory."""
    from molt.replay import AGENTS
    from molt_desk.gateway import GatewayDesk, gateway_agent, register_checkers

    monkeypatch.setenv("MOLT_HOME", str(tmp_path))
    monkeypatch.delenv("MOLT_KEYS", raising=False)
    agent = gateway_agent(AGENT)
    f = FACTS["warranty period"]
    with Store.open(tmp_path / "store", auto_compact=False) as store:
        desk = GatewayDesk(store, VersionRegistry(store), DeskModel(), {"acme"}, tmp_path / "spool")
        try:
            for i in range(20):
                q, task = ((f"{f.questions[i % 3]} (ticket {i})", "kb_question") if i < 8
                           else (f"Where is order A-{1000 + i}? (ticket {i})", "status"))
                tid, answer = desk.ask("acme", AGENT, q, World())
                if not desk.check("acme", tid, q, task, answer):
                    desk.reward("acme", tid, 0.0, "user_correction", f.text)
            desk.flush()
        finally:
            desk.close()
        assert agent not in AGENTS and VersionRegistry(store).live("acme", agent) is None
    register_checkers({AGENT})
    assert run(["evolve", "run", "--tenant", "acme", "--agent", agent, "--promote", "--json",
                "--backend", "molt_desk.world:DeskModel"]) == 0
    rec = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["choice"] == "memory_insert" and rec["applied_version"] == f"{agent}@acme:v2", rec["reason"]
    [mem] = [c for c in rec["candidates"] if c["kind"] == "memory_insert"]
    # The users' correction, abstracted through the plane's redactor: the fact stays (its NER may read
    # "Acme" as a name and drop it from the memory).
    assert f.answer in mem["payload"]["text"]
    assert "@molt.replayable" not in mem["evidence"]["replay"]["mode"]


def test_evolve_run_on_an_agent_known_only_by_its_header(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer's path: a fresh MOLT_HOME, one agent's calls through the gateway with only
    X-Molt-Agent set, its users' corrections through `molt reward`, then `molt evolve run` — which
    adopts the agent (base version from the served model) and prints the decision with its reasons,
    each candidate's replay evidence included."""
    import openai

    from molt.backends import StubBackend
    from molt.capture import Recorder
    from molt.gateway import Gateway, create_app
    from molt.gateway.loopback import ServerThread

    monkeypatch.setenv("MOLT_HOME", str(tmp_path))
    monkeypatch.delenv("MOLT_KEYS", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    store = Store.open(tmp_path / "store", auto_compact=False)
    rec = Recorder(store, spool_dir=tmp_path / "spool")  # governed, as `molt serve` records
    gw = Gateway([StubBackend()], recorder=rec, store=store)
    with ServerThread(create_app(gw)) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-local", max_retries=0)
        for i in range(10):  # enough that all of them failing clears the evidence bar (alpha 1 %)
            client.chat.completions.create(model="stub", extra_headers={"X-Molt-Agent": "my-agent"},
                                           messages=[{"role": "user", "content": f"How long do refunds take? ({i})"}])
    assert rec.close()
    store.close()
    capsys.readouterr()
    assert run(["trajectories", "ls", "--agent", "my-agent", "--json"]) == 0
    tids = [orjson.loads(x)["trajectory_id"] for x in capsys.readouterr().out.splitlines()]
    assert len(tids) == 10
    for tid in tids:
        assert run(["reward", tid, "-v", "0", "--source", "user_correction", "--reason",
                    "Refunds take 45 days."]) == 0
    capsys.readouterr()
    assert run(["evolve", "run", "--tenant", "default", "--agent", "my-agent", "--backend", "stub"]) == 0
    out, err = capsys.readouterr()
    assert "create one first" not in out + err and "error" not in err, err
    first = out.splitlines()[0]
    assert first.startswith("default/my-agent: ") and " — " in first, out
    choice, why = first.removeprefix("default/my-agent: ").split(" — ", 1)
    assert choice and len(why) > 20, out
    # the users' correction was tried as a memory and replayed: its evidence is printed with it
    assert "candidate memory_insert" in out and "on replay" in out and "Refunds take 45 days." in out, out
    assert run(["evolve", "log", "--tenant", "default"]) == 0
    log_out = capsys.readouterr().out
    assert why in log_out and "candidate memory_insert" in log_out


def test_evolve_run_takes_the_serve_flags(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`molt evolve run` accepts what `molt serve` does for the plane: --plane-setting reaches the cycle
    (the canary's share), --agent-verifier is registered for the replays, --json prints the decision."""
    from molt.replay.verifiers import AGENT_VERIFIERS

    try:
        assert run(["evolve", "run", "--tenant", "acme", "--agent", AGENT, "--json",
                    "--plane-setting", "canary_weight=0.35", "--agent-verifier", f"{AGENT}=contains:days",
                    "--backend", "molt_desk.world:DeskModel", "--live-tools", "molt_desk.world:live_tools"]) == 0
        rec = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert rec["choice"] == "memory_insert", rec["reason"]
        assert any(a.endswith("at 35%") for a in rec["actions"]), rec["actions"]
        assert AGENT in AGENT_VERIFIERS.names()
    finally:
        if AGENT in AGENT_VERIFIERS.names():
            AGENT_VERIFIERS.unregister(AGENT)
    for bad in (["--plane-setting", "no_such_setting=1"], ["--plane-setting", "canary_weight"],
                ["--agent-verifier", "x=nomodule_here:f"]):
        assert run(["evolve", "run", "--tenant", "acme", "--agent", AGENT, *bad,
                    "--backend", "molt_desk.world:DeskModel"]) == 2, bad


def test_approval_mode_from_the_cli(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`molt evolve run --approval context` proposes; `molt versions proposals|approve|reject` decide."""
    common = ["--backend", "molt_desk.world:DeskModel", "--live-tools", "molt_desk.world:live_tools"]
    assert run(["evolve", "run", "--tenant", "acme", "--agent", AGENT, "--approval", "context", "--json",
                *common]) == 0
    rec = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    vid = rec["applied_version"]
    assert rec["choice"] == "memory_insert" and any("proposed" in a for a in rec["actions"])
    assert run(["versions", "proposals", "--tenant", "acme"]) == 0
    out = capsys.readouterr().out
    assert vid in out and "replay with DeskModel" not in out and "desk-model" in out and "95% interval" in out
    assert FACTS["warranty period"].text.split()[-1].rstrip(".") in out  # the memory's text, in the diff
    assert run(["versions", "reject", vid]) == 2                        # a rejection needs a comment
    assert "needs a comment" in capsys.readouterr().err
    assert run(["versions", "approve", vid, "--weight", "0.3"]) == 0
    assert "canary at 30%" in capsys.readouterr().out
    assert run(["versions", "proposals", "--tenant", "acme"]) == 0
    assert "No change is waiting" in capsys.readouterr().out
    assert run(["evolve", "run", "--tenant", "acme", "--approval", "sometimes", *common]) == 2
    assert "--approval" in capsys.readouterr().err

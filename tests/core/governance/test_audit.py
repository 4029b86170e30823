"""Audit: every governance decision is queryable by the tenant's admins, and only by them.

Troubleshooting: an entry missing here usually means the decision was not written with its event
(GovernedSink) or the audit reads a table outside the tenant view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.cli import run as molt
from molt.errors import GovernanceError, PermissionDenied
from molt.governance import (
    Audit,
    GovernancePipeline,
    GovernancePolicy,
    GovernedSink,
    Principal,
    Role,
    erase_subject,
)
from molt.store import Store

POLICY = GovernancePolicy.model_validate({
    "unknown_tenants": "quarantine",
    "tenants": {"acme": {"training": {"opt_in": True, "require_consent": False}}, "globex": {}},
})


def _ev(tid: str, text: str, tenant: str | None = "acme", **md: Any) -> Event:
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, metadata={"tenant_id": tenant, **md},
                 action=UserMessage(content=text))


@pytest.fixture
def recorded(store: Store, molt_home: Path) -> dict[str, Any]:
    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=GovernancePipeline(POLICY))
    evs = [_ev("t1", "mail ana@example.org please", consent={"subject_id": "s-1"}), _ev("t1", "thanks"),
           _ev("t2", "x" * 2_000_000), _ev("g1", "globex says hi to bob@example.org", tenant="globex"),
           _ev("u1", "who am I", tenant="umbrella")]
    for ev in evs:
        rec.record(ev)
    assert rec.flush(deliver=True)
    rec.close()
    return {"events": evs}


def test_admins_see_every_kind_of_decision_of_their_tenant_only(store: Store, recorded: dict[str, Any]) -> None:
    erase_subject(store, "s-1", tenant_id="acme", actor="acme/admin")
    audit = Audit(store, Principal(tenant_id="acme", role=Role.ADMIN))
    entries = audit.entries(limit=None)
    kinds = [e.kind for e in entries]
    assert kinds.count("redaction") == 1 and kinds.count("eligibility") == 2
    assert kinds.count("quarantine") == 1 and kinds.count("erasure") == 1
    assert {e.tenant_id for e in entries} == {"acme"}
    assert all("globex" not in e.summary and "bob@" not in e.summary for e in entries)
    red = next(e for e in entries if e.kind == "redaction")
    assert red.summary == "redacted EMAIL_ADDRESS×1" and red.detail["fields"] == ["action.content"]
    assert "ana@example.org" not in orjson.dumps([e.as_dict() for e in entries]).decode()
    q = next(e for e in entries if e.kind == "quarantine")
    assert "max_event_bytes" in q.summary and q.event_id == recorded["events"][2].event_id
    er = next(e for e in entries if e.kind == "erasure")
    assert er.actor == "acme/admin" and "subject erasure erased: 1 trajectories" in er.summary
    elig = audit.entries(kinds=["eligibility"], trajectory_id="t1")
    assert len(elig) == 2 and all(e.summary.startswith("eligible; classification internal") for e in elig)
    d = audit.decision(recorded["events"][0].event_id)
    assert d is not None and d.redaction is not None and d.redaction.counts == {"EMAIL_ADDRESS": 1}
    assert audit.decision(recorded["events"][3].event_id) is None  # globex's event: not visible here
    assert audit.entries(kinds=["quarantine"], event_id=recorded["events"][2].event_id)[0].kind == "quarantine"

    globex = Audit(store, Principal(tenant_id="globex", role=Role.ADMIN)).entries(limit=None)
    assert {e.kind for e in globex} == {"redaction", "eligibility"}
    assert "tenant: the tenant has not opted in" in next(e for e in globex if e.kind == "eligibility").summary


def test_only_admins_may_audit(store: Store, recorded: dict[str, Any]) -> None:
    for role in (Role.READER, Role.TRAINER, Role.AGENT_WRITER):
        with pytest.raises(PermissionDenied):
            Audit(store, Principal(tenant_id="acme", role=role))
    with pytest.raises(GovernanceError, match="Unknown audit kinds"):
        Audit(store, Principal(tenant_id="acme", role=Role.ADMIN)).entries(kinds=["gossip"])


def test_audit_cli(store: Store, molt_home: Path, recorded: dict[str, Any], capsys: Any) -> None:
    (molt_home / "keys.toml").write_text('[[keys]]\nkey = "adm"\ntenant = "acme"\nrole = "admin"\n'
                                         '[[keys]]\nkey = "rd"\ntenant = "acme"\nrole = "reader"\n')
    assert molt(["audit", "--api-key", "rd"]) == 2
    assert "may not" in capsys.readouterr().err
    assert molt(["audit", "--api-key", "nope"]) == 2
    assert "not known" in capsys.readouterr().err
    assert molt(["audit", "--api-key", "adm", "--kind", "quarantine", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert orjson.loads(line)["kind"] == "quarantine"
    assert molt(["audit", "--api-key", "adm", "--tenant", "globex"]) == 2
    assert molt(["audit", "--operator", "--tenant", "globex", "--kind", "redaction"]) == 0
    assert "EMAIL_ADDRESS×1" in capsys.readouterr().out
    assert molt(["audit", "--api-key", "adm", "--limit", "3"]) == 0
    assert "audit of tenant acme" in capsys.readouterr().out

"""Retention: per-tenant, per-classification windows, consent windows, quarantine expiry, the CLI.

Troubleshooting: events are recorded with timestamps in the past; if nothing expires, check that the
retention stage tagged ``expires_at`` and that the job's SQL timestamp literal matches the column's
time zone (UTC).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from molt.atdp import Event, EventKind, UserMessage
from molt.capture import Recorder
from molt.cli import run as molt
from molt.governance import GovernancePipeline, GovernedSink, load_policy_file, run_retention
from molt.store import Store

NOW = datetime.now(UTC)
POLICY = {  # redaction off: the markers must reach the store verbatim (redaction is tested elsewhere)
    "defaults": {"retention": {"days": {"public": 730, "internal": 365, "confidential": 90, "restricted": 30},
                               "quarantine_days": 30}, "redaction": {"enabled": False}},
    "tenants": {"acme": {}, "globex": {"retention": {"action": "delete", "days": {
        "public": 10, "internal": 5, "confidential": 5, "restricted": 1}}}},
}


def grep(root: Path, needle: bytes) -> bool:
    return any(needle in (Path(d) / f).read_bytes() for d, _, fs in os.walk(root) for f in fs)


def _ev(tid: str, text: str, age_days: float, tenant: str = "acme", **md: Any) -> Event:
    return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, timestamp=NOW - timedelta(days=age_days),
                 metadata={"tenant_id": tenant, **md}, action=UserMessage(content=text))


@pytest.fixture
def filled(store: Store, molt_home: Path, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "governance.yaml"
    path.write_text(yaml.safe_dump(POLICY))
    policy = load_policy_file(path)
    rec = Recorder(GovernedSink(store), spool_dir=molt_home / "spool", pipeline=GovernancePipeline(policy))
    evs = [
        _ev("a1", "old internal note keep-me-internal", 40),                              # 365 d: kept
        _ev("a1", "expire-me-restricted", 40, classification="restricted"),               # restricted 30 d
        _ev("a1", "recent keep-me-restricted", 3, classification="restricted"),           # 30 d: kept
        _ev("a2", "confidential expire-me-confidential", 100, classification="confidential"),
        _ev("a3", "short consent expire-me-consent", 10, consent={"retention_days": 7}),  # consent 7 d
        _ev("g1", "globex expire-me-globex", 6, tenant="globex"),                         # 5 d, delete
        _ev("g1", "globex keep-me-globex", 1, tenant="globex"),
    ]
    for ev in evs:
        rec.record(ev)
    assert rec.flush(deliver=True)
    store.quarantine("old bad record", stage="test", tenant_id="acme", record=b"quarantined-bytes")
    return {"policy": policy, "path": path, "rec": rec, "events": evs}


def test_retention_expires_by_class_consent_and_tenant_action(store: Store, molt_home: Path,
                                                                 filled: dict[str, Any]) -> None:
    policy, rec = filled["policy"], filled["rec"]
    dry = run_retention(store, policy, now=NOW, dry_run=True)
    by = {r.tenant_id: r for r in dry}
    assert by["acme"].expired["restricted"] == 1 and by["acme"].expired["confidential"] == 1
    assert by["acme"].consent_expired == 1 and by["globex"].expired["internal"] == 1
    assert store.count("events", "payload IS NULL") == 0  # a dry run changes nothing

    reports = run_retention(store, policy, now=NOW, spool_dirs=[molt_home / "spool"], actor="test")
    by = {r.tenant_id: r for r in reports}
    assert by["acme"].events == 3 and by["globex"].events == 1 and by["acme"].quarantine_deleted == 0
    assert by["acme"].spool_frames == 3 and by["globex"].spool_frames == 1
    root = Path(store.uri)
    for gone in (b"expire-me-restricted", b"expire-me-confidential", b"expire-me-consent", b"expire-me-globex"):
        assert not grep(root, gone) and not grep(molt_home / "spool", gone), gone
    for kept in (b"keep-me-internal", b"keep-me-restricted", b"keep-me-globex"):
        assert grep(root, kept), kept
    for tid in ("a1", "a2", "a3"):
        assert store.verify(tid).ok  # payloads nulled, envelopes kept: chains verify
    assert store.verify("a1").erased_payloads == 1
    assert store.count("events", "tenant_id = 'globex'") == 1  # the delete action removed the row
    assert store.count("governance", "tenant_id = 'globex'") == 1
    audit = store.table("audit").search().where("kind = 'retention'").limit(None).to_arrow().to_pylist()
    assert {a["tenant_id"] for a in audit} == {"acme", "globex"} and all(a["actor"] == "test" for a in audit)

    # a second run finds nothing new; a run 31 days on expires the quarantine record too
    assert sum(r.events for r in run_retention(store, policy, now=NOW)) == 0
    later = run_retention(store, policy, now=NOW + timedelta(days=31))
    assert {r.tenant_id: r for r in later}["acme"].quarantine_deleted == 1
    assert not grep(root, b"quarantined-bytes")
    rec.close()


def test_retention_cli(store: Store, molt_home: Path, filled: dict[str, Any], capsys: Any) -> None:
    filled["rec"].close()
    keys = molt_home / "keys.toml"
    keys.write_text('[[keys]]\nkey = "adm-acme"\ntenant = "acme"\nrole = "admin"\n'
                    '[[keys]]\nkey = "tr-acme"\ntenant = "acme"\nrole = "trainer"\n')
    path = str(filled["path"])
    assert molt(["retention", "run", "--policy", path, "--api-key", "tr-acme"]) == 2
    assert molt(["retention", "run", "--policy", path]) == 2
    assert "API key" in capsys.readouterr().err
    assert molt(["retention", "run", "--policy", path, "--api-key", "adm-acme", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "acme: retention would expire 3 events" in out and "globex" not in out
    assert molt(["retention", "run", "--policy", path, "--operator", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and '"events":3' in lines[0] and '"events":1' in lines[1]
    assert molt(["policy", "check", path]) == 0
    assert "globex" in capsys.readouterr().out
    bad = molt_home / "bad.yaml"
    bad.write_text("defaults: {retention: {action: shred}}\n")
    assert molt(["retention", "run", "--policy", str(bad), "--operator"]) == 2
    assert "defaults.retention.action" in capsys.readouterr().err

"""Approval mode: a context change becomes a proposed version that is not routed, holds its evidence,
starts its canary when approved and leaves the live version untouched when rejected — and a rejected
change is not proposed again for the same cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from molt.control.approval import Proposals, fingerprint, needs_approval
from molt.control.plane import ControlPlane, PlaneSettings
from molt.errors import InterventionError, NotFound
from molt.governance.access import Principal, Role
from molt.governance.audit import Audit
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World


def _plane(store: Store, approval: str) -> ControlPlane:
    plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(), base_parts=base_parts(),
                         settings=PlaneSettings(approval=approval))  # type: ignore[arg-type]
    plane.registry.ensure_base("acme", AGENT, base_parts())
    return plane


def _record(store: Store, plane: ControlPlane, n: int = 8) -> None:
    f = FACTS["refund window"]
    items = [Traffic("acme", AGENT, f"{f.questions[i % 3]} (ticket {i})", "kb_question", f.text) for i in range(n)]
    items += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket {i})", "status") for i in range(12)]
    save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, World(), plane.backend)))


def test_which_changes_wait_for_an_operator() -> None:
    assert not needs_approval("auto", "memory_insert") and not needs_approval("auto", "weight_update")
    assert needs_approval("context", "memory_insert") and needs_approval("context", "tool_schema_edit")
    assert not needs_approval("context", "weight_update")
    assert needs_approval("all", "weight_update") and needs_approval("all", "harness_edit")
    assert not needs_approval("all", "rollback")  # restoring what served before never waits
    with pytest.raises(InterventionError, match="approval must be one of"):
        needs_approval("sometimes", "memory_insert")
    # the same change, whatever its support count or spacing
    assert fingerprint("memory_insert", {"text": "Refunds  within 30 days.", "support": 3}) == \
        fingerprint("memory_insert", {"text": "refunds within 30 days.", "support": 5})
    assert fingerprint("memory_insert", {"text": "Refunds within 30 days."}) != \
        fingerprint("memory_insert", {"text": "Refunds within 45 days."})


def test_a_context_change_is_proposed_with_its_evidence_and_not_routed(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, "context")
        base = plane.registry.live("acme", AGENT)
        _record(store, plane)
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "memory_insert", res.record.reason
        v = res.version
        assert v is not None and v.status == "proposed"
        assert plane.registry.canaries("acme", AGENT) == []  # not routed
        assert plane.registry.live("acme", AGENT).version_id == base.version_id
        assert any("proposed" in a and "approval=context" in a for a in res.record.actions)
        [p] = Proposals(store).list("acme")
        ev = p.evidence
        assert p.version.version_id == v.version_id and p.kind == "memory_insert"
        assert FACTS["refund window"].text.split()[0].lower() in ev["candidate"]["payload"]["text"].lower()
        replay = ev["candidate"]["evidence"]["replay"]
        assert replay["model"] == plane.backend.model and replay["backend"] == "DeskModel"
        assert replay["success_delta_ci"] and replay["cases"] and {c["status"] for c in replay["cases"]} <= {
            "ok", "unknown", "error", "invalid"}
        assert ev["cluster"]["size"] >= 4 and ev["cluster"]["key"] == p.cluster
        assert [d[0] for d in ev["diff"]] == ["memory_ids"]
        assert ev["decision"]["cycle_id"] == res.record.cycle_id

        # While it waits, the plane makes no other change for this agent.
        again = plane.run_cycle("acme", AGENT)
        assert again.choice == "noop" and v.version_id in again.record.reason and "operator" in again.record.reason
        assert len(Proposals(store).list("acme")) == 1


def test_approval_starts_the_canary(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, "all")
        _record(store, plane)
        v = plane.run_cycle("acme", AGENT).version
        assert v is not None and v.status == "proposed"
        book = Proposals(store)
        with pytest.raises(NotFound):  # another tenant cannot reach it
            book.approve(v.version_id, tenant_id="globex", actor="console:mallory")
        got = book.approve(v.version_id, tenant_id="acme", actor="console:alice", weight=0.5)
        assert got.status == "canary" and got.canary_weight == 0.5
        assert [c.version_id for c in plane.registry.canaries("acme", AGENT)] == [v.version_id]
        assert book.list("acme") == [] and book.list("acme", status=None)[0].decision["action"] == "approve"
        with pytest.raises(InterventionError, match="not waiting"):
            book.reject(v.version_id, tenant_id="acme", actor="console:alice", comment="too late")
        admin = Principal(tenant_id="acme", role=Role.ADMIN)
        [row] = Audit(store, admin).entries(kinds=["approval"])
        assert row.actor == "console:alice" and "approved" in row.summary and row.detail["action"] == "approve"


def test_rejection_keeps_live_and_the_same_change_is_not_proposed_again(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, "context")
        base = plane.registry.live("acme", AGENT)
        _record(store, plane)
        v = plane.run_cycle("acme", AGENT).version
        assert v is not None
        book = Proposals(store)
        with pytest.raises(InterventionError, match="needs a comment"):
            book.reject(v.version_id, tenant_id="acme", actor="cli", comment="  ")
        got = book.reject(v.version_id, tenant_id="acme", actor="cli", comment="our refund window differs by region")
        assert got.status == "rejected"
        assert plane.registry.live("acme", AGENT).version_id == base.version_id
        assert plane.registry.canaries("acme", AGENT) == []
        _record(store, plane, n=4)  # the same failures keep coming
        nxt = plane.run_cycle("acme", AGENT)
        assert nxt.choice != "memory_insert", nxt.record.reason
        refused = [r for r in nxt.record.rejected if r.get("kind") == "memory_insert"]
        assert refused and "rejected for this cluster before" in refused[0]["rejected"]
        assert "differs by region" in refused[0]["rejected"]
        assert book.list("acme") == []


def test_auto_mode_canaries_as_before(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, "auto")
        _record(store, plane)
        res = plane.run_cycle("acme", AGENT)
        assert res.version is not None and res.version.status == "canary"
        assert Proposals(store).list("acme", status=None) == []


def test_bad_settings_are_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        PlaneSettings(approval="maybe")  # type: ignore[arg-type]




def test_an_adapter_trained_by_a_trainer_service_is_proposed_under_approval_all(tmp_path: Path) -> None:
    """`molt-trainer serve --plane-requests` trains outside the cycle; under approval `all` the version with
    its adapter waits for an operator instead of going to canary."""
    import threading

    from molt.control.diagnose import Candidate
    from molt.control.versions import ModelPart
    from molt.control.weight_queue import WeightQueue, serve_requests

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, "all")
        queue = WeightQueue(store)
        plane.trainer = queue
        live = plane.registry.live("acme", AGENT)
        cand = Candidate(kind="weight_update", cluster="math|answer|sum", description="train the weights", cost=50.0,
                         payload={"task": "math"}, source_trajectories=[])
        from molt.control.log import DecisionRecord

        rec = DecisionRecord(tenant_id="acme", agent_id=AGENT, choice="weight_update", reason="capability gap")
        assert plane._apply(cand, live, rec) is None  # queued for the service
        part = ModelPart(base="desk-model", adapter="lora-1", adapter_path="/ckpt/lora-1")
        assert serve_requests(queue, lambda t, a, c: part, threading.Event(), poll_s=0, max_requests=1) == 1
        [p] = Proposals(store).list("acme")
        assert p.kind == "weight_update" and p.version.parts.model.adapter == "lora-1"
        assert plane.registry.canaries("acme", AGENT) == []

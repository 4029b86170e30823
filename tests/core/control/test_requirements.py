"""Failures named by whoever rejects them (issue 43 item 4): a consumer's rejection reason, a judge's
rubric or a validator's message is a requirement on the answer, whatever it is about — a citation, a
JSON field, a unit, a language. Failures are clustered on what they require and get a harness edit
stating it; a verdict that states no requirement ("wrong answer") does not. Before, only verdicts that
said "format / json / schema / ..." were format failures: a missing citation was an answer failure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from molt.control.clusters import cluster_failures, requirement_of
from molt.control.diagnose import propose
from molt.control.signals import Episode
from molt.control.versions import AgentConfig, AgentVersion, ModelPart


@pytest.mark.parametrize(("verdict", "required"), [
    ("rejected: answers must cite the section id (e.g. §4.2).", "cite the section id (e.g. §4.2)"),
    ("Amounts need to be in EUR, not dollars.", "be in EUR, not dollars"),
    ("The reply should be in German.", "be in German"),
    ("validator: the answer is not a JSON object with a 'ticket' field", "be a JSON object with a 'ticket' field"),
    ("Response does not include the ticket number", "include the ticket number"),
    ("assertion failed: format: not JSON", "be JSON"),
    # what the verdict quotes of this answer is evidence, not the requirement: these cluster together
    ("the reply does not open with the number: 'in mathematics, '", "open with the number"),
    ('the reply does not open with the number: "Sure! The sum"', "open with the number"),
    ("wrong answer: expected the refund window", None),
    ("the refund was not issued", None),
    ("wrong or missing order state", None),
])
def test_requirement_is_read_from_how_it_is_said(verdict: str, required: str | None) -> None:
    assert requirement_of(verdict) == required


def _ep(i: int, question: str, verdict: str | None, ok: bool = False) -> Episode:
    return Episode(trajectory_id=f"t{i}", tenant_id="acme", agent_id="docs", task=None, policy_version="v1",
                   started_at=datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=i), success=ok,
                   reward=float(ok), question=question, answer="The limit is 20 kg.", verdict=verdict,
                   failure_signals=[] if ok else ["reward"])


def test_a_consumers_citation_and_unit_requirements_become_harness_edits() -> None:
    cite = "rejected by the portal: answers must cite the section id of the handbook"
    unit = "Weights need to be given in kilograms and pounds."
    qs = ["What is the baggage limit on route {}?", "How heavy may my bag be on route {}?"]
    window = ([_ep(i, qs[i % 2].format(100 + i), cite) for i in range(8)]
              + [_ep(10 + i, f"How much does parcel P-{200 + i} weigh?", unit) for i in range(8)]
              + [_ep(30 + i, f"Which gate does flight F{300 + i} leave from?", None, ok=True) for i in range(12)])
    found = {c.signature: c for c in cluster_failures(window) if c.size >= 2}
    assert set(found) == {"format:cite the section id of the handbook",
                          "format:be given in kilograms and pounds"}, list(found)
    assert all(c.size == 8 for c in found.values())
    live = AgentVersion(version_id="v1", tenant_id="acme", agent_id="docs", parts=AgentConfig(
        model=ModelPart(base="m")), parts_bytes=b"{}", created_at=datetime(2026, 11, 30, tzinfo=UTC), status="live")
    for sig, words in (("format:cite the section id of the handbook", "cite the section id of the handbook"),
                       ("format:be given in kilograms and pounds", "be given in kilograms and pounds")):
        edits = [c for c in propose(found[sig], window, live) if c.kind == "harness_edit"]
        assert len(edits) == 1 and words in edits[0].payload["system_prompt"], edits
        assert words in (edits[0].parts.harness.system_prompt or "")
        # weights only as the last resort: the selector asks for them once the rule was replayed and failed
        made = propose(found[sig], window, live)
        assert [c.kind for c in made].index("harness_edit") < [c.kind for c in made].index("weight_update")

"""A memory takes the form that replays best (issue 43): the users' agreed correction is offered both as
prose and as the answer to the question they asked (``Question: … / Answer: …``), and replay decides.
Two replay models stand in for the two kinds measured: one that uses a fact only when it is stated as the answer to
a question (SmolLM2-135M used the Q/A form on 38 % of fresh asks against 21 % for prose), and one that
uses prose only. Each gets the memory in the form it uses; without the Q/A form the first gets none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from molt.control.diagnose import qa_form
from molt.control.plane import ControlPlane, PlaneSettings
from molt.replay import save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, DeskModel, World

FACT = FACTS["refund window"]


class _Reader(DeskModel):
    """The desk's scripted policy, reading only the memories stated in one form: ``qa`` — the answers
    of ``Question: … / Answer: …`` pairs — or ``prose`` — the other lines."""

    def __init__(self, form: str):
        super().__init__()
        self.form = form

    def _decide(self, system: str, question: str, *rest: Any) -> Any:  # type: ignore[override]
        if "Relevant memories:" in system:
            head, _, tail = system.partition("Relevant memories:")
            block, sep, after = tail.partition("\n\n")
            facts, lines = [], block.splitlines()
            for i, ln in enumerate(lines):
                if ln.startswith("- Question: "):
                    if self.form == "qa" and i + 1 < len(lines) and lines[i + 1].startswith("Answer: "):
                        facts.append(lines[i + 1].removeprefix("Answer: "))
                elif ln.startswith("- ") and self.form == "prose":
                    facts.append(ln.removeprefix("- "))
            system = head + "Relevant memories:\n" + "\n".join(f"- {f}" for f in facts) + sep + after
        return super()._decide(system, question, *rest)


def _window() -> list[Traffic]:
    """The refund window asked eight times (five askers correct it) beside eight order lookups it answers:
    a significant cluster, so the chosen memory goes live at once (``promote_directly``)."""
    out = [Traffic("acme", AGENT, f"{FACT.questions[i % 3]} (ticket {i})", "kb_question",
                   FACT.text if i < 5 else None) for i in range(8)]
    out += [Traffic("acme", AGENT, f"Where is order A-{1000 + i}? (ticket s{i})", "status") for i in range(8)]
    return out


@pytest.mark.parametrize("form", ["qa", "prose"])
def test_the_memory_takes_the_form_the_replay_model_uses(tmp_path: Path, form: str) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        model = _Reader(form)
        plane = ControlPlane(store, model, live_tools=World().live_tools(), base_parts=base_parts(),
                             settings=PlaneSettings(promote_directly=True, replay_sample=8))
        plane.registry.ensure_base("acme", AGENT, base_parts())
        save_trajectories(store, asyncio.run(record_traffic(_window(), plane.registry, plane, World(), model)))
        res = plane.run_cycle("acme", AGENT)
        rec = res.record
        assert res.choice == "memory_insert", (rec.reason, rec.rejected)
        chosen = next(c for c in rec.candidates if c["candidate_id"] == rec.chosen_candidate)
        assert chosen["payload"]["form"] == form and chosen["payload"]["fact"] == FACT.text, chosen["payload"]
        assert chosen["evidence"]["replay"]["success_delta"] >= 0.5
        forms = {c["payload"]["form"]: c for c in [*rec.candidates, *rec.rejected] if c["kind"] == "memory_insert"}
        assert set(forms) == {"qa", "prose"}, forms  # both forms were candidates
        if form == "qa":  # the prose was replayed and fixed nothing; the Q/A form's question is the users'
            assert forms["prose"]["evidence"]["replay"]["success_delta"] <= 0
            assert chosen["payload"]["text"].startswith("Question: ") and chosen["payload"]["text"].endswith(
                "\nAnswer: " + FACT.text)
        else:  # the prose suffices and is cheaper: the Q/A form is not even replayed
            assert "not replayed" in forms["qa"]["rejected"], forms["qa"]
        assert res.version is not None and res.version.status == "live"
        assert plane.memories.memories("acme", list(res.version.parts.memory_ids))[0].text == chosen["payload"]["text"]


def test_qa_form_never_carries_personal_data() -> None:
    assert qa_form("The fee is 23 euros.", ["What is the fee at <ORGANIZATION_1>?", "What's the fee?"]) == \
        "Question: What's the fee?\nAnswer: The fee is 23 euros."
    assert qa_form("The fee is 23 euros.", ["Hi, I am <PERSON_1>: the fee?"]) is None

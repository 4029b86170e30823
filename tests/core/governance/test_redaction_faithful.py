"""Recordings stay faithful: what redaction replaces is personal data, and what it leaves is intact.

Each case comes from recorded traffic where redaction damaged what the plane learns from: language
names stored as ``<PERSON_1>`` (replays then asked to translate "into <PERSON_1>"), a Spanish "está"
read as a name, a possessive cut to a stray "s" in a memory's text, and the business a system prompt
names stored as a person in every trajectory. The mechanisms are what the words are: languages are
a closed class (ISO 639-1 names, pycountry), a name is written with the accents its bearers use, a
possessive clitic belongs to the token before it, a firm a desk belongs to is not a person.
"""

from __future__ import annotations

import re

import pytest

from molt.atdp import Event, EventKind, Generation, Message, Observation
from molt.control.diagnose import abstract_correction
from molt.governance import GovernancePipeline, GovernancePolicy
from molt.governance.redaction import Redactor


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(
    "text",
    [
        "Please translate this into French.",
        "Translate the following text from German to English.",
        "Can you answer in Swahili, or in Japanese if that is easier?",
        "Reply in Portuguese and keep the Dutch terms.",
    ],
)
def test_language_names_are_not_persons(redactor: Redactor, text: str) -> None:
    red, spans = redactor.redact(text)
    assert red == text, spans


def test_a_surname_that_is_a_language_is_still_a_name_beside_a_first_name(redactor: Redactor) -> None:
    red, _ = redactor.redact("I spoke with Dawn French yesterday.")
    assert "Dawn French" not in red


@pytest.mark.parametrize(
    "text",
    ["Está bien, gracias.", "Translate: Hola, ¿cómo está usted? Estoy bien.", "Sí, está disponible mañana."],
)
def test_accented_words_of_other_languages_are_not_names(redactor: Redactor, text: str) -> None:
    red, spans = redactor.redact(text)
    assert red == text, spans


def test_accented_names_are_still_names(redactor: Redactor) -> None:
    red, _ = redactor.redact("Please call José Müller back about the refund.")
    assert "José" not in red and "Müller" not in red


@pytest.mark.parametrize(
    "text",
    [
        "Their plan beats Kowalczyk's offer by 5 dollars.",
        "We lost the deal to CompetitorX’s 20% discount.",
    ],
)
def test_a_possessive_stays_with_its_token_in_a_memory_text(redactor: Redactor, text: str) -> None:
    out = abstract_correction(text, redactor)
    # the name is kept whole or goes whole; no token is cut: neither a stray "s" nor a dangling
    # apostrophe where the name was
    assert not re.search(r"(?:^|\s)['’]?s\b", out), out
    assert re.search(r"\b(?:5 dollars|20%)", out), out


def test_a_replaced_possessive_keeps_its_clitic(redactor: Redactor) -> None:
    red, _ = redactor.redact("We beat Kowalczyk’s offer and Nakamura's.")
    assert "’s offer" in red and "'s." in red and "Kowalczyk" not in red


def test_the_business_a_system_prompt_names_is_not_a_person(redactor: Redactor) -> None:
    _red, spans = redactor.redact("You are the support desk of Acme. Answer in one sentence.")
    assert not [s for s in spans if s.entity_type == "PERSON"], spans


def test_a_shared_system_prompt_keeps_its_business_name_in_stored_events() -> None:
    prompt = "You are the support desk of Acme. Answer in one sentence."
    pipe = GovernancePipeline(GovernancePolicy())
    stored = ""
    for i in range(4):  # once seen in enough conversations, the prompt is the operator's configuration
        ev = Event(trajectory_id=f"t-{i}", session_id=f"c{i}", kind=EventKind.MODEL_CALL,
                   observation=Observation(messages=[Message(role="system", content=prompt),
                                                     Message(role="user", content="Where is my order?")]),
                   action=Generation(text="It ships today."), metadata={"tenant_id": "acme"})  # fmt: skip
        res = pipe.process(ev)
        assert res.event is not None
        stored = res.event.model_dump_json()
    assert "support desk of Acme." in stored, stored


def _surrogates(window: int | None = None) -> Redactor:
    from molt.governance.redaction import RedactionPolicy, ReplacementMode

    return Redactor(RedactionPolicy(name="surrogates", tenant_id="acme", entity_modes={
        "PERSON": ReplacementMode.SURROGATE, "EMAIL_ADDRESS": ReplacementMode.SURROGATE},
        pseudonym_key="k" * 32, surrogate_window_s=window))  # fmt: skip


def test_surrogates_are_consistent_realistic_and_not_the_value() -> None:
    a = _surrogates().redact("Ana Lima wrote from ana.lima@example.org; Piotr Nowak replied.")[0]
    b = _surrogates().redact("Yesterday Ana Lima called again.")[0]  # another redactor, another event
    assert "Ana" not in a and "Lima" not in a and "Nowak" not in a and "<" not in a
    stand_in = b.removeprefix("Yesterday ").removesuffix(" called again.")
    assert stand_in in a and len(stand_in.split()) == 2 and stand_in.istitle()
    assert a.count("@example.com") == 1 and "ana.lima" not in a
    assert a.index(stand_in) == 0 and "Piotr" not in a and a.split("; ")[1].split(" replied")[0] != stand_in


def test_surrogates_change_with_the_window() -> None:
    from molt.governance.redaction import RedactionPolicy

    pol: RedactionPolicy = _surrogates(window=3600).policy
    names = ["Ana Lima", "Piotr Nowak", "Mei Chen", "Olu Adeyemi"]
    assert all(pol.surrogate("PERSON", n, now=0) == pol.surrogate("PERSON", n, now=3599) for n in names)
    assert any(pol.surrogate("PERSON", n, now=0) != pol.surrogate("PERSON", n, now=3600) for n in names)

"""What a name, a place and an organisation are, beyond the cue words around them (issue 21): a run
led by a first name is a person's name; place-name endings and surname endings of unknown words;
the head nouns that open a firm's name in head-first languages; the company contexts of English
(an apposition, what only a firm has or does, "employed by"); coined firm names after an
employer's cue in lowercase text; the flat and floor words of European addresses.

Every value here is made up for the test (none is taken from a labelled set)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def found(det, text: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(s.entity_type, text[s.start : s.end]) for s in det.detect(text)]


@pytest.mark.parametrize(
    "text, name",
    [
        # "for" / "at" before a run is a firm's cue, but a run led by a first name is a person's name
        ("The parcel for Marta Quenelleux Brandvik is stuck at the depot.", "Marta Quenelleux Brandvik"),
        ("I ordered a cake for Joris van Tessel yesterday.", "Joris van Tessel"),
        # a two-letter surname with an accent is not the legal form "SA"
        ("Hi, this is Rui Tavares Sá and my parcel is late.", "Rui Tavares Sá"),
    ],
)
def test_a_run_led_by_a_first_name_is_a_person(entities, text: str, name: str) -> None:  # type: ignore[no-untyped-def]
    assert ("PERSON", name) in found(entities, text)
    assert all(t != "ORGANIZATION" for t, _ in found(entities, text))


@pytest.mark.parametrize(
    "text, place",
    [
        # a compass point or "Port" first makes a place, even when the rest reads as a brand
        ("The parcel is stuck in East Morrowhaven. Ship it back.", "East Morrowhaven"),
        ("We drove to Port Quillborough yesterday.", "Port Quillborough"),
        # a word no lexicon knows, built as place names are, with no firm's cue around it
        ("Please ship it to Harlowville instead.", "Harlowville"),
    ],
)
def test_place_shaped_words_are_places(entities, text: str, place: str) -> None:  # type: ignore[no-untyped-def]
    assert ("LOCATION", place) in found(entities, text)


@pytest.mark.parametrize(
    "text, org",
    [
        # the same shapes with a firm's cue stay firms
        ("He is a senior engineer at Stackhaven.", "Stackhaven"),
        ("Stackhaven, a startup based in Austin, raised money.", "Stackhaven"),
    ],
)
def test_place_shaped_brands_with_a_firms_cue_stay_firms(entities, text: str, org: str) -> None:  # type: ignore[no-untyped-def]
    assert ("ORGANIZATION", org) in found(entities, text)


def test_a_surname_shape_makes_an_unknown_word_a_surname(entities) -> None:  # type: ignore[no-untyped-def]
    # "with" before a word no lexicon knows reads as a firm ("partnered with Lumenfield"), but a
    # word built as surnames are is a person's
    assert found(entities, "I had lunch with Kolbenikova yesterday.") == [("PERSON", "Kolbenikova")]
    assert ("PERSON", "Thorgrimsdottir") in found(entities, "Thorgrimsdottir went to the store.")


@pytest.mark.parametrize(
    "text, org",
    [
        ("Jip from Stichting Groenveldhof cannot log in.", "Stichting Groenveldhof"),
        ("Please transfer it to Banco Arvelino by Friday.", "Banco Arvelino"),
        ("She studied at Universidad de Talvera for two years.", "Universidad de Talvera"),
    ],
)
def test_head_first_organisation_names(entities, text: str, org: str) -> None:  # type: ignore[no-untyped-def]
    assert ("ORGANIZATION", org) in found(entities, text)


@pytest.mark.parametrize(
    "text, org",
    [
        ("We use Brennick, the analytics firm, for our reports.", "Brennick"),
        ("The Brennick website is down again.", "Brennick"),
        ("Please cancel my Corvanto subscription.", "Corvanto"),
        ("Brennick announces a recall of its routers.", "Brennick"),
        ("I asked the spokesperson of Vandeloo about it.", "Vandeloo"),
        # a surname after "employed by" / "a contract with" names the firm
        ("She has been employed by Hargreaves since 2019.", "Hargreaves"),
        ("We signed a contract with Hargreaves last week.", "Hargreaves"),
    ],
)
def test_company_contexts(entities, text: str, org: str) -> None:  # type: ignore[no-untyped-def]
    assert ("ORGANIZATION", org) in found(entities, text)


def test_a_pronoun_before_a_company_verb_is_not_a_company(entities) -> None:  # type: ignore[no-untyped-def]
    assert all(span != "We" for _t, span in found(entities, "We partnered with Brennick on this."))


def test_a_coined_firm_name_after_an_employers_cue_in_lowercase_text(entities) -> None:  # type: ignore[no-untyped-def]
    assert ("ORGANIZATION", "zentrilo") in found(entities, "the demo was recorded for zentrilo last year.")
    # code and hosts are not firms
    assert found(entities, "the server listens at zentrilo:8080 now") == []
    assert found(entities, "open the file at zentrilo.cfg first") == []


@pytest.mark.parametrize(
    "text, address",
    [
        (
            "Spedire a Via Cosimo Brandi 12 Piano 3, 20121 Milano (MI) grazie",
            "Via Cosimo Brandi 12 Piano 3, 20121 Milano (MI)",
        ),
        ("Envoyer à 14 rue Victor Hugo Appt 5, 67000 Strasbourg svp", "14 rue Victor Hugo Appt 5, 67000 Strasbourg"),
    ],
)
def test_european_flat_and_floor_words_continue_an_address(entities, text: str, address: str) -> None:  # type: ignore[no-untyped-def]
    assert ("ADDRESS", address) in found(entities, text)

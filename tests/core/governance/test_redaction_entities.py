"""Names, places, organisations and addresses (the ``entities`` detector), and batched detection."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.governance.redaction import Redactor, detectors
from molt.governance.redaction.base import Span
from molt.governance.redaction.lexicon import fold, get_lexicon

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def found(det, text: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(s.entity_type, text[s.start : s.end]) for s in det.detect(text)]


@pytest.mark.parametrize(
    "text, address",
    [
        ("Please send it to 221B Baker Street, London SW1A 1AA. Thanks!", "221B Baker Street, London SW1A 1AA"),
        ("Ship to 52 Rua Joaquim de Oliveira Cruz 1615 Suite 498, Curitiba 80010 today", None),
        ("I live at Hochstrasse 96 now", "Hochstrasse 96"),
        ("Meet me at the corner of Koepoortwal 115 and Hansen Street", "Koepoortwal 115 and Hansen Street"),
        ("The address is PSC 1083, Box 3672\nAPO AP 10176", "PSC 1083, Box 3672\nAPO AP 10176"),
        ("send a new one to USNS Vestergaard\nFPO AA 08331? I am away", "USNS Vestergaard\nFPO AA 08331"),
        (
            "i'd like it sent to the corner of hochstrasse 63 and henriksen street",
            "hochstrasse 63 and henriksen street",
        ),
        ("Kreuselgasse 46-20, 72159 Burglengenfeld", None),
        # a numbered street: the ordinal is the street's name ("40th" is one word, not "40" + "th")
        ("The letter arrived at 4589 40th Street Suite 603 last night.", "4589 40th Street Suite 603"),
        ("I want to update my address to 2914 184th Street", "2914 184th Street"),
        # quoted in a sentence over two lines: the town on the next line is part of the one span
        ("Ship it to 58 Hexham Road\nHaldenstein, nan 37659 please", "58 Hexham Road\nHaldenstein"),
        # a unit, the house number, then a street that has only a name and a number
        ("Send it to Suite 574 34 Sireli 74, thanks", "Suite 574 34 Sireli 74"),
        # a building number before a street-first address is its first part
        ("Ship it to 64 Boriñaur enparantza 29\n Suite 627\n Campos please", None),
    ],
)
def test_inline_addresses_are_one_span(entities, text: str, address: str | None) -> None:  # type: ignore[no-untyped-def]
    spans = [v for t, v in found(entities, text) if t == "ADDRESS"]
    assert len(spans) == 1, spans
    if address is not None:
        assert spans[0] == address
    else:
        assert spans[0][0].isalnum() and "," not in spans[0][-1:]


@pytest.mark.parametrize(
    "text, parts",
    [
        (
            "Please send it to 221B Baker Street, London. Thanks!",
            [("ADDRESS", "221B Baker Street"), ("LOCATION", "London")],
        ),
        (
            "We'll meet Friday at Kroll, 61 Wiesenstrasse 31, Barzheim",
            [("ADDRESS", "61"), ("ADDRESS", "Wiesenstrasse 31"), ("LOCATION", "Barzheim")],
        ),
        (
            "Andrew lives at 21 3314 Harley Brook Lane, Altoona",
            [("ADDRESS", "21"), ("ADDRESS", "3314 Harley Brook Lane"), ("LOCATION", "Altoona")],
        ),
    ],
)  # fmt: skip
def test_inline_street_and_town_are_split(entities, text: str, parts: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    # a town closing an inline street address is a place of its own, and a building number written
    # before a street that has its own number is its own part; longer addresses stay one span
    spans = [(t, v) for t, v in found(entities, text) if t in ("ADDRESS", "LOCATION")]
    assert spans == parts


def test_named_postcode_is_an_address(entities) -> None:  # type: ignore[no-untyped-def]
    assert ("ADDRESS", "35649") in found(entities, "My zip code is 35649")
    r = Redactor()
    text = "ZIP: 94107-1234"
    assert [(s.entity_type, text[s.start : s.end]) for s in r.detect(text)] == [("ADDRESS", "94107-1234")]


def test_block_town_line_is_one_place(entities) -> None:  # type: ignore[no-untyped-def]
    text = ">Sierra Lilja\n>47 Ctra. Bailén-Motril 84\n>Suite 894\n>Torres de Albánchez\n>Kiribati 01156"
    assert ("LOCATION", "Torres de Albánchez") in found(entities, text)


def test_letterhead_company_line(entities) -> None:  # type: ignore[no-untyped-def]
    text = "Robert Fiorentini\nJourneymen lineman\nNorthern Reflections\nPSC 7580, Box 2412\nAPO AA 63571"
    spans = found(entities, text)
    assert ("ORGANIZATION", "Northern Reflections") in spans and ("PERSON", "Robert Fiorentini") in spans
    text = "Kimberly Brandt\nSenior Engineer\n27 Adrianalaan 62\nSuite 624\nRotterdam"
    assert not any(t == "ORGANIZATION" for t, _v in found(entities, text))  # Faker's job words


@pytest.mark.parametrize(
    "text, expected, absent",
    [
        ("Date: 2007-03-23 18:43:36\nName: Jason Hartmann", ("PERSON", "Jason Hartmann"), "Date"),
        ("Unlike the Fry novel, it's not about that.", ("PERSON", "Fry"), None),
        ("follow up with tracy wiśniewska in 2 months.", ("PERSON", "tracy wiśniewska"), None),
        ("Heidi van der Vlist, the surgeon, said so.", ("PERSON", "Heidi van der Vlist"), None),
        ("The Datamyne office is at the harbour.", ("ORGANIZATION", "Datamyne"), None),
    ],
)
def test_person_and_org_cues(entities, text: str, expected: tuple[str, str], absent: str | None) -> None:  # type: ignore[no-untyped-def]
    spans = found(entities, text)
    assert expected in spans, spans
    if absent is not None:
        assert not any(v == absent for _t, v in spans)


def test_address_block_is_returned_part_by_part(entities) -> None:  # type: ignore[no-untyped-def]
    text = "Jeffrey Napolitano\n\n91 Vila Miguel Tavares 1160\n Suite 616\n Fortaleza\n Togo 95522"
    spans = found(entities, text)
    assert ("PERSON", "Jeffrey Napolitano") in spans
    assert ("ADDRESS", "Suite 616") in spans and ("ADDRESS", "95522") in spans
    assert ("LOCATION", "Fortaleza") in spans and ("LOCATION", "Togo") in spans


@pytest.mark.parametrize(
    "text",
    [
        "Refunds go back within 30 days of delivery. The 3 way merge is done.",
        "The Nimbus 2 Backpack ships in 2 days.",
        "call 032 696 10 69 now",
        "Order NW-258176 shipped on 2025-11-02 with DHL.",
    ],
)
def test_quantities_products_and_numbers_are_not_addresses(entities, text: str) -> None:  # type: ignore[no-untyped-def]
    assert [v for t, v in found(entities, text) if t == "ADDRESS"] == []


@pytest.mark.parametrize(
    "text, entity, value",
    [
        ("Yesterday Christine Sørensen flew from Reykjavík to Latvia.", "PERSON", "Christine Sørensen"),
        ("Algeria was super fun to visit!", "LOCATION", "Algeria"),
        ("She moved here from Trinidad and Tobago last year", "LOCATION", "Trinidad and Tobago"),
        ("I am in TYSTBERGA for a business trip", "LOCATION", "TYSTBERGA"),
        ("It went out from the Reno warehouse", "LOCATION", "Reno"),
        ("The Wolfram Research version sold well", "ORGANIZATION", "Wolfram Research"),
        ("The Jones, Mitchell and Williams office is downtown", "ORGANIZATION", "Jones, Mitchell and Williams"),
        ("During the 1990s, Deloitte invested heavily in chips.", "ORGANIZATION", "Deloitte"),
        ("Maha spent a year at New Media Parents as an assistant", "ORGANIZATION", "New Media Parents"),
        ("She joined Healthmap in 2019.", "ORGANIZATION", "Healthmap"),
        ("the verses from Cynthia Vasala's Cautionary Tales", "PERSON", "Cynthia Vasala"),
        ("Please correct it to Dr. Christopher Schmitt", "PERSON", "Christopher Schmitt"),
        # a word of another language after an employer's cue names the firm
        ("The version recorded for Allianz sold a million copies.", "ORGANIZATION", "Allianz"),
        ("Ask Maria Lopez R2 about it", "PERSON", "Maria Lopez"),
        ("Both Zorblatt and Acme Corp bid for it.", "ORGANIZATION", "Zorblatt"),  # joined to a firm
        ("An employee of Verizon lost a laptop.", "ORGANIZATION", "Verizon"),
        ("She joined Stripe in May.", "ORGANIZATION", "Stripe"),
        ("Your Hexacore account has been locked.", "ORGANIZATION", "Hexacore"),
    ],
)
def test_context_rules(entities, text: str, entity: str, value: str) -> None:  # type: ignore[no-untyped-def]
    assert (entity, value) in found(entities, text)


@pytest.mark.parametrize(
    "text",
    [
        "Please run the tests and fix the build.",
        "Hi team, I'm back. My IBAN is on file.",
        "One earlier replacement in March for the same product.",
        "The Aurora Wireless Earbuds and the Juniper Yoga Mat are in stock.",
        "Dock DK-200 is free until noon; use Gate B12 after that.",  # a word and its code: a place
    ],
)
def test_no_entity_in_ordinary_text(entities, text: str) -> None:  # type: ignore[no-untyped-def]
    assert [s for s in found(entities, text) if s[0] in ("PERSON", "LOCATION")] == []


def test_lowercase_text(entities) -> None:  # type: ignore[no-untyped-def]
    assert ("PERSON", "marie") in found(entities, "my name is marie")
    assert ("PERSON", "cindy thygesen") in found(entities, "the cindy thygesen version was recorded")
    assert ("LOCATION", "Kraków") not in found(entities, "i don't like this tone")
    assert ("LOCATION", "united arab emirates") in found(entities, "in united arab emirates they have songs")
    cased = found(entities, "Hi, my name is john smith and I need help.")
    assert ("PERSON", "john smith") in cased
    spans = Redactor().detect(text := "hi my name is john smith, call 415 555 0100")
    assert [(s.entity_type, text[s.start : s.end]) for s in spans] == [
        ("PERSON", "john smith"),
        ("PHONE_NUMBER", "415 555 0100"),
    ]


def test_detect_many_matches_detect_and_memoises_by_digest() -> None:
    texts = ["Mail ana@example.org", "shipped", "Ana Lima, card 4111 1111 1111 1111", "", "no pii here"]
    r = Redactor()
    assert r.detect_many(texts) == [r.detect(t) for t in texts]
    # keyed by (length, hash), never by the text
    assert sorted(r._cache) == sorted({(len(t), hash(t)) for t in texts})
    assert not any(isinstance(x, str) for k in r._cache for x in k)
    assert r.detect_many(texts) == [r.detect(t) for t in texts]  # from the memo
    # a hit is a hit by key: planting another text's spans under a text's key is what comes back
    planted = [Span(0, 7, "PERSON", 1.0, "planted")]
    r._cache[(len("shipped"), hash("shipped"))] = planted
    assert r.detect_many(["shipped", "no pii here"]) == [planted, []]
    off = Redactor(cache_size=0)
    assert off.detect_many(texts) == [r.detect(t) for t in texts] and not off._cache


def test_structured_detectors_in_digit_windows() -> None:
    text = "Tanzania 53144\n06-10446904-Office\\,001-748-088-2851x818-Fax, IBAN GB82 WEST 1234 5698 7654 32 ok"
    spans = [(s.entity_type, text[s.start : s.end]) for s in Redactor().detect(text)]
    assert ("PHONE_NUMBER", "06-10446904") in spans and ("PHONE_NUMBER", "001-748-088-2851x818") in spans
    assert ("IBAN_CODE", "GB82 WEST 1234 5698 7654 32") in spans


@pytest.mark.parametrize(
    "text, expected",
    [
        # bullets lost to an encoding ("??? ") do not hide a block's lines; a country line after a blank line
        # ends the block, with its postcode
        (
            "??? Rosa Quint\n??? Brightline Analytics\n??? 12 Hochstrasse 96\n??? Suite 4\n??? Graz\n??? Austria 8010",
            {("ORGANIZATION", "Brightline Analytics"), ("ADDRESS", "Suite 4"), ("ADDRESS", "8010")},
        ),
        ("Ana Ruiz\n\n17 Hochstrasse 12\n Apt. 3\n Graz\n\n Austria 8010", {("ADDRESS", "8010")}),
        # the subject of "is a company", any case
        ("recargo is a startup from Lisbon.", {("ORGANIZATION", "recargo")}),
        ("my name is janice beneventi.", {("PERSON", "janice beneventi")}),
    ],
)
def test_general_cues(entities, text: str, expected: set[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    spans = set(found(entities, text))
    assert expected <= spans, spans


def test_a_firm_named_after_surnames_is_still_one() -> None:
    det = detectors.get("entities")()
    text = "She signed with Jones, Mitchell and Williams last year."
    assert ("ORGANIZATION", "Jones, Mitchell and Williams") in found(det, text)


def test_run_memo_keeps_rules_that_look_past_its_key() -> None:
    # "employed by X" looks two words back, beyond the run memo's key (the run and the words next to it)
    det = detectors.get("entities")()
    first = "Yesterday the crew was paid by Brennick this morning."
    second = "Yesterday the crew was employed by Brennick this morning."
    fresh = found(detectors.get("entities")(), second)
    found(det, first)
    assert found(det, second) == fresh and ("ORGANIZATION", "Brennick") in fresh


@pytest.mark.parametrize(
    "text",
    [
        "Bot: What's the name on the account? User: ",  # transcript speakers are roles
        "bot: what's the name on the account? user: ",
        "can i please speak to your boss?",  # after a possessive, a word is a noun
    ],
)
def test_roles_and_possessed_nouns_are_not_people(entities, text: str) -> None:  # type: ignore[no-untyped-def]
    assert found(entities, text) == []


def test_a_postcode_named_as_one_is_redacted_in_the_languages_and_formats_of_its_postal_system() -> None:
    from molt.governance.redaction import Redactor

    r = Redactor(cache_size=0)
    for text, code in [
        ("Die PLZ: 10115, bitte", "10115"), ("zip code 94103-1234", "94103-1234"),
        ("code postal 75001", "75001"), ("CEP 01310-100", "01310-100"), ("postcode 1012 AB", "1012 AB"),
        ("PIN code 560001", "560001"), ("kod pocztowy 00-950", "00-950"), ("código postal 28013", "28013"),
    ]:  # fmt: skip
        redacted, spans = r.redact(text)
        assert code not in redacted and any(s.entity_type == "ADDRESS" for s in spans), (text, redacted)
    assert r.redact("the cap is 12345 units")[0] == "the cap is 12345 units"  # "cap" the word is no cue


@pytest.mark.parametrize(
    "text, kept",
    [
        # words an agent's memory, tool errors and notes are made of: mangled, they harm evolution too
        ("List the files in the folder, then call List with the path.", "List"),
        ("Acme refund policy: 30 days. The Acme warehouse ships daily.", "Acme"),
        ("Tool failed: ValidationError: field required", "ValidationError"),
        ("raised KeyError in parse; ConnectionRefusedError while calling the API", "Error"),
        ("The storage unit is at Pier 19, gate 4.", "Pier"),
        ("Best regards,\nThe support team", "Best"),
        # greetings and words of other languages are words, not names
        ("Buongiorno, vorrei un rimborso.", "Buongiorno"),
        ("Bitte überweisen Sie den Betrag auf das Konto.", "Betrag"),
        ("Pozdrawiam serdecznie", "Pozdrawiam"),
        # a field label before a number is not the town of the address above it
        ("Globex Ltd\n12 High Street, Leeds LS1 4AB\nTel. 0113 496 0000", "Tel"),
    ],
)
def test_words_that_are_also_names_or_towns_somewhere_stay(entities, text: str, kept: str) -> None:  # type: ignore[no-untyped-def]
    assert not [v for _t, v in found(entities, text) if kept in v], found(entities, text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Buongiorno, sono Marco Rossi.", ("PERSON", "Marco Rossi")),
        ("Please ask Mr. List about it.", ("PERSON", "List")),
        ("She lives in Acme now.", ("LOCATION", "Acme")),  # a small town, with a place cue
        ("Hans called about the invoice.", ("PERSON", "Hans")),  # a name that is a word in Swedish stays a name
    ],
)
def test_the_same_words_with_a_cue_are_entities(entities, text: str, expected: tuple[str, str]) -> None:  # type: ignore[no-untyped-def]
    assert expected in found(entities, text)


def test_a_legal_form_makes_the_name_before_it_an_organisation(entities) -> None:  # type: ignore[no-untyped-def]
    # every legal form the lexicon holds (Faker's company suffixes of all its locales), as written
    from molt.governance.redaction.lexicon import get_lexicon

    forms = sorted(get_lexicon().legal_forms)
    assert {"S.A.", "Sp. z o.o.", "s.r.l.", "GmbH & Co. KG", "e Filhos"} <= set(forms)
    missed = []
    for form in forms:
        text = f"Escalating: Alex Majak from Kowalczyk Vega {form} cannot log in"
        if ("ORGANIZATION", f"Kowalczyk Vega {form}") not in found(entities, text):
            missed.append(form)
    assert not missed
    # the person before the firm keeps its own span; a list or a firm before an "and" stays apart
    text = "Hola, soy Leyre Mancebo de Jiménez & Asociados S.L.U.; mi correo es x@example.net"
    assert set(found(entities, text)) == {("PERSON", "Leyre Mancebo"), ("ORGANIZATION", "Jiménez & Asociados S.L.U.")}
    text = "The big three: Healthmap, Solarlist and Morningstar Inc.. Then"
    assert ("ORGANIZATION", "Morningstar Inc.") in found(entities, text)
    assert ("ORGANIZATION", "Solarlist") in found(entities, text)
    assert ("ORGANIZATION", "Oller y Canals S.Coop.") in found(
        entities, "Hola, soy Celia Plaza de Oller y Canals S.Coop.; mi")
    # no legal form: no organisation from this rule ("S.A" inside a word, a lowercase "sa")
    assert not [v for t, v in found(entities, "the USA.Today feed and sa rules") if t == "ORGANIZATION"]


@pytest.mark.parametrize(
    "text, kept",
    [
        ("pinecrest-help", None),
        ("agent: order-status", None),
        ("Jean-Pierre called", ("PERSON", "Jean-Pierre")),
        ("I live in Stratford-upon-Avon", ("LOCATION", "Stratford-upon-Avon")),
    ],
)
def test_hyphenated_identifiers_are_not_names(entities, text: str, kept: tuple[str, str] | None) -> None:  # type: ignore[no-untyped-def]
    assert found(entities, text) == ([kept] if kept else [])


def test_other_languages_frequent_words_and_place_prepositions(entities) -> None:  # type: ignore[no-untyped-def]
    # "Sie" is a first name and German's "you"; alone, with no cue, it is the word
    assert not found(entities, "Die Karte wurde abgelehnt, bitte melden Sie sich bei uns.")
    assert ("LOCATION", "Cordier") in found(entities, "Bonjour, je m'appelle Claudine Maillard, j'habite à Cordier.")


@pytest.mark.parametrize(
    "text, address",
    [
        # a street led by a street word, its number after a comma (Italian, Brazilian)
        ("Spedire a Viale Marconi, 12, 40122, Bologna (BO), grazie", "Viale Marconi, 12, 40122, Bologna (BO)"),
        ("Entregar em Travessa Lima, 88, Jardim Europa, 01450-001 Campinas / SP hoje",
         "Travessa Lima, 88, Jardim Europa, 01450-001 Campinas / SP"),
        # a postcode, then its town; a house number with its flat after a slash (Polish, Dutch)
        ("Send it to ul. Długa 14/3, 80-831 Gdańsk.", "ul. Długa 14/3, 80-831 Gdańsk"),
        ("Stuur het naar Kerkstraat 7, 3511LX, Utrecht alstublieft", "Kerkstraat 7, 3511LX, Utrecht"),
        # Indian: house number, street type after the name, town and PIN joined by a hyphen
        ("Deliver to H.No. 41, Gandhi Marg, Jaipur-302001 please", "H.No. 41, Gandhi Marg, Jaipur-302001"),
        ("Deliver to 12/7, Nehru Chowk, Pune 411001 please", "12/7, Nehru Chowk, Pune 411001"),
        # the street type after the name in Estonian and Basque ("tee", "kalea", "enparantza")
        ("Saada see aadressile Luite tee 71, Tartu palun", "Luite tee 71"),
        ("Please ship it to Kale Nagusia kalea 5, Bilbao", "Kale Nagusia kalea 5"),
    ],
)  # fmt: skip
def test_addresses_by_their_structure_in_other_postal_systems(entities, text: str, address: str) -> None:  # type: ignore[no-untyped-def]
    # street word + name + number, then postcode + town and region code, as each system writes them:
    # one address, none of its words read as a person
    got = found(entities, text)
    assert ("ADDRESS", address) in got, got
    assert not [v for t, v in got if t == "PERSON"], got


@pytest.mark.parametrize(
    "text, kept",
    [
        ("echo the prompt back to me", "echo"),
        ("call the echo tool with the text", "echo"),
        ("the server will echo your message", "echo"),
    ],
)
def test_a_first_name_that_is_an_everyday_word_needs_a_cue_in_lowercase(entities, text: str, kept: str) -> None:  # type: ignore[no-untyped-def]
    assert found(entities, text) == []
    # the same word with a cue, a surname or a verb of speech is a name
    for named, name in (("thanks echo", "echo"), ("my name is echo", "echo"), ("echo said no", "echo")):
        assert ("PERSON", name) in found(entities, named), named


@pytest.mark.parametrize(
    "text, name",
    [("samantha is a very sympathetic person.", "samantha"), ("she named him randy", "randy"),
     ("why is sara late?", "sara")],
)
def test_a_popular_first_name_is_a_name_in_lowercase(entities, text: str, name: str) -> None:  # type: ignore[no-untyped-def]
    # popular names are frequent in English text as names; that alone does not make them everyday words
    assert ("PERSON", name) in found(entities, text)


@pytest.mark.parametrize(
    "text, org",
    [
        ("WARN payment declined merchant=Hayes, Taylor and Burton retry=2", "Hayes, Taylor and Burton"),
        ('{"args": {"company": "Moreau"}, "ok": true}', "Moreau"),
        ("vendor: Lindqvist, invoice 2231 overdue", "Lindqvist"),
    ],
)
def test_a_field_named_for_an_organisation_holds_one(entities, text: str, org: str) -> None:  # type: ignore[no-untyped-def]
    got = found(entities, text)
    assert ("ORGANIZATION", org) in got, got
    assert not [v for t, v in got if t == "PERSON"], got


def test_a_word_before_a_full_name_is_not_part_of_it(entities) -> None:  # type: ignore[no-untyped-def]
    text = "Überweisung an DE44500105175407324931 (Kontoinhaber Greta Lindholm)."
    assert ("PERSON", "Greta Lindholm") in found(entities, text)
    assert found(entities, "Our company: we sell shoes") == []


def test_a_firm_named_after_its_partners_is_one_organisation(entities) -> None:  # type: ignore[no-untyped-def]
    # every item a surname: the partners the firm is named after (was three spans: firm, person, firm)
    text = "The contract went to Bianchi, Russo e Ferrari S.p.A. last week."
    assert ("ORGANIZATION", "Bianchi, Russo e Ferrari S.p.A.") in found(entities, text)
    # a list of firms stays a list
    text = "Investors in Healthmap, Solarlist and Morningstar Inc. were told."
    assert ("ORGANIZATION", "Morningstar Inc.") in found(entities, text)


# words shaped like names that no lexicon lists, only the label before them says what they are;
# syllables as names are built from (consonant, vowel), not letters at random: "Baaaa Bababad" is
# read as a brand run together from words, as it should be
_UNLISTED = st.builds(
    lambda syl, end: ("".join(syl) + end).capitalize(),
    st.lists(st.builds(lambda c, v: c + v, st.sampled_from(list("bdfgklmnprstvz")), st.sampled_from(list("aeiou"))),
             min_size=2, max_size=3),
    st.sampled_from(["", "n", "r", "s", "k", "sen", "ova"]),
).filter(lambda w: not get_lexicon().lists(w))  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    label=st.sampled_from(["Contact", "Name", "Customer", "Attn", "Cardholder", "From", "Recipient", "Cc"]),
    first=_UNLISTED,
    last=_UNLISTED,
    after=st.sampled_from([", jo@example.org.", "\nOrder: 12", "", " <jo@example.org>", ".", " (on file)"]),
    lead=st.sampled_from(["", "Second defective unit. ", "Ticket T-19\n"]),
)
def test_a_person_field_label_makes_its_value_a_name(entities, label, first, last, after, lead) -> None:  # type: ignore[no-untyped-def]
    text = f"{lead}{label}: {first} {last}{after}"
    # a word run together from two words ("Pageban": page + ban) is read as a brand's, as
    # "Stackhaven" is; the value is then one organisation's name, still whole
    brand = any(entities.facts.compound(fold(w)) for w in (first, last))
    types = {"PERSON", "ORGANIZATION"} if brand else {"PERSON"}
    assert any((t, f"{first} {last}") in found(entities, text) for t in types)


@pytest.mark.parametrize(
    "text",
    [
        # labels of fields that hold no person
        "Subject: Binaren Nutobo, see the thread.",
        "Product: Binaren Nutobo\nStatus: shipped",
        # a person's label before a sentence, as a transcript's speaker: what was said, not a name
        "Customer: Will you ship it today?",
        "Customer: Thanks, that works.",
        "Contact: Customer Service, support@example.org",
    ],
)
def test_a_label_names_a_person_only_where_it_says_so(entities, text: str) -> None:  # type: ignore[no-untyped-def]
    assert [t for t in found(entities, text) if t[0] == "PERSON"] == []

"""The redaction hot path's shortcuts give exactly what the slow path gives.

Each shortcut (an object built without re-validation, a scan that starts from a digit, a detector
skipped by a screen) is checked here against the long way round, on inputs where only the long way
would find something.
"""

from __future__ import annotations

import random
import re

from molt.atdp import Event, EventKind, Message, Observation, Outcome, ToolCall, new_id
from molt.governance.redaction import Redactor, redact_event
from molt.governance.redaction.addresses import _house_numbers
from molt.governance.redaction.event import RedactedSpan, RedactionReport
from molt.governance.redaction.internet import _BARE_TLDS


def _event() -> Event:
    return Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        observation=Observation(messages=[Message(role="user", content="I'm Ana Lima, ana@example.org.")]),
        action=ToolCall(tool_name="crm.update", arguments={"note": "call +1 415 555 0100", "n": 3}),
        outcome=Outcome(output={"address": "221B Baker Street, London NW1 6XE"}),
    )


def test_report_and_records_equal_validated_ones() -> None:
    _, report = redact_event(_event(), redactor=Redactor(cache_size=0))
    assert report.spans
    again = RedactionReport.model_validate(report.model_dump())
    assert again == report
    assert again.model_fields_set == report.model_fields_set
    for span in report.spans:
        assert RedactedSpan.model_validate(span.model_dump()) == span
        assert span.model_fields_set == set(RedactedSpan.model_fields)


# the pattern _house_numbers replaced: it consumed the separator before the number
_OLD_NUMBER_WORD = re.compile(
    r"(?:^|[\s(>\"“'])(\d{1,5}[A-Za-z]?(?:[-/]\d{1,4}[A-Za-z]?)?),?[ ]+(?=[^\W\d_]|\d{1,5}[ ]|\d{1,4}(?:st|nd|rd|th)\b)"
)


def test_house_number_scan_matches_the_separator_led_pattern() -> None:
    rng = random.Random(3)
    alphabet = "0123456789     ,-/(>\"“'\n\tabcsthndrAZé٣x"
    texts = ["12 34 Main St", "12a 34 Main", "1 2 3 Road", "(5 Elm) 7th Ave", "x 9 rue Victor", "2025-01-03 10 days"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(20_000)]
    for text in texts:
        assert _house_numbers(text) == [(m.start(1), m.end()) for m in _OLD_NUMBER_WORD.finditer(text)], text


def test_digit_cluster_scan_matches_the_unicode_pattern() -> None:
    from molt.governance.redaction.patterns import _CLUSTER, digit_clusters

    rng = random.Random(5)
    alphabet = "0123456789   ().+/-abc٣\n"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(20_000)]
    assert sum(t.isascii() for t in texts) > 5_000 and sum(not t.isascii() for t in texts) > 5_000
    for text in texts:
        assert [c[:2] for c in digit_clusters(text)] == [m.span() for m in _CLUSTER.finditer(text)], text


# the scan the bare-domain detector replaced: every TLD an alternative of the regex
_OLD_DOT_TLD = re.compile(rf"\.(?=[A-Za-z][A-Za-z])(?:{_BARE_TLDS})(?![\w@-]|\.\w)", re.IGNORECASE)


def test_bare_domain_scan_finds_what_the_tld_alternation_found() -> None:
    import molt.governance.redaction.internet as internet

    rng = random.Random(11)
    words = ["a", "b1", "com", "co", "uk", "Example", "x-y", "de", "py", "", "COM", "io", "online", "onlinex", "shop"]
    texts = ["see example.com, models.py and www.shop.de/x.", "mail@host.co.uk or host.co.uk.", "a.com.-b a.com.x"]
    for _ in range(5_000):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 5))]
        seps = [rng.choice([".", ".", " ", "@", "/", "-", ". ", "_"]) for _ in parts]
        tail = rng.choice(["", ".", "x", "/p"])
        texts.append("see " + "".join(p + s for p, s in zip(parts, seps, strict=True)) + tail)
    detector = internet.UrlDetector()
    new = [detector.detect(t) for t in texts]
    scan = internet._DOT_TLD
    try:  # the old scan: a dot and a TLD in the regex (its one group the TLD, so the set test passes)
        internet._DOT_TLD = re.compile(_OLD_DOT_TLD.pattern.replace("(?:" + _BARE_TLDS, "(" + _BARE_TLDS), re.I)
        old = [detector.detect(t) for t in texts]
    finally:
        internet._DOT_TLD = scan
    assert sum(map(len, new)) > 300
    assert new == old


def _found(text: str) -> list[tuple[str, str]]:
    return [(s.entity_type, text[s.start : s.end]) for s in Redactor(cache_size=0).detect(text)]


def test_screens_keep_what_only_the_screened_scan_finds() -> None:
    # a military address: only the APO/FPO/DPO scan finds it (the "PO " screen must let it through)
    text = "Ship it to USNS Miller\nFPO AE 09316 please."
    assert ("ADDRESS", "USNS Miller\nFPO AE 09316") in _found(text)
    # a lowercase name in cased text: only a cue scan finds it (the cue's literal screen)
    assert ("PERSON", "john") in _found("Hello there. My name is john and I need help.")
    # a brand-shaped word with a digit (the digit test runs only on words that are not all letters)
    assert _found("Then Zyntra9 shipped it.") == [("ORGANIZATION", "Zyntra9")]  # without it: PERSON


def test_lexicon_word_sets_stay_out_of_the_cycle_collector() -> None:
    """The ~500k lexicon entries are dicts of strings, which CPython's cycle collector does not
    track; as frozensets every full collection of the host process walked all of them."""
    import dataclasses
    import gc

    from molt.governance.redaction.entities import EntityDetector
    from molt.governance.redaction.lexicon import get_lexicon

    lex = get_lexicon()
    sets = {f.name: getattr(lex, f.name) for f in dataclasses.fields(lex) if f.name != "max_place_len"}
    sets["promotable"] = EntityDetector(lex).facts.promotable
    assert sum(map(len, sets.values())) > 300_000
    for name, words in sets.items():
        assert words, name
        assert not gc.is_tracked(words), f"{name} is tracked by the garbage collector"
    assert "maria" in lex.first_names and "germany" in lex.countries and "maria" in sets["promotable"]


def test_postcode_and_org_field_screens_keep_their_matches() -> None:
    # "shipping" holds "pin", "confirmation" holds "firm": the screens look for the names themselves
    assert ("ADDRESS", "560001") in _found("Shipping update: PIN code 560001, Bengaluru.")
    assert ("ADDRESS", "00184") in _found("Shipping to Roma, CAP 00184.")
    assert ("ADDRESS", "94105") in _found("Confirmation: zip 94105 on file.")
    found = _found("Confirmation sent.\ncompany: Kestrel Widgets\nstatus=ok")
    assert ("ORGANIZATION", "Kestrel Widgets") in found


def test_national_id_scans_near_digit_runs_find_what_the_whole_text_scan_finds() -> None:
    from molt.governance.redaction.national_ids import _RULES
    from molt.governance.redaction.patterns import matches_near_digits

    rnd = random.Random(1)
    alphabet = "0123456789" * 4 + " .-XYZLAB(+/)\nabc"
    found = 0
    for _ in range(4000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(5, 60)))
        for rx, _valid, _cue in _RULES:
            whole = [m.span() for m in rx.finditer(text)]
            assert [m.span() for m in matches_near_digits(text, rx, 7, before=1)] == whole, text
            found += len(whole)
    assert found > 100


def test_the_redacted_event_copy_is_what_model_copy_makes() -> None:
    from molt.governance.redaction.walk import updated

    event = _event()
    red, report = redact_event(event, redactor=Redactor(cache_size=0))
    assert report.spans and red is not event
    update = {"action": red.action, "outcome": red.outcome}
    fast, slow = updated(event, update), event.model_copy(update=update)
    assert type(fast) is Event
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.__dict__ == slow.__dict__ and fast.__dict__ is not event.__dict__
    assert event.action is not red.action and "+1 415" in event.model_dump_json()  # the input is left as it was


def test_field_memo_hits_and_gives_the_unmemoised_spans() -> None:
    texts = ["Ana Lima lives at 221B Baker Street, London.", "call +1 415 555 0100", "ok", "Ana Lima lives at x"]
    memo, plain = Redactor(), Redactor(cache_size=0)
    first = memo.detect_many(texts)
    again = memo.detect_many(list(reversed(texts)))
    assert first == plain.detect_many(texts) and first[0]
    # the second call finds every text in the memo: the very lists of the first call come back
    assert all(a is b for a, b in zip(reversed(first), again, strict=True))


def test_words_of_letters_only_are_never_unlisted() -> None:
    from molt.governance.redaction.entity_facts import WordFacts
    from molt.governance.redaction.lexicon import get_lexicon

    facts = WordFacts(get_lexicon())
    assert facts.digitless  # (else unlisted is False for every word and this test says nothing)
    rnd = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyzéßøł'-"
    for _ in range(2000):
        word = "".join(rnd.choice(letters + "0123456789٣") for _ in range(rnd.randint(1, 12)))
        assert facts.unlisted(word) == bool(re.search("[0-9]", word))

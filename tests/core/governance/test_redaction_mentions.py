"""A name found once is redacted wherever the same text or event writes it again
(:mod:`molt.governance.redaction.mentions`)."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from molt.atdp import Event, EventKind, Generation, Message, Observation, Outcome, ToolCall, new_id
from molt.governance.redaction import Redactor, redact_event
from molt.governance.redaction.base import Span
from molt.governance.redaction.lexicon import get_lexicon
from molt.governance.redaction.mentions import with_mentions

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# names no lexicon knows: the detectors find them only where a cue says "name" ("my name is …")
_NAME = st.builds(
    lambda c, v, rest: (c + v + rest).capitalize(),
    st.sampled_from(list("bdfgklmnprstvz")),
    st.sampled_from(["a", "e", "i", "o", "u", "ou", "ae"]),
    st.text(alphabet="bdfgklmnprstvzaeiou", min_size=4, max_size=8),
).filter(lambda w: not get_lexicon().lists(w))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=_NAME, last=_NAME)
def test_a_name_introduced_in_one_field_is_redacted_in_every_field(redactor: Redactor, first: str, last: str) -> None:
    assume(first != last)
    texts = [
        f"Hi, my name is {first} {last} and I need help with my refund.",
        f"Thanks {first}, I found the order. It was placed by {last} on May 3.",
        f"Refund approved for {last}; {first} will get an e-mail.",
    ]
    spans = redactor.detect_many(texts)
    assume(any(texts[0][s.start : s.end] == f"{first} {last}" for s in spans[0]))  # the cue was read
    for text, found in zip(texts, spans, strict=True):
        redacted = redactor.apply(text, found)
        assert first not in redacted and last not in redacted, redacted


def test_the_event_is_the_scope(redactor: Redactor) -> None:
    # the user names themself in the model call; the tool call and its result carry the name bare
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.MODEL_CALL,
        observation=Observation(
            messages=[Message(role="user", content="my name is Zorblat Kwiatkowskyz, where is my parcel?")]
        ),
        action=Generation(text="Refund approved; Zorblat will get an e-mail."),
    )
    redacted, report = redact_event(event, redactor=redactor)
    body = orjson.dumps(redacted.model_dump(mode="json")).decode()
    assert "Zorblat" not in body and "Kwiatkowskyz" not in body, body
    assert any(r.detector == "mention" for r in report.spans)

    tool = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="crm.note", arguments={"note": "Caller said her name is Thessaly Vunderbok."}),
        outcome=Outcome(output={"result": "Saved. Vunderbok has 2 open tickets."}),
    )
    body = orjson.dumps(redact_event(tool, redactor=redactor)[0].model_dump(mode="json")).decode()
    assert "Vunderbok" not in body and "Thessaly" not in body, body


def test_the_memo_holds_what_a_text_yields_alone(redactor: Redactor) -> None:
    # mentions depend on the other fields: a text first seen beside the name it repeats must not
    # carry that mention into an event where the name is nowhere else
    r = Redactor()
    bare = "Refund approved; Brannoch will get an e-mail."
    with_name = r.detect_many(["Hi, my name is Brannoch Ildevert.", bare])
    assert any(bare[s.start : s.end] == "Brannoch" for s in with_name[1])
    assert r.detect_many(["An unrelated field.", bare])[1] == r.detect_many([bare])[0]
    assert not any(bare[s.start : s.end] == "Brannoch" for s in r.detect_many([bare])[0])


def _sp(text: str, value: str, ty: str = "PERSON") -> Span:
    i = text.index(value)
    return Span(i, i + len(value), ty, 0.7, "entities")


def test_whole_values_of_every_name_type_and_only_whole_words() -> None:
    texts = ["We signed with Brightvale Holdings in Ostrava.", "Brightvale Holdings paid. Not Brightvale HoldingsX."]
    found = [[_sp(texts[0], "Brightvale Holdings", "ORGANIZATION"), _sp(texts[0], "Ostrava", "LOCATION")], []]
    out = with_mentions(texts, found)
    got = [(texts[1][s.start : s.end], s.entity_type, s.detector) for s in out[1]]
    assert got == [("Brightvale Holdings", "ORGANIZATION", "mention")]  # not inside "HoldingsX"
    assert out[0] == found[0]


def test_a_word_of_a_name_alone_follows_the_judge_and_the_position() -> None:
    text = "Hi, I am Mark Zorblat. Mark the ticket as urgent; thanks Mark. Zorblat agrees. mark it."
    found = [[_sp(text, "Mark Zorblat")]]
    calls: list[tuple[str, bool]] = []

    def alone(word: str, initial: bool) -> bool:
        calls.append((word, initial))
        return word == "Zorblat" or not initial  # "Mark" names him mid-sentence only

    out = with_mentions([text], found, alone)[0]
    got = [(text[s.start : s.end], s.start) for s in out if s.detector == "mention"]
    # not "mark", not "Mark the ticket"
    assert got == [("Mark", text.index("Mark.")), ("Zorblat", text.index("Zorblat agrees"))]
    assert ("Mark", True) in calls


def test_spans_already_taken_are_kept_and_nothing_added_returns_the_input() -> None:
    text = "Ana Lopez wrote to Lopez Inc."
    found = [[_sp(text, "Ana Lopez"), Span(19, 28, "ORGANIZATION", 0.8, "entities")]]
    out = with_mentions([text], found, lambda w, i: True)
    assert out is found
    assert with_mentions(["no names here"], [[]]) == [[]]


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="ab \x00.Zx", max_size=30), min_size=1, max_size=4),
    data=st.data(),
)
def test_any_texts_and_spans_give_sorted_disjoint_spans_inside_each_text(texts: list[str], data) -> None:  # type: ignore[no-untyped-def]
    found = []
    for t in texts:
        cuts = sorted(data.draw(st.sets(st.integers(0, len(t)), max_size=4)))
        spans = [Span(a, b, "PERSON", 0.7, "entities") for a, b in zip(cuts[::2], cuts[1::2], strict=False) if b > a]
        found.append(spans)
    out = with_mentions(texts, found, lambda w, initial: not initial)
    for t, before, after in zip(texts, found, out, strict=True):
        assert set(before) <= set(after)
        assert after == sorted(after) and all(a.end <= b.start for a, b in itertools.pairwise(after))
        assert all(0 <= s.start < s.end <= len(t) for s in after)
        for s in after:
            if s.detector == "mention":
                value = t[s.start : s.end]  # a value found somewhere, or one of a found name's words
                sources = [u[o.start : o.end] for u, spans in zip(texts, found, strict=True) for o in spans]
                assert any(value == v.strip() or value in [w.rstrip(",.;:") for w in v.split()] for v in sources)


def test_a_one_word_value_at_a_sentence_start_needs_a_word_that_is_no_english() -> None:
    text = "Thanks Mark! Mark the ticket as urgent. Reading is in Berkshire; Reading office closed."
    found = [[_sp(text, "Mark", "PERSON"), Span(text.index("in B") + 3, text.index(";"), "LOCATION", 0.7, "x")]]
    english = {"Mark", "Reading"}
    out = with_mentions([text], found, lambda w, initial: not (initial and w in english))[0]
    assert [text[s.start : s.end] for s in out if s.detector == "mention"] == []
    found = [[_sp(text, "Mark", "PERSON"), _sp(text, "Reading", "LOCATION")]]
    out = with_mentions([text], found, lambda w, initial: not (initial and w in english))[0]
    # only "Reading office" after "; " would be a start too: nothing is added at a start
    assert [text[s.start : s.end] for s in out if s.detector == "mention"] == []
    out = with_mentions([text], found, lambda w, initial: True)[0]
    assert [text[s.start : s.end] for s in out if s.detector == "mention"] == ["Mark", "Reading"]

"""A record's keys say what its values are (:mod:`molt.governance.redaction.fields`): a bare value no
detector could read is redacted by the field that holds it, and a name found that way is redacted
wherever the event repeats it."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.atdp import Event, EventKind, Generation, Message, Observation, Outcome, ToolCall, new_id
from molt.governance.redaction import RedactionPolicy, Redactor, redact_event
from molt.governance.redaction.fields import field_type, key_words, party_name, typed_value
from molt.governance.redaction.lexicon import get_lexicon

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# words shaped like names that no lexicon lists: only the key that holds them says what they are
_WORD = st.builds(
    lambda c, v, rest: (c + v + rest).capitalize(),
    st.sampled_from(list("bdfgklmnprstvz")),
    st.sampled_from(["a", "e", "i", "o", "u", "ou"]),
    st.text(alphabet="bdfgklmnprstvzaeiou", min_size=4, max_size=8),
).filter(lambda w: not get_lexicon().lists(w))


def _styled(words: tuple[str, ...], style: int) -> str:
    """``words`` as a key in one of the cases schemas write: snake, camel, Pascal, kebab, dotted."""
    if style == 0:
        return "_".join(words)
    if style == 1:
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == 2:
        return "".join(w.capitalize() for w in words)
    if style == 3:
        return "-".join(words)
    return ".".join(words)


# (key words, type): the fields of schema.org's Person and PostalAddress and of the payment and
# commerce APIs, in the words each writes them with
_FIELDS = [
    (("first", "name"), "PERSON"), (("given", "name"), "PERSON"), (("family", "name"), "PERSON"),
    (("last", "name"), "PERSON"), (("full", "name"), "PERSON"), (("customer", "name"), "PERSON"),
    (("cardholder", "name"), "PERSON"), (("account", "holder", "name"), "PERSON"), (("surname",), "PERSON"),
    (("company", "name"), "ORGANIZATION"), (("employer",), "ORGANIZATION"),
    (("street", "address"), "ADDRESS"), (("address", "line1"), "ADDRESS"), (("line2",), "ADDRESS"),
    (("billing", "postal", "code"), "ADDRESS"), (("zip",), "ADDRESS"), (("postcode",), "ADDRESS"),
    (("city",), "LOCATION"), (("shipping", "city"), "LOCATION"), (("address", "locality"), "LOCATION"),
]  # fmt: skip


@pytest.mark.parametrize(("words", "expected"), _FIELDS)
def test_a_field_is_typed_by_its_name_in_every_case_style(words: tuple[str, ...], expected: str) -> None:
    for style in range(5):
        key = _styled(words, style)
        assert key_words(key) == words or (style == 2 and len(words) == 1), key
        assert field_type(key) == expected, key


@pytest.mark.parametrize(
    "key",
    ["name", "state", "region", "country", "status", "ip_address", "mac_address", "wallet_address", "email_verified",
     "tool_name", "file_name", "username", "business", "display_name", "product_name", "content", "note"],
)  # fmt: skip
def test_a_key_that_names_a_thing_only_with_other_words_types_nothing(key: str) -> None:
    assert field_type(key) is None


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    first=_WORD, last=_WORD, street=_WORD, town=_WORD, firm=_WORD,
    style=st.integers(0, 4), number=st.integers(1, 999), postcode=st.integers(10000, 99999),
)  # fmt: skip
def test_a_record_from_a_tool_is_redacted_by_its_fields_and_its_names_everywhere(
    redactor: Redactor, first: str, last: str, street: str, town: str, firm: str, style: int, number: int, postcode: int
) -> None:
    record = {
        _styled(("first", "name"), style): first,
        _styled(("last", "name"), style): last,
        _styled(("company", "name"), style): f"{firm} Holdings",
        "address": {
            _styled(("street", "address"), style): f"{number} {street} Lane",
            "city": town,
            _styled(("postal", "code"), style): str(postcode),
            "country": "US",
        },
        "status": "active",
    }
    summary = f"{first} has 2 open orders."
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="crm.lookup", arguments={"customer_id": "C-1182"}),
        # the tool returns its record as JSON text, the common shape of a tool result
        outcome=Outcome(output={"result": orjson.dumps(record).decode(), "summary": summary}),
    )
    redacted, report = redact_event(event, redactor=redactor)
    body = orjson.dumps(redacted.model_dump(mode="json")).decode()
    for value in (first, last, firm, street, town, str(postcode)):
        assert value not in body, (value, body)
    assert "active" in body and '"country":"US"' in body.replace("\\", "")  # what no field types is kept
    # the bare repeat in the summary, where the detectors alone do not take it (a name shaped like a
    # surname, "-sen", "-ova", they do), was found by the field's value
    if not any(s.start == 0 for s in redactor.detect(summary)):
        assert any(r.detector == "mention" and r.field.endswith("summary") for r in report.spans), report.spans


def test_a_bare_name_is_a_partys_only_beside_a_persons_or_an_addresss_fields(redactor: Redactor) -> None:
    assert party_name(["name", "email", "phone"])
    assert party_name(["Name", "line1"])
    assert not party_name(["name", "arguments"])
    assert not party_name(["name", "description", "price"])
    contact = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="lookup_order", arguments={"order_id": "NW-1"}),
        outcome=Outcome(
            output={
                "ship_to": {"name": "Zutazen Teriba", "line1": "12 Kestrel Row", "country": "US"},
                "items": [{"name": "Velotrex Pro charger", "qty": 1}],
                "tool": {"name": "lookup_order", "arguments": "{}"},
            }
        ),
    )
    body = orjson.dumps(redact_event(contact, redactor=redactor)[0].model_dump(mode="json")).decode()
    assert "Zutazen" not in body and "Teriba" not in body, body
    assert "Velotrex Pro charger" in body and "lookup_order" in body, body


def test_an_annotation_or_a_value_of_another_shape_is_not_taken(redactor: Redactor) -> None:
    assert not typed_value("(on file)", "PERSON")
    assert not typed_value("<unknown>", "ADDRESS")
    assert not typed_value("n/a", "PHONE_NUMBER")
    assert not typed_value("none given", "EMAIL_ADDRESS")
    assert typed_value("Zutazen", "PERSON") and typed_value("75160", "ADDRESS")
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="lookup_order", arguments={"order_id": "NW-1"}),
        outcome=Outcome(output={"name": "(on file)", "line1": "(on file)", "phone": "n/a", "status": "packed"}),
    )
    redacted, report = redact_event(event, redactor=redactor)
    assert report.spans == [] or all(r.detector != "json_key" for r in report.spans), report.spans
    assert redacted.outcome.output == event.outcome.output


def test_the_policy_decides_which_fields_are_redacted() -> None:
    only_email = Redactor(RedactionPolicy(entities=frozenset({"EMAIL_ADDRESS"})))
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="crm.lookup", arguments={}),
        outcome=Outcome(output={"first_name": "Zutazen", "email": "z@example.org"}),
    )
    redacted, _ = redact_event(event, redactor=only_email)
    assert redacted.outcome.output["first_name"] == "Zutazen"
    assert "z@example.org" not in orjson.dumps(redacted.model_dump(mode="json")).decode()


def test_a_model_calls_messages_are_not_records(redactor: Redactor) -> None:
    # a message's own "name" (the OpenAI participant name) sits beside role and content, not beside
    # a person's fields: it is left to the detectors, and the conversation is redacted as before
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.MODEL_CALL,
        observation=Observation(messages=[Message(role="user", content="where is my parcel?")]),
        action=Generation(text="It shipped on Monday."),
    )
    redacted, report = redact_event(event, redactor=redactor)
    assert report.spans == []
    assert redacted.model_dump() == event.model_dump()

"""Replacement modes, tenant pseudonyms, structure-aware event redaction, and typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from molt.atdp import Event, EventKind, Generation, Message, Observation, Outcome, ToolCall, new_id
from molt.atdp.models import HiddenState, Passage, TokenTrace, ToolCallRequest
from molt.errors import GovernanceError
from molt.governance.redaction import (
    RedactionPolicy,
    Redactor,
    Span,
    derive_tenant_key,
    load_policy,
    redact_event,
)

KEY_A = "tenant-a-secret-key-0123456789"
KEY_B = "tenant-b-secret-key-0123456789"
TEXT = "Mail ana@example.org, then ana@example.org again, card 4111 1111 1111 1111."


def test_placeholder_mode_numbers_values() -> None:
    text, spans = Redactor().redact(TEXT + " Also bob@example.org")
    assert text == (
        "Mail <EMAIL_ADDRESS_1>, then <EMAIL_ADDRESS_1> again, card <CREDIT_CARD_1>. Also <EMAIL_ADDRESS_2>"
    )
    assert [s.entity_type for s in spans] == [
        "EMAIL_ADDRESS",
        "EMAIL_ADDRESS",
        "CREDIT_CARD",
        "EMAIL_ADDRESS",
    ]
    assert TEXT[spans[0].start : spans[0].end] == "ana@example.org"  # offsets index the original


def test_mask_mode() -> None:
    text, _ = Redactor(RedactionPolicy(mode="mask")).redact("ssn 364-21-3719")
    assert text == "ssn ***********"
    text, _ = Redactor(RedactionPolicy(mode="mask", mask_char="#", mask_length=4)).redact("ssn 364-21-3719")
    assert text == "ssn ####"


def test_pseudonyms_stable_within_tenant_and_differ_across_tenants() -> None:
    a = Redactor(RedactionPolicy(mode="pseudonym", pseudonym_key=KEY_A, tenant_id="a"))
    a2 = Redactor(RedactionPolicy(mode="pseudonym", pseudonym_key=KEY_A, tenant_id="a"))
    b = Redactor(RedactionPolicy(mode="pseudonym", pseudonym_key=KEY_B, tenant_id="b"))
    ta, _ = a.redact("write to ana@example.org")
    assert ta == a2.redact("write to ANA@example.org")[0]  # stable, case-insensitive
    assert ta != b.redact("write to ana@example.org")[0]
    assert ta.startswith("write to <EMAIL_ADDRESS_") and "ana" not in ta


def test_per_entity_modes_and_tenant_keys() -> None:
    key = derive_tenant_key("master-secret-0123456789", "acme")
    assert key.get_secret_value() != derive_tenant_key("master-secret-0123456789", "other").get_secret_value()
    policy = RedactionPolicy(entity_modes={"CREDIT_CARD": "mask"}, pseudonym_key=key)
    text, _ = Redactor(policy).redact("card 4111 1111 1111 1111 mail ana@example.org")
    assert text == "card ******************* mail <EMAIL_ADDRESS_1>"


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="pseudonym_key"):
        RedactionPolicy(mode="pseudonym")
    with pytest.raises(ValueError, match="unknown entity types"):
        RedactionPolicy(entities=frozenset({"NOPE"}))
    with pytest.raises(ValueError):
        RedactionPolicy(surprise=1)  # type: ignore[call-arg]
    p = RedactionPolicy(mode="pseudonym", pseudonym_key=KEY_A)
    assert KEY_A not in p.model_dump_json() and len(p.fingerprint()) == 16


def test_load_policy(tmp_path: Path) -> None:
    assert load_policy(None).name == "default"
    assert load_policy("mask").mode == "mask"
    f = tmp_path / "p.yaml"
    f.write_text("name: acme\nmode: mask\nentities: [EMAIL_ADDRESS]\n")
    assert load_policy(str(f)).entities == frozenset({"EMAIL_ADDRESS"})
    with pytest.raises(GovernanceError, match="registered policies"):
        load_policy("no-such-policy")
    f.write_text("mode: sideways\n")
    with pytest.raises(GovernanceError, match="not valid"):
        load_policy(str(f))


def _event() -> Event:
    return Event(
        trajectory_id=new_id(),
        kind=EventKind.MODEL_CALL,
        observation=Observation(
            messages=[
                Message(role="user", content="I'm Christine Sørensen, mail christine@example.org"),
                Message(role="user", content=[{"type": "text", "text": "card 4111 1111 1111 1111"}]),
            ],
            passages=[Passage(text="Customer ssn 364-21-3719", doc_id="doc-1")],
        ),
        hidden=HiddenState(reasoning="Look up christine@example.org in the CRM"),
        action=Generation(
            model="m",
            text="Calling lookup for christine@example.org",
            tool_calls=[
                ToolCallRequest(
                    id="c1",
                    name="crm_lookup",
                    arguments=json.dumps({"email": "christine@example.org", "n": 3, "password": "hunter22"}),
                )
            ],
            tokens=TokenTrace(prompt_ids=[1, 2], completion_ids=[3], completion_logprobs=[-0.1]),
        ),
    )


def test_redact_event_walks_every_text_field_and_keeps_json_valid() -> None:
    event = _event()
    red, report = redact_event(event)
    dump = red.model_dump_json()
    for secret in ("christine@example.org", "4111 1111 1111 1111", "364-21-3719", "hunter22", "Sørensen"):
        assert secret not in dump
    args = orjson.loads(red.action.tool_calls[0].arguments)  # still valid JSON
    assert args == {"email": "<EMAIL_ADDRESS_1>", "n": 3, "password": "<PASSWORD_1>"}
    assert red.observation.messages[1].content == [{"type": "text", "text": "card <CREDIT_CARD_1>"}]
    assert red.observation.passages[0].doc_id == "doc-1" and red.action.model == "m"
    assert red.action.tokens is None and report.token_trace_dropped
    fields = {s.field for s in report.spans}
    assert {"observation.messages[0].content", "hidden.reasoning", "action.text"} <= fields
    assert any(f.startswith("action.tool_calls[0].arguments") for f in fields)
    assert report.counts["EMAIL_ADDRESS"] == 4 and report.event_id == event.event_id
    assert "christine" not in report.model_dump_json().lower()  # never the original values


def test_redact_event_tool_call_json_structure() -> None:
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="send", arguments={"to": ["a@example.org"], "meta": {"ip": "10.0.0.1", "k": 1}}),
        outcome=Outcome(output={"ok": True, "echo": "sent to a@example.org"}),
    )
    red, report = redact_event(event)
    assert red.action.arguments == {"to": ["<EMAIL_ADDRESS_1>"], "meta": {"ip": "<IP_ADDRESS_1>", "k": 1}}
    assert red.outcome.output == {"ok": True, "echo": "sent to <EMAIL_ADDRESS_1>"}
    assert {s.field for s in report.spans} == {
        "action.arguments.to[0]",
        "action.arguments.meta.ip",
        "outcome.output.echo",
    }


def test_clean_event_is_returned_unchanged() -> None:
    event = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="t", arguments={"q": "ok"}),
    )
    red, report = redact_event(event)
    assert red is event and not report.redacted


class Boom:
    name = "boom"
    entities = frozenset({"PERSON"})

    def detect(self, text: str) -> list[Span]:
        raise RuntimeError("kaput")


def test_failing_detector_raises_governance_error() -> None:
    redactor = Redactor(RedactionPolicy(detectors=("email",)), extra_detectors=[Boom()])
    with pytest.raises(GovernanceError, match="boom"):
        redactor.redact("hello")
    event = _event()
    with pytest.raises(GovernanceError) as info:
        redact_event(event, redactor=redactor)
    assert info.value.event_id == event.event_id and info.value.trajectory_id == event.trajectory_id


def test_redacted_event_keeps_envelope_and_untouched_parts() -> None:
    # only the payload parts that held a redacted value are rebuilt (and revalidated)
    event = _event()
    red, report = redact_event(event)
    assert report.redacted
    envelope = {"event_id", "trajectory_id", "kind", "timestamp", "metadata", "provenance", "schema_version"}
    assert red.model_dump(include=envelope) == event.model_dump(include=envelope)
    assert Event.model_validate(red.model_dump(mode="json")) == red  # still a valid event
    clean = Event(
        trajectory_id=new_id(),
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="t", arguments={"q": "mail ana@example.org"}),
        outcome=Outcome(output={"ok": True}),
    )
    red, _ = redact_event(clean)
    assert red.outcome is clean.outcome and red.action.arguments == {"q": "mail <EMAIL_ADDRESS_1>"}


def test_policy_fingerprint_is_stable_across_processes() -> None:
    # set-valued fields are sorted before hashing, so the hash seed of a process does not change it
    import os
    import subprocess
    import sys

    code = "from molt.governance.redaction import policies; print(policies.get('default').fingerprint())"
    prints = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(prints) == 1 and prints == {RedactionPolicy().fingerprint()}


def _through_dump(event: Event) -> tuple[str, list[tuple[str, int, int, str]]]:
    """What redacting ``event``'s JSON dump gives (the payload dumped whole, walked as dicts and
    validated again): the reference the model walk must agree with, byte for byte."""
    from molt.governance.redaction.walk import PAYLOAD_ORDER, Walker

    walker = Walker(Redactor())
    dumped = event.model_dump(mode="json", include=set(PAYLOAD_ORDER))
    walker.walk(dumped)
    walker.run()
    spans = [(r.field, r.start, r.end, r.entity_type) for r in walker.records]
    if walker.records and isinstance(dumped.get("action"), dict) and dumped["action"].get("tokens") is not None:
        dumped["action"]["tokens"] = None
    merged = {**event.model_dump(mode="json"), **{f: v for f, v in dumped.items() if v is not None}}
    return Event.model_validate(merged).model_dump_json(), spans


def test_model_walk_matches_the_dump_and_leaves_the_event_as_it_was() -> None:
    # redact_event walks the models themselves and copies only the containers it writes to; the
    # result must be what walking the dump and validating it again gives, and the input unchanged
    clean_msg = Message(role="system", content="You are a helpful assistant.")
    event = _event().model_copy(
        update={"outcome": Outcome(output={"rows": [{"note": "ok"}, {"note": "call ana@example.org"}], "n": 2})}
    )
    event = event.model_copy(
        update={"observation": event.observation.model_copy(
            update={"messages": [clean_msg, *event.observation.messages, clean_msg]}
        )}
    )  # fmt: skip
    before = event.model_dump_json()
    red, report = redact_event(event, redactor=Redactor())
    assert event.model_dump_json() == before  # nothing written into the caller's event
    expected_json, expected_spans = _through_dump(event)
    assert red.model_dump_json() == expected_json
    assert [(r.field, r.start, r.end, r.entity_type) for r in report.spans] == expected_spans
    # untouched parts are shared, written ones are new objects
    msgs, old = red.observation.messages, event.observation.messages
    assert msgs[0] is old[0] and msgs[-1] is old[-1] and msgs[1] is not old[1]
    assert red.outcome.output["rows"][0] is event.outcome.output["rows"][0]
    assert red.outcome.output["rows"][1] == {"note": "call <EMAIL_ADDRESS_2>"}  # _1: christine@
    # the same Message object twice: each occurrence is redacted, the object itself is not
    twice = Message(role="user", content="mail bo@example.org")
    ev2 = Event(trajectory_id=new_id(), kind=EventKind.MODEL_CALL, observation=Observation(messages=[twice, twice]))
    red2, _ = redact_event(ev2)
    assert [m.content for m in red2.observation.messages] == ["mail <EMAIL_ADDRESS_1>"] * 2
    assert twice.content == "mail bo@example.org"


def test_a_payload_value_that_is_not_json_is_redacted_through_the_dump() -> None:
    # a model built without validation may hold what JSON has no type for (a datetime, a tuple);
    # the walker cannot tell how it serialises, so the event's dump is walked and validated again
    from datetime import UTC, datetime

    output = {"at": datetime(2026, 1, 2, tzinfo=UTC), "pair": ("x", "mail ana@example.org")}
    event = Event(trajectory_id=new_id(), kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="t"))
    event = event.model_copy(update={"outcome": Outcome.model_construct(output=output)})
    with pytest.warns(UserWarning, match="serializ"):  # pydantic on dumping what it did not validate
        red, report = redact_event(event)
    assert report.counts == {"EMAIL_ADDRESS": 1}
    assert red.outcome.output == {"at": "2026-01-02T00:00:00Z", "pair": ["x", "mail <EMAIL_ADDRESS_1>"]}

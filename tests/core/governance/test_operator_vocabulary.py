"""Operator vocabulary: the organisation and place names of a system prompt that many conversations
share are kept; nothing an end user wrote about themselves is.

Each test runs the default governance pipeline (the one `molt serve` and the documented `Recorder`
line use) on events shaped as the gateway records them.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from molt.atdp import Event, EventKind, Generation, Message, Observation
from molt.atdp.models import FeedbackAction, RewardAnnotation
from molt.capture.hooks import govern_reward
from molt.governance import GovernancePipeline, GovernancePolicy
from molt.governance.redaction import RedactionPolicy
from molt.governance.redaction.vocabulary import OperatorVocabulary

LIBRARY = "You are the help desk of Pinecrest Public Library. Answer the patron's question in one or two sentences."


def _call(conversation: str, system: str, user: str, tenant: str = "acme") -> Event:
    return Event(
        trajectory_id=f"t-{conversation}", session_id=conversation, kind=EventKind.MODEL_CALL,
        observation=Observation(messages=[Message(role="system", content=system), Message(role="user", content=user)]),
        action=Generation(text="Let me check that for you."), metadata={"tenant_id": tenant},
    )  # fmt: skip


def _stored(pipeline: GovernancePipeline, event: Event) -> str:
    res = pipeline.process(event)
    assert res.event is not None, res
    return res.event.model_dump_json()


def _feedback(pipeline: GovernancePipeline, text: str, tenant: str = "acme") -> str:
    res = pipeline.process(Event(trajectory_id="t-fb", kind=EventKind.FEEDBACK, action=FeedbackAction(comment=text),
                                 metadata={"tenant_id": tenant}))
    assert res.event is not None and isinstance(res.event.action, FeedbackAction)
    return res.event.action.comment or ""


def test_a_prompt_shared_by_conversations_keeps_its_names_and_nothing_personal() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    ask = "Hi, I'm Jane Doe (jane.doe@example.com). What is the late fine at Pinecrest Public Library?"
    for i in range(3):  # the third conversation makes the prompt shared; its own event was redacted before
        stored = _stored(pipe, _call(f"c{i}", LIBRARY, ask))
        assert "Pinecrest" not in stored
    stored = _stored(pipe, _call("c3", LIBRARY, ask))
    assert "help desk of Pinecrest Public Library" in stored
    assert "late fine at Pinecrest Public Library?" in stored
    assert "Jane Doe" not in stored and "jane.doe@example.com" not in stored
    # a user's correction arrives later, without the prompt: the name (and its shorter form) is kept
    assert _feedback(pipe, "The late fine at Pinecrest Public Library is 35 cents per day.") == (
        "The late fine at Pinecrest Public Library is 35 cents per day.")
    short = _feedback(pipe, "Maria Garcia says my Pinecrest library book costs 35 cents a day late.")
    assert "Pinecrest library" in short and "Maria Garcia" not in short
    # places and firms the prompt does not name are still redacted
    other = _feedback(pipe, "I used to work at Globex Corporation in Springfield.")
    assert "Globex" not in other and "Springfield" not in other


def test_the_late_reward_reason_path_keeps_the_operators_name() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    for i in range(3):
        _stored(pipe, _call(f"c{i}", LIBRARY, "What is the late fine?"))
    ann = RewardAnnotation(trajectory_id="t-c1", tenant_id="acme", value=0.0, source="user_correction",
                           reason="Wrong: the late fine at Pinecrest Public Library is 35 cents; ask Tom Baker.")
    governed = govern_reward(pipe, ann)
    assert governed.reason is not None
    assert "Pinecrest Public Library is 35 cents" in governed.reason and "Tom Baker" not in governed.reason


def test_one_conversation_repeating_its_prompt_is_not_shared() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    for _ in range(6):
        stored = _stored(pipe, _call("only-one", LIBRARY, "What is the late fine at Pinecrest Public Library?"))
    assert "Pinecrest" not in stored


def test_a_prompt_about_someone_never_counts() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    personal = "You are the assistant of Maria Lopez, a patron of Pinecrest Public Library."
    for i in range(6):
        stored = _stored(pipe, _call(f"c{i}", personal, "What is the late fine at Pinecrest Public Library?"))
    assert "Pinecrest" not in stored and "Maria Lopez" not in stored
    emailed = "You help the patron at maria@example.org of Pinecrest Public Library."
    for i in range(6):
        stored = _stored(pipe, _call(f"d{i}", emailed, "And the fine at Pinecrest Public Library?"))
    assert "Pinecrest" not in stored


def test_a_tenants_vocabulary_is_its_own() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    for i in range(3):
        _stored(pipe, _call(f"c{i}", LIBRARY, "Hello", tenant="acme"))
    assert "Pinecrest Public Library" in _feedback(pipe, "The fine at Pinecrest Public Library is 35 cents.")
    other = _feedback(pipe, "The fine at Pinecrest Public Library is 35 cents.", tenant="globex")
    assert "Pinecrest" not in other


def test_off_when_the_policy_says_so() -> None:
    policy = GovernancePolicy.model_validate(
        {"defaults": {"redaction": {"policy": {"operator_vocabulary_after": 0}}}})
    pipe = GovernancePipeline(policy)
    for i in range(5):
        stored = _stored(pipe, _call(f"c{i}", LIBRARY, "What is the late fine at Pinecrest Public Library?"))
    assert "Pinecrest" not in stored
    with pytest.raises(ValidationError, match="at least 2"):
        RedactionPolicy(operator_vocabulary_after=1)


def test_the_vocabulary_alone() -> None:
    v = OperatorVocabulary(after=2, max_shared=2)
    prompt = "You are the help desk of  Pinecrest Public Library."
    calls: list[str] = []

    def org() -> list[tuple[str, str]]:
        calls.append(prompt)
        return [("ORGANIZATION", "Pinecrest Public Library")]

    assert not v.observe("a", prompt, org) and not v.observe("a", prompt, org)  # one conversation
    assert len(calls) == 1  # the same conversation again is not detected on again
    assert not v and not v.keeps("Pinecrest")
    assert v.observe("b", prompt, org) and v
    assert not v.observe("c", prompt, org) and len(calls) == 2  # shared: decided, no more detection
    assert v.keeps("Pinecrest Public Library") and v.keeps("Pinecrest") and v.keeps("Public  Library")
    assert not v.keeps("Pine") and not v.keeps("Springfield") and not v.keeps("")

    def about_someone() -> list[tuple[str, str]]:
        calls.append("p2")
        return [("PERSON", "Ann Lee"), ("ORGANIZATION", "Pinecrest Public Library")]

    for conversation in "cdef":
        assert not v.observe(conversation, "p2", about_someone)
    assert calls.count("p2") == 1  # about someone, for good
    with pytest.raises(ValueError):
        OperatorVocabulary(after=1)


def test_a_name_the_detector_misses_in_the_prompt_is_still_the_operators() -> None:
    """Whether a capitalised run reads as a name depends on its context: "assistant of Kestrel Bay
    Marina" is not flagged, "at Kestrel Bay Marina" in a correction is. The prompt's text decides."""
    pipe = GovernancePipeline(GovernancePolicy())
    marina = "You are the assistant of Kestrel Bay Marina. Answer the boater's question in one sentence."
    fact = "Berth bookings at Kestrel Bay Marina take the boat's length in metres."
    assert "Kestrel" not in _feedback(pipe, fact)  # detected, and not yet anyone's vocabulary
    for i in range(3):
        _stored(pipe, _call(f"c{i}", marina, "How long may my boat be?"))
    assert _feedback(pipe, fact) == fact


def test_a_prompt_in_content_parts_counts_as_the_same_text() -> None:
    pipe = GovernancePipeline(GovernancePolicy())
    for i in range(3):
        ev = Event(trajectory_id=f"t-{i}", kind=EventKind.MODEL_CALL, metadata={"tenant_id": "acme"},
                   observation=Observation(messages=[
                       Message(role="system", content=[{"type": "text", "text": LIBRARY}]),
                       Message(role="user", content="Hello")]))
        _stored(pipe, ev)
    assert "Pinecrest Public Library" in _feedback(pipe, "The fine at Pinecrest Public Library is 35 cents.")

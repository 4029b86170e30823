"""ATDP data model: events ⟨o, h, a, y, r, m⟩, provenance, and late reward annotations.

An :class:`Event` is one step of an agent trajectory:

- ``observation`` (o): what the agent could see — messages, a tool result, retrieved passages.
- ``hidden`` (h): plan, scratchpad, reasoning, confidence (optional).
- ``action`` (a): what the agent did — a model generation, a tool call, a retrieval query, …
- ``outcome`` (y): the result of the action — output, error, status.
- ``reward`` (r): an immediate reward if one exists. Late rewards are separate
  :class:`RewardAnnotation` records; the causal record is never rewritten.
- ``metadata`` and ``provenance`` (m): cost, tenant, classification, consent, and the versions of
  everything that produced the event.

The payload (o, h, a, y, r) and the envelope (ids, kind, time, metadata, provenance) are hashed
separately (see :mod:`molt.atdp.chain`), so erasing a payload leaves the chain verifiable.

Example::

    from molt.atdp import Event, EventKind, ToolCall, Outcome, new_id

    tid = new_id()
    ev = Event(
        trajectory_id=tid,
        kind=EventKind.TOOL_CALL,
        action=ToolCall(tool_name="lookup_order", arguments={"order_id": "A-17"}),
        outcome=Outcome(status="ok", output={"state": "shipped"}),
    )

One module at ~610 lines because it is one idea: the ATDP event model, the source of the published JSON
schema (one class per action kind; split, the schema's definitions would be spread over files).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from molt.atdp.ids import new_id
from molt.errors import SchemaVersionError

__all__ = [
    "ATDP_VERSION",
    "PAYLOAD_FIELDS",
    "Action",
    "AgentStep",
    "ApprovalRequest",
    "BrowserAction",
    "Classification",
    "Consent",
    "ErrorInfo",
    "Event",
    "EventKind",
    "FeedbackAction",
    "FileAction",
    "Generation",
    "HiddenState",
    "MemoryRead",
    "MemoryWrite",
    "Message",
    "Metadata",
    "Observation",
    "Outcome",
    "OutcomeStatus",
    "Passage",
    "Provenance",
    "RetrievalQuery",
    "RewardAnnotation",
    "RewardSource",
    "TokenTrace",
    "ToolCall",
    "ToolCallRequest",
    "Usage",
    "UserMessage",
    "check_schema_version",
]

#: The ATDP schema version this build writes and reads. A record with another major version is
#: rejected with :class:`~molt.errors.SchemaVersionError`; minor versions are forward compatible.
ATDP_VERSION = "1.0"
_SUPPORTED_MAJOR = ATDP_VERSION.split(".", 1)[0]


def check_schema_version(version: object) -> None:
    """Raise :class:`SchemaVersionError` unless ``version`` is an ATDP 1.x version string."""
    if not isinstance(version, str) or version.split(".", 1)[0] != _SUPPORTED_MAJOR:
        raise SchemaVersionError(
            f"ATDP schema version {version!r} is not supported; this build reads {_SUPPORTED_MAJOR}.x "
            f"and writes {ATDP_VERSION}. Upgrade molt-core or convert the record."
        )

#: Event fields that form the payload (hashed as a salted digest, erasable).
PAYLOAD_FIELDS = ("observation", "hidden", "action", "outcome", "reward")

_DATA = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, ser_json_inf_nan="strings")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class EventKind(StrEnum):
    """What kind of execution boundary an event was captured at."""

    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    RETRIEVAL = "retrieval"
    MEMORY_READ = "memory_read"
    MEMORY_WRITE = "memory_write"
    FILE_ACTION = "file_action"
    BROWSER_ACTION = "browser_action"
    HUMAN_APPROVAL = "human_approval"
    USER_MESSAGE = "user_message"
    FEEDBACK = "feedback"
    AGENT_STEP = "agent_step"


class Classification(StrEnum):
    """Data classification of an event's content (governance uses it for retention and eligibility)."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"


class OutcomeStatus(StrEnum):
    """How an action ended."""

    OK = "ok"
    ERROR = "error"
    PENDING = "pending"
    DENIED = "denied"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class RewardSource(StrEnum):
    """Where a reward came from."""

    USER_CORRECTION = "user_correction"
    USER_FEEDBACK = "user_feedback"
    TEST_RESULT = "test_result"
    HUMAN_LABEL = "human_label"
    JUDGE = "judge"
    ENVIRONMENT = "environment"
    VERIFIER = "verifier"


# --------------------------------------------------------------------------- observation, hidden


class Message(BaseModel):
    """One chat message, OpenAI-style. ``content`` is text or a list of content parts."""

    model_config = _DATA

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[JsonValue] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCallRequest] | None = None


class Passage(BaseModel):
    """A retrieved passage, with the document id and score the retriever gave it."""

    model_config = _DATA

    text: str
    doc_id: str | None = None
    score: float | None = None
    source: str | None = None


class Observation(BaseModel):
    """What the agent could see at this step."""

    model_config = _DATA

    messages: list[Message] | None = None
    text: str | None = None
    passages: list[Passage] | None = None
    data: JsonValue = None


class HiddenState(BaseModel):
    """The agent's internal state, when the framework exposes it."""

    model_config = _DATA

    plan: str | None = None
    reasoning: str | None = None
    scratchpad: str | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0)] | None = None


# --------------------------------------------------------------------------- actions


class ToolCallRequest(BaseModel):
    """A tool call the model asked for inside a generation (OpenAI ``tool_calls`` entry)."""

    model_config = _DATA

    id: str | None = None
    name: str
    arguments: JsonValue = None


class TokenTrace(BaseModel):
    """The exact tokens of a model call, so the call can be trained on.

    ``completion_ids`` are the sampled tokens; ``completion_logprobs[i]`` is the sampling policy's
    log-probability of ``completion_ids[i]``. ``policy_version`` names the weights that sampled them.
    """

    model_config = _DATA

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float] | None = None
    policy_version: str | None = None
    tokenizer: str | None = None

    @model_validator(mode="after")
    def _lengths_match(self) -> TokenTrace:
        if self.completion_logprobs is not None and len(self.completion_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"completion_logprobs has {len(self.completion_logprobs)} entries but completion_ids has "
                f"{len(self.completion_ids)}; give one log-probability per completion token."
            )
        return self


class Generation(BaseModel):
    """A model call's output: text and/or tool calls, with token-level detail when known."""

    model_config = _DATA

    type: Literal["generation"] = "generation"
    model: str | None = None
    text: str | None = None
    tool_calls: list[ToolCallRequest] | None = None
    finish_reason: str | None = None
    sampling: dict[str, JsonValue] | None = None
    tokens: TokenTrace | None = None


class ToolCall(BaseModel):
    """An invocation of a tool by name with arguments (the result goes in ``Event.outcome``)."""

    model_config = _DATA

    type: Literal["tool_call"] = "tool_call"
    tool_name: str = Field(min_length=1)
    call_id: str | None = None
    arguments: JsonValue = None
    tool_version: str | None = None


class RetrievalQuery(BaseModel):
    """A retrieval: the query and which index (the passages go in ``Event.observation``)."""

    model_config = _DATA

    type: Literal["retrieval"] = "retrieval"
    query: str
    index: str | None = None
    top_k: int | None = Field(default=None, ge=1)


class MemoryRead(BaseModel):
    """A read from the agent's memory, by key or query."""

    model_config = _DATA

    type: Literal["memory_read"] = "memory_read"
    key: str | None = None
    query: str | None = None


class MemoryWrite(BaseModel):
    """A write to the agent's memory."""

    model_config = _DATA

    type: Literal["memory_write"] = "memory_write"
    key: str | None = None
    content: JsonValue = None


class FileAction(BaseModel):
    """A file operation (read, write, edit, delete) on a path; ``diff`` for edits."""

    model_config = _DATA

    type: Literal["file_action"] = "file_action"
    operation: Literal["read", "write", "edit", "delete", "list"]
    path: str
    content: str | None = None
    diff: str | None = None


class BrowserAction(BaseModel):
    """A browser operation (navigate, click, type, …)."""

    model_config = _DATA

    type: Literal["browser_action"] = "browser_action"
    operation: str
    url: str | None = None
    target: str | None = None
    value: str | None = None


class ApprovalRequest(BaseModel):
    """A request for human approval (the decision goes in ``Event.outcome``)."""

    model_config = _DATA

    type: Literal["approval"] = "approval"
    request: str
    approver: str | None = None
    options: list[str] | None = None


class UserMessage(BaseModel):
    """A message from the user to the agent."""

    model_config = _DATA

    type: Literal["user_message"] = "user_message"
    content: str | list[JsonValue]


class FeedbackAction(BaseModel):
    """Feedback given inside the conversation (thumbs, a correction)."""

    model_config = _DATA

    type: Literal["feedback"] = "feedback"
    rating: float | None = None
    correction: str | None = None
    comment: str | None = None


class AgentStep(BaseModel):
    """A framework-level step: a chain, graph node, agent, task or crew run."""

    model_config = _DATA

    type: Literal["agent_step"] = "agent_step"
    name: str
    step_type: str | None = None
    inputs: JsonValue = None


Action = Annotated[
    Generation
    | ToolCall
    | RetrievalQuery
    | MemoryRead
    | MemoryWrite
    | FileAction
    | BrowserAction
    | ApprovalRequest
    | UserMessage
    | FeedbackAction
    | AgentStep,
    Field(discriminator="type"),
]

#: Which action types an event of each kind may carry.
_ACTION_FOR_KIND: dict[EventKind, str] = {
    EventKind.MODEL_CALL: "generation",
    EventKind.TOOL_CALL: "tool_call",
    EventKind.RETRIEVAL: "retrieval",
    EventKind.MEMORY_READ: "memory_read",
    EventKind.MEMORY_WRITE: "memory_write",
    EventKind.FILE_ACTION: "file_action",
    EventKind.BROWSER_ACTION: "browser_action",
    EventKind.HUMAN_APPROVAL: "approval",
    EventKind.USER_MESSAGE: "user_message",
    EventKind.FEEDBACK: "feedback",
    EventKind.AGENT_STEP: "agent_step",
}


# --------------------------------------------------------------------------- outcome, metadata


class ErrorInfo(BaseModel):
    """An error as data: the exception type and message, never a raised exception."""

    model_config = _DATA

    type: str
    message: str
    retryable: bool | None = None


class Outcome(BaseModel):
    """The result of the action."""

    model_config = _DATA

    status: OutcomeStatus = OutcomeStatus.OK
    output: JsonValue = None
    error: ErrorInfo | None = None

    @model_validator(mode="after")
    def _error_status(self) -> Outcome:
        if self.error is not None and self.status == OutcomeStatus.OK:
            raise ValueError("outcome.error is set but outcome.status is 'ok'; use status='error'.")
        return self


class Usage(BaseModel):
    """Token usage of a model call."""

    model_config = _DATA

    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)


class Consent(BaseModel):
    """What the data subject or tenant agreed to for this record."""

    model_config = _DATA

    training: bool | None = None
    retention_days: int | None = Field(default=None, ge=0)
    subject_id: str | None = None


def _no_nul(v: str | None) -> str | None:
    # An id with a NUL is stored fine but can never be looked up (the store refuses NUL in a query), so
    # its chain could not be continued or verified: refuse it where the event is made.
    if v is not None and "\x00" in v:
        raise ValueError("ids may not contain NUL characters.")
    return v


class Metadata(BaseModel):
    """Cost, tenancy and data-handling facts about an event."""

    model_config = _DATA

    tenant_id: str | None = None
    agent_id: str | None = None
    task: str | None = None
    model: str | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    usage: Usage | None = None
    cost_usd: float | None = Field(default=None, ge=0)
    classification: Classification = Classification.INTERNAL
    consent: Consent | None = None
    tags: dict[str, str] | None = None

    @field_validator("tenant_id")
    @classmethod
    def _tenant(cls, v: str | None) -> str | None:
        return _no_nul(v)


class Provenance(BaseModel):
    """Versions of everything that produced an event, so it can be reproduced and attributed.

    ``integration`` is the Molt capture adapter (``molt-langchain``, ``gateway``) and
    ``framework`` the agent framework it observed; ``lora_adapter`` is a model weight adapter.
    """

    model_config = _DATA

    policy_version: str | None = None
    harness_fingerprint: str | None = None
    tool_versions: dict[str, str] | None = None
    retrieval_snapshot: str | None = None
    model_checkpoint: str | None = None
    lora_adapter: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    integration: str | None = None
    integration_version: str | None = None


# --------------------------------------------------------------------------- event


class Event(BaseModel):
    """One ATDP event ⟨o, h, a, y, r, m⟩.

    ``event_id`` is a client-generated UUIDv7 (idempotent delivery). ``seq`` is the event's position
    in its trajectory; the Recorder assigns it (and the hash chain) when it is left ``None``.
    """

    model_config = _DATA

    schema_version: str = ATDP_VERSION
    event_id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    trajectory_id: str = Field(min_length=1, max_length=128)
    session_id: str | None = Field(default=None, max_length=256)
    parent_id: str | None = Field(default=None, max_length=128)
    seq: int | None = Field(default=None, ge=0)
    kind: EventKind
    name: str | None = Field(default=None, max_length=512)
    timestamp: datetime = Field(default_factory=_utcnow)

    observation: Observation | None = None
    hidden: HiddenState | None = None
    action: Action | None = None
    outcome: Outcome | None = None
    reward: float | None = None

    metadata: Metadata = Field(default_factory=Metadata)
    provenance: Provenance = Field(default_factory=Provenance)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: str) -> str:
        check_schema_version(v)
        return v

    @field_validator("timestamp")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("timestamp must be timezone-aware (UTC); use datetime.now(UTC).")
        return v.astimezone(UTC)

    @field_validator("event_id", "trajectory_id")  # the ids the store queries by
    @classmethod
    def _ids(cls, v: str | None) -> str | None:
        return _no_nul(v)

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number (no NaN or infinity).")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Event:
        if self.action is not None:
            expected = _ACTION_FOR_KIND[self.kind]
            if self.action.type != expected:
                raise ValueError(
                    f"an event of kind {self.kind.value!r} carries an action of type {expected!r}, "
                    f"not {self.action.type!r}; fix either kind or action."
                )
        if self.parent_id is not None and self.parent_id == self.event_id:
            raise ValueError("parent_id equals event_id; an event cannot be its own parent.")
        return self

    @property
    def tenant_id(self) -> str | None:
        """Shortcut for ``metadata.tenant_id``."""
        return self.metadata.tenant_id


class RewardAnnotation(BaseModel):
    """A late reward, appended after the fact and pointing at an event or a whole trajectory.

    Annotations never change the event they point at; they are joined at read time.
    """

    model_config = _DATA

    schema_version: str = ATDP_VERSION
    annotation_id: str = Field(default_factory=new_id, min_length=1, max_length=128)
    trajectory_id: str = Field(min_length=1, max_length=128)
    event_id: str | None = Field(default=None, max_length=128)
    value: float
    dimensions: dict[str, float] | None = None
    source: RewardSource
    reason: str | None = Field(default=None, max_length=16_384)
    annotator: str | None = None
    tenant_id: str | None = None
    created_at: datetime = Field(default_factory=_utcnow)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, v: str) -> str:
        check_schema_version(v)
        return v

    @field_validator("value")
    @classmethod
    def _finite_value(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("value must be a finite number (no NaN or infinity).")
        return v

    @field_validator("dimensions")
    @classmethod
    def _finite_dims(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for name, x in (v or {}).items():
            if not math.isfinite(x):
                raise ValueError(f"dimension {name!r} must be a finite number.")
        return v

    @field_validator("created_at")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("created_at must be timezone-aware (UTC).")
        return v.astimezone(UTC)

    @field_validator("annotation_id", "trajectory_id", "event_id", "tenant_id")
    @classmethod
    def _ids(cls, v: str | None) -> str | None:
        return _no_nul(v)


Message.model_rebuild()

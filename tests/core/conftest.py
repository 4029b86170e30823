"""Helpers for core tests."""

from __future__ import annotations

from typing import Any

import pytest

from molt.atdp import Event, EventKind, Generation, Outcome, ToolCall, UserMessage


def make_event(tid: str, i: int, *, tenant: str = "acme", parent: str | None = None, **kw: Any) -> Event:
    """A small but realistic event: alternating user message, model call and tool call."""
    md = {"tenant_id": tenant, "agent_id": "support-bot", "task": "orders"}
    match i % 3:
        case 0:
            return Event(trajectory_id=tid, kind=EventKind.USER_MESSAGE, parent_id=parent, metadata=md,
                         action=UserMessage(content=f"message {i}: where is my order?"), **kw)
        case 1:
            return Event(trajectory_id=tid, kind=EventKind.MODEL_CALL, parent_id=parent, metadata=md,
                         action=Generation(model="smollm2", text=f"answer {i}",
                                           tool_calls=[{"id": f"c{i}", "name": "lookup", "arguments": {"i": i}}]),
                         **kw)
        case _:
            return Event(trajectory_id=tid, kind=EventKind.TOOL_CALL, parent_id=parent, metadata=md,
                         action=ToolCall(tool_name="lookup", call_id=f"c{i}", arguments={"i": i}),
                         outcome=Outcome(output={"state": "shipped", "i": i}), **kw)


@pytest.fixture(scope="session")
def event_factory():  # type: ignore[no-untyped-def]
    """The :func:`make_event` helper as a fixture."""
    return make_event

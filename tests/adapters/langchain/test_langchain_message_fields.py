"""The message fields the mapper reads come out as ``getattr`` gives them, however the message object
provides them: a pydantic field, a pydantic extra, a property of a subclass, a plain object's own
``__getattr__`` — or not at all (the mapper reads a missing field without asking pydantic to raise)."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from molt.atdp import EventKind
from molt_langchain import MoltCallbackHandler


class CallingHuman(HumanMessage):
    """A subclass whose tool calls come from a property (no such field, nothing in __dict__)."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [{"id": "p1", "name": "from_property", "args": {"k": "v"}}]


class Plain:
    """Not pydantic: every attribute comes from ``__getattr__``."""

    def __getattr__(self, name: str) -> Any:
        return {"type": "ai", "content": "plain", "name": "pl", "tool_call_id": "ptc"}.get(name) or _missing(name)


def _missing(name: str) -> Any:
    raise AttributeError(name)



def test_message_fields_as_getattr_gives_them(rec: Any) -> None:
    messages = [
        HumanMessage("hi"),                                   # no tool_calls, no tool_call_id: missing
        AIMessage(content="a", tool_call_id="extra-id", name="al"),  # tool_call_id only as a pydantic extra
        CallingHuman("c"),
        ToolMessage("t", tool_call_id="tc1", name="ignored-for-tool-role"),
        Plain(),
    ]
    handler = MoltCallbackHandler(rec, strict=True)
    for _ in range(2):  # the second call reads each message back from the mapper's cache
        run = uuid.uuid4()
        handler.on_chat_model_start({"name": "m"}, [messages], run_id=run)
        handler.on_llm_end(LLMResult(generations=[[ChatGeneration(message=AIMessage(content="ok"))]]), run_id=run)
    assert handler.flush(10, deliver=True)
    sink = rec.sink_
    evs = [e for t in sorted({r.x["trajectory_id"] for r in sink.events.values()}) for e in sink.trajectory_events(t)]
    calls = [e for e in evs if e.kind == EventKind.MODEL_CALL]
    assert len(calls) == 2
    for ev in calls:
        got = [(m.role, m.content, m.name, m.tool_call_id,
                [(c.id, c.name, c.arguments) for c in m.tool_calls or []]) for m in ev.observation.messages]
        assert got == [
            ("user", "hi", None, None, []),
            ("assistant", "a", "al", "extra-id", []),
            ("user", "c", None, None, [("p1", "from_property", {"k": "v"})]),
            ("tool", "t", None, "tc1", []),
            ("assistant", "plain", "pl", "ptc", []),
        ]

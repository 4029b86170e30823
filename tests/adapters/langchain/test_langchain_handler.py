"""molt-langchain beyond the conformance suite: plain LangChain (no graph), streaming, the global hook,
approval decisions, hidden LangGraph runs, the framework check and the README quickstart."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate

import molt_langchain
from molt.atdp import EventKind, Generation, OutcomeStatus
from molt.capture.adapt import set_default_recorder
from molt_langchain import MoltCallbackHandler

from .scripted import ScriptedChatModel, explode, lookup

ROOT = Path(__file__).resolve().parents[3]



def _events(handler: MoltCallbackHandler, rec: Any) -> list[Any]:
    assert handler.flush(10, deliver=True)
    sink = rec.sink_
    tids = sorted({(r.x if hasattr(r, "x") else r["x"])["trajectory_id"] for r in sink.events.values()})
    return [e for t in tids for e in sink.trajectory_events(t)]


def test_lcel_chain_with_manual_tool_loop(rec: Any) -> None:
    """No LangGraph: a prompt | model chain, then tools called by hand, all under one parent run."""
    handler = MoltCallbackHandler(rec, tenant_id="acme", strict=True)
    chain = ChatPromptTemplate.from_messages([("system", "be brief"), ("human", "{q}")]) | ScriptedChatModel()
    ai = chain.invoke({"q": "help gamma"}, {"callbacks": [handler]})
    for call in ai.tool_calls:
        tool = {"lookup": lookup, "explode": explode}[call["name"]]
        with contextlib.suppress(ValueError):
            tool.invoke(call, {"callbacks": [handler]})
    evs = _events(handler, rec)
    kinds = [e.kind for e in evs]
    assert kinds.count(EventKind.MODEL_CALL) == 1 and kinds.count(EventKind.TOOL_CALL) == 2
    [gen] = [e for e in evs if e.kind == EventKind.MODEL_CALL]
    assert isinstance(gen.action, Generation) and gen.action.finish_reason == "tool_calls"
    assert [m.role for m in gen.observation.messages] == ["system", "user"]
    assert gen.metadata.usage.total_tokens == 21 and gen.metadata.tenant_id == "acme"
    [bad] = [e for e in evs if e.kind == EventKind.TOOL_CALL and e.outcome.status == OutcomeStatus.ERROR]
    assert bad.outcome.error.type == "ValueError"
    # the chain run is the model call's parent; the tools ran outside it, as their own roots
    [seq] = [e for e in evs if e.kind == EventKind.AGENT_STEP and e.parent_id is None]
    assert seq.name == "RunnableSequence" and gen.parent_id == seq.event_id


def test_model_stream_closed_early_is_cancelled(rec: Any) -> None:
    handler = MoltCallbackHandler(rec, strict=True)
    model = ScriptedChatModel()
    msgs = [HumanMessage("help delta"), ToolMessage("ok", tool_call_id="x")]
    stream = model.stream(msgs, {"callbacks": [handler]})
    first = next(stream)
    stream.close()
    assert first.content == "done: "
    [ev] = _events(handler, rec)
    assert ev.kind == EventKind.MODEL_CALL and ev.outcome.status == OutcomeStatus.CANCELLED
    assert handler.stats.open_spans == 0


def test_async_stream_to_the_end(rec: Any) -> None:
    import asyncio

    handler = MoltCallbackHandler(rec, strict=True)
    msgs = [HumanMessage("help eps"), ToolMessage("ok", tool_call_id="x")]

    async def go() -> str:
        return "".join([str(c.content) async for c in ScriptedChatModel().astream(msgs, {"callbacks": [handler]})])

    assert asyncio.run(go()) == "done: eps"
    [ev] = _events(handler, rec)
    assert ev.action.text == "done: eps" and ev.metadata.usage.total_tokens == 33


def test_global_hook_captures_runs_without_callbacks(rec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(molt_langchain.ENV_VAR, raising=False)
    model = ScriptedChatModel()
    msgs = [HumanMessage("help zeta"), ToolMessage("ok", tool_call_id="x")]
    handler = molt_langchain.enable(rec, tenant_id="globex")
    try:
        model.invoke(msgs)
        model.invoke(msgs, {"callbacks": [handler]})  # an explicit handler is not added twice
    finally:
        molt_langchain.disable()
    model.invoke(msgs)  # not captured any more
    evs = _events(handler, rec)
    assert len(evs) == 2 and {e.metadata.tenant_id for e in evs} == {"globex"}


def test_env_var_alone_uses_the_default_recorder(rec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import molt_langchain.handler as h

    monkeypatch.setattr(h, "_shared", None)
    set_default_recorder(rec)
    monkeypatch.setenv(molt_langchain.ENV_VAR, "1")
    try:
        ScriptedChatModel().invoke([HumanMessage("help eta"), ToolMessage("ok", tool_call_id="x")])
        evs = _events(MoltCallbackHandler(), rec)
    finally:
        set_default_recorder(None)
    assert [e.kind for e in evs] == [EventKind.MODEL_CALL]


def test_rejected_approval_is_denied_not_error(rec: Any) -> None:
    pytest.importorskip("langgraph")
    from langgraph.types import Command

    from .scripted import build_graph

    graph = build_graph()
    handler = MoltCallbackHandler(rec, strict=True)
    cfg = {"configurable": {"thread_id": str(uuid.uuid4())}, "callbacks": [handler]}
    graph.invoke({"messages": [HumanMessage("help theta")]}, cfg)
    graph.invoke(Command(resume="reject"), cfg)
    evs = _events(handler, rec)
    approvals = [e for e in evs if e.kind == EventKind.HUMAN_APPROVAL]
    assert [a.outcome.status for a in approvals] == [OutcomeStatus.PENDING, OutcomeStatus.DENIED]
    assert approvals[0].action.options == ["approve", "reject"]
    assert approvals[1].parent_id == approvals[0].event_id
    assert not [
        e for e in evs if e.outcome and e.outcome.status == OutcomeStatus.ERROR and e.kind != EventKind.TOOL_CALL
    ]
    assert len({e.trajectory_id for e in evs}) == 1 and {e.session_id for e in evs} == {
        cfg["configurable"]["thread_id"]
    }


def test_hidden_runs_pass_their_parent_on(rec: Any) -> None:
    """Runs tagged ``langgraph:hidden`` record nothing; their children hang under the visible parent."""
    handler = MoltCallbackHandler(rec, strict=True)
    root, hidden, tool = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    handler.on_chain_start({"name": "outer"}, {"x": 1}, run_id=root)
    handler.on_chain_start({"name": "ChannelWrite"}, {}, run_id=hidden, parent_run_id=root, tags=["langgraph:hidden"])
    handler.on_tool_start({"name": "lookup"}, "q", run_id=tool, parent_run_id=hidden, inputs={"query": "q"})
    handler.on_tool_end("fine", run_id=tool)
    handler.on_chain_end({}, run_id=hidden)
    handler.on_chain_end({"y": 2}, run_id=root)
    evs = _events(handler, rec)
    assert [e.name for e in evs] == ["lookup", "outer"]
    assert evs[0].parent_id == evs[1].event_id


def test_framework_version_is_checked_at_import() -> None:
    code = (
        "import importlib.metadata as m; v = m.version\n"
        "m.version = lambda d: '0.3.9' if d == 'langchain-core' else v(d)\n"
        "try:\n    import molt_langchain\n"
        "except Exception as e:\n    print(type(e).__name__, e, *getattr(e, '__notes__', []), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("AdapterError|molt-langchain needs langchain-core>=1.0, but found 0.3.9.")
    assert "install it with: pip install" in out

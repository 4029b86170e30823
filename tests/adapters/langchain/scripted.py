"""The conformance story for LangChain: a scripted chat model, two tools, a retriever, and a LangGraph
graph that pauses for human approval.

The chat model is a real ``BaseChatModel`` whose answers depend only on the conversation (so runs are
deterministic and concurrent runs share one model): asked for help, it calls ``lookup`` and
``explode``; once it has seen tool results, it answers ``done: <marker>``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import tool

from molt.testing import FAIL_TOOL, HUGE_TEXT_CHARS, OK_TOOL, huge_blob

MODEL = "scripted-model"

try:  # LangGraph is optional for molt-langchain; the graph story needs it
    from langgraph.graph.message import add_messages

    class State(TypedDict):
        messages: Annotated[list[BaseMessage], add_messages]
except ImportError:  # pragma: no cover - exercised only without langgraph
    pass


def _marker(messages: list[BaseMessage]) -> tuple[str, bool]:
    first = next(m for m in messages if isinstance(m, HumanMessage))
    words = str(first.content).split()
    return words[1], "huge" in words


class ScriptedChatModel(BaseChatModel):
    """Tool calls first, then the final answer; reports usage like a real provider."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _respond(self, messages: list[BaseMessage]) -> AIMessage:
        marker, _ = _marker(messages)
        meta = {"model_name": MODEL, "finish_reason": "stop"}
        if not any(isinstance(m, ToolMessage) for m in messages):
            calls = [
                {"id": f"call-{marker}-1", "name": OK_TOOL, "args": {"query": marker}},
                {"id": f"call-{marker}-2", "name": FAIL_TOOL, "args": {"reason": marker}},
            ]
            return AIMessage(
                content="",
                tool_calls=calls,
                response_metadata={**meta, "finish_reason": "tool_calls"},
                usage_metadata={"input_tokens": 12, "output_tokens": 9, "total_tokens": 21},
            )
        return AIMessage(
            content=f"done: {marker}",
            response_metadata=meta,
            usage_metadata={"input_tokens": 30, "output_tokens": 3, "total_tokens": 33},
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._respond(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        msg = self._respond(messages)
        if msg.tool_calls:
            chunks = [
                {"name": tc["name"], "args": json.dumps(tc["args"]), "id": tc["id"], "index": i}
                for i, tc in enumerate(msg.tool_calls)
            ]
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=chunks,  # type: ignore[arg-type]
                    usage_metadata=msg.usage_metadata,
                    response_metadata=msg.response_metadata,
                )
            )
            return
        words = str(msg.content).split(" ")
        for i, w in enumerate(words):
            last = i == len(words) - 1
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content=w + ("" if last else " "),
                    usage_metadata=msg.usage_metadata if last else None,
                    response_metadata=msg.response_metadata if last else {},
                )
            )


@tool
def lookup(query: str) -> Any:
    """Look something up."""
    if "huge" in query:
        return json.dumps(
            {"text": f"result for {query} " + "lorem ipsum " * (HUGE_TEXT_CHARS // 12), "image": huge_blob()}
        )
    return f"result for {query}"


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"explode failed for {reason}")


class ScriptedRetriever(BaseRetriever):
    """Two passages about the query."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [
            Document(page_content=f"passage one about {query}", id="doc-1", metadata={"source": "kb", "score": 0.9}),
            Document(page_content=f"passage two about {query}", id="doc-2", metadata={"source": "kb", "score": 0.7}),
        ]


def request(marker: str, huge: bool = False) -> str:
    """The user's request for a run."""
    return f"help {marker}" + (" huge" if huge else "")


def build_graph(*, approvals: bool = True, model: BaseChatModel | None = None) -> Any:
    """agent → tools → retrieve → approve (interrupt) → agent → end, with an in-memory checkpointer
    (``model``: the scripted model, or a wrapper around it)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    model = model if model is not None else ScriptedChatModel()
    retriever = ScriptedRetriever()
    tools = {OK_TOOL: lookup, FAIL_TOOL: explode}

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def run_tools(state: State) -> dict[str, Any]:
        out: list[BaseMessage] = []
        _, huge = _marker(state["messages"])
        for tc in state["messages"][-1].tool_calls:  # type: ignore[attr-defined]
            call = {**tc, "args": {k: (f"{v} huge" if huge else v) for k, v in tc["args"].items()}}
            try:
                out.append(tools[tc["name"]].invoke(call))
            except Exception as exc:  # the error goes back to the model, the agent goes on
                out.append(ToolMessage(content=f"error: {exc}", tool_call_id=tc["id"], status="error"))
        return {"messages": out}

    def retrieve(state: State) -> dict[str, Any]:
        marker, _ = _marker(state["messages"])
        docs = retriever.invoke(marker)
        return {"messages": [HumanMessage(content="context: " + " | ".join(d.page_content for d in docs))]}

    def approve(state: State) -> dict[str, Any]:
        decision = interrupt({"question": "May the agent answer?", "options": ["approve", "reject"]})
        return {"messages": [HumanMessage(content=f"decision: {decision}")]}

    def route(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END  # type: ignore[attr-defined]

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", run_tools)
    g.add_node("retrieve", retrieve)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "retrieve")
    if approvals:
        g.add_node("approve", approve)
        g.add_edge("retrieve", "approve")
        g.add_edge("approve", "agent")
    else:
        g.add_edge("retrieve", "agent")
    return g.compile(checkpointer=InMemorySaver())


def config(handle: Any) -> dict[str, Any]:
    """A fresh thread, with ``handle`` as the callback when given."""
    cfg: dict[str, Any] = {"configurable": {"thread_id": f"thread-{uuid.uuid4()}"}}
    if handle is not None:
        cfg["callbacks"] = [handle]
    return cfg


def answer(state: dict[str, Any]) -> str:
    """The final answer in a graph's output state."""
    return str(state["messages"][-1].content)

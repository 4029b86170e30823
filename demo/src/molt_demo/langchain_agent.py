"""The agent's LangChain side: its model client (``ChatOpenAI`` against Molt's gateway, tools bound with
``bind_tools``) and its tools (LangChain ``StructuredTool``\\s), behind the same interfaces the agent uses
under replay, so one agent function serves live traffic and counterfactual replays alike."""

from __future__ import annotations

from typing import Any

import orjson

from molt.atdp.models import ErrorInfo, Outcome, OutcomeStatus
from molt.replay import ToolFailed
from molt_demo.traffic import MODEL

__all__ = ["LangChainModel", "LangChainTools"]


class LangChainModel:
    """The agent's model client for live runs: LangChain ``ChatOpenAI`` against the gateway.

    It offers the same ``chat(messages, tools=..., **sampling)`` the agent uses under replay, so the
    one agent function serves live traffic and counterfactual replays alike.
    """

    def __init__(self, base_url: str, api_key: str, *, agent: str, task: str, trajectory_id: str,
                 model: str = MODEL, session_id: str | None = None):
        from langchain_openai import ChatOpenAI

        headers = {"x-molt-agent": agent, "x-molt-task": task, "x-molt-trajectory": trajectory_id}
        if session_id is not None:  # the gateway routes a session, not the trajectory, when it has one
            headers["x-molt-session"] = session_id
        self.llm = ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=0, timeout=60,
                              default_headers=headers)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **sampling: Any) -> Any:
        from langchain_core.messages import convert_to_messages

        from molt.replay.episode import Reply

        llm: Any = self.llm.bind_tools(tools) if tools else self.llm
        ai = llm.invoke(convert_to_messages(messages), **sampling)
        calls = [{"id": c["id"], "name": c["name"], "arguments": c["args"]} for c in ai.tool_calls]
        msg: dict[str, Any] = {"role": "assistant", "content": ai.content or None}
        if calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": orjson.dumps(c["arguments"]).decode()}}
                                 for c in calls]
        return Reply(ai.content or None, calls, msg)


class LangChainTools:
    """The world's tools as LangChain ``StructuredTool``\\s; an exception becomes :class:`ToolFailed`,
    as the agent expects from any tool box."""

    def __init__(self, world: Any):
        from langchain_core.tools import StructuredTool

        self.tools = {fn.__name__: StructuredTool.from_function(fn, name=fn.__name__,
                                                                description=(fn.__doc__ or fn.__name__))
                      for fn in (world.lookup_order, world.refund, world.search_kb)}

    def call(self, name: str, **arguments: Any) -> Any:
        try:
            return self.tools[name].invoke(arguments)
        except Exception as exc:
            raise ToolFailed(name, Outcome(status=OutcomeStatus.ERROR,
                                           error=ErrorInfo(type=type(exc).__name__, message=str(exc)))) from None

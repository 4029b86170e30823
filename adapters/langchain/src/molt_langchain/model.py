"""The hook where a LangChain agent gets its live policy version: a chat-model wrapper.

LangChain has no hook that may edit a model call's messages (callbacks only observe), so the version
is applied by wrapping the chat model: :class:`MoltChatModel` is a ``BaseChatModel`` that converts the
call to the OpenAI shape, applies the live version with the gateway's harness code
(:meth:`molt.capture.instrumentor.Instrumentor.apply_version`), maps the result back to LangChain
messages and tool schemas, calls the wrapped model, and maps renamed tools in the answer back to the
agent's names. It works wherever a chat model goes: ``create_react_agent(handler.wrap(model), tools)``,
a LangGraph node, a chain.

What is recorded: the wrapper's own run is the one LangChain reports to callbacks (the wrapped model
is called through its ``_generate``/``_stream``, so no second event), with the messages as the agent
built them — the recording stays the agent, as replay needs it — and ``provenance.policy_version`` /
``harness_fingerprint`` saying which version was applied on top.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, SystemMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from molt.harness import Applied

__all__ = ["MoltChatModel"]


class MoltChatModel(BaseChatModel):
    """A chat model with the live policy version of a :class:`~molt_langchain.MoltCallbackHandler`
    applied to every call (build it with ``handler.wrap(model)``).

    Fail open: without a version, or when applying it fails, the call goes to the wrapped model as the
    agent made it.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: BaseChatModel
    molt: Any = Field(exclude=True)

    @property
    def _llm_type(self) -> str:
        return f"molt:{self.model._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return dict(self.model._identifying_params)

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind ``tools`` in the OpenAI shape; the version's tool rewrites apply per call, then the
        wrapped model's own ``bind_tools`` formats them for its provider."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    # ------------------------------------------------------------------ applying

    def _prepare(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> tuple[list[BaseMessage],
                                                                                    dict[str, Any], Applied | None]:
        tools = kwargs.pop("tools", None)
        tool_choice = kwargs.pop("tool_choice", None)
        applied: Applied | None = None
        try:
            applied = self.molt.apply_version(convert_to_openai_messages(messages), tools)
            if applied.fingerprint is not None:
                messages = _with_applied(messages, applied)
                tools = applied.tools
        except Exception as exc:  # the call goes out as the agent made it
            self.molt.capture.fail(exc)
            applied = None
        if tools:
            bound = self.model.bind_tools(tools, **({"tool_choice": tool_choice} if tool_choice is not None else {}))
            kwargs = {**getattr(bound, "kwargs", {}), **kwargs}
        return messages, kwargs, applied

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        messages, kwargs, applied = self._prepare(messages, kwargs)
        result = self.model._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        return _mapped_result(result, applied)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        messages, kwargs, applied = self._prepare(messages, kwargs)
        result = await self.model._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        return _mapped_result(result, applied)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        if not _streams(self.model):  # LangChain streams any model; one that cannot answers in one chunk
            yield _as_chunk(self._generate(messages, stop=stop, run_manager=run_manager, **kwargs))
            return
        messages, kwargs, applied = self._prepare(messages, kwargs)
        for chunk in self.model._stream(messages, stop=stop, run_manager=run_manager, **kwargs):
            yield _mapped_chunk(chunk, applied)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        if not _streams(self.model):
            yield _as_chunk(await self._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs))
            return
        messages, kwargs, applied = self._prepare(messages, kwargs)
        async for chunk in self.model._astream(messages, stop=stop, run_manager=run_manager, **kwargs):
            yield _mapped_chunk(chunk, applied)


def _streams(model: BaseChatModel) -> bool:
    return type(model)._stream is not BaseChatModel._stream


def _as_chunk(result: ChatResult) -> ChatGenerationChunk:
    g = result.generations[0]
    m = g.message
    chunk = AIMessageChunk(
        content=m.content,
        id=m.id,
        response_metadata=dict(getattr(m, "response_metadata", {}) or {}),
        usage_metadata=getattr(m, "usage_metadata", None),
        tool_call_chunks=[{"name": c["name"], "args": json.dumps(c["args"]), "id": c.get("id"), "index": i,
                           "type": "tool_call_chunk"} for i, c in enumerate(getattr(m, "tool_calls", None) or [])],
    )
    return ChatGenerationChunk(message=chunk, generation_info=g.generation_info)


def _with_applied(messages: list[BaseMessage], applied: Applied) -> list[BaseMessage]:
    """The agent's messages with what the harness changed: the system message, and the names of
    renamed tools in earlier tool calls (the model must see the names it is offered now)."""
    out = list(messages)
    first = applied.messages[0] if applied.messages else None
    if first is not None and first.get("role") in ("system", "developer"):
        system = SystemMessage(content=first["content"])
        if out and isinstance(out[0], SystemMessage):
            out[0] = out[0].model_copy(update={"content": first["content"]})
        else:
            out.insert(0, system)
    if applied.tool_names:
        forward = {client: shown for shown, client in applied.tool_names.items()}
        out = [_renamed(m, forward) if isinstance(m, AIMessage) and m.tool_calls else m for m in out]
    return out


def _renamed(m: AIMessage, names: dict[str, str]) -> AIMessage:
    calls = [{**c, "name": names.get(c["name"], c["name"])} for c in m.tool_calls]
    return m.model_copy(update={"tool_calls": calls})


def _mapped_result(result: ChatResult, applied: Applied | None) -> ChatResult:
    if applied is None or not applied.tool_names:
        return result
    gens = []
    for g in result.generations:
        msg = g.message
        if isinstance(msg, AIMessage) and msg.tool_calls:
            msg = _renamed(msg, applied.tool_names)
            g = ChatGeneration(message=msg, generation_info=g.generation_info)
        gens.append(g)
    return ChatResult(generations=gens, llm_output=result.llm_output)


def _mapped_chunk(chunk: ChatGenerationChunk, applied: Applied | None) -> ChatGenerationChunk:
    if applied is None or not applied.tool_names:
        return chunk
    msg = chunk.message
    if isinstance(msg, AIMessageChunk) and msg.tool_call_chunks:
        parts = [{**c, "name": applied.client_tool_name(str(c["name"])) if c.get("name") else c.get("name")}
                 for c in msg.tool_call_chunks]
        msg = msg.model_copy(update={"tool_call_chunks": parts,
                                     "tool_calls": [{**c, "name": applied.client_tool_name(str(c["name"]))}
                                                    for c in msg.tool_calls]})
        return ChatGenerationChunk(message=msg, generation_info=chunk.generation_info)
    return chunk

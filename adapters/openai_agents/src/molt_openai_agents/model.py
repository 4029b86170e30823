"""The hook where an Agents SDK agent gets its live policy version: a ``Model`` wrapper.

Tracing processors only observe, so the version is applied by wrapping the agent's model:
:class:`MoltModel` receives each call's instructions and tools, applies the live version with the
gateway's harness code (:meth:`molt.capture.instrumentor.Instrumentor.apply_version`) — the
instructions become the system message it edits (system prompt, memories retrieved for the last user
message, skills), function tools are re-described, re-parameterised or renamed — calls the wrapped
model, and maps renamed tools in the answer back to the agent's names, so the SDK runs the agent's
own tools. Hosted tools and handoffs pass through unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import FunctionTool
from agents.models.interface import Model

from molt.harness import Applied

__all__ = ["MoltModel"]


class MoltModel(Model):
    """``model`` with the live version of a :class:`~molt_openai_agents.MoltTracingProcessor` applied
    to every call (build it with ``processor.wrap(model)`` and give it to ``Agent(model=…)``).

    Fail open: without a version, or when applying it fails, the call goes out as the agent made it.
    """

    def __init__(self, model: Model, molt: Any):
        self.model = model
        self.molt = molt

    def _prepare(self, system_instructions: str | None, input: Any, tools: list[Any]
                 ) -> tuple[str | None, Any, list[Any], Applied | None]:
        try:
            messages = [{"role": "system", "content": system_instructions or ""}, *_user_turns(input)]
            fn_tools = [t for t in tools if isinstance(t, FunctionTool)]
            specs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                       "parameters": t.params_json_schema}} for t in fn_tools]
            applied = self.molt.apply_version(messages, specs or None)
            if applied.fingerprint is None:
                return system_instructions, input, tools, None
            instructions = str(applied.messages[0]["content"]) if applied.messages else system_instructions
            rewritten = dict(zip((id(t) for t in fn_tools), applied.tools or [], strict=False))
            new_tools = [_rewritten(t, rewritten[id(t)]["function"]) if id(t) in rewritten else t for t in tools]
            if applied.tool_names and isinstance(input, list):
                forward = {client: shown for shown, client in applied.tool_names.items()}
                input = [_renamed(item, forward) for item in input]
            return instructions, input, new_tools, applied
        except Exception as exc:
            self.molt.capture.fail(exc)
            return system_instructions, input, tools, None

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: list[Any],
                           output_schema: Any, handoffs: list[Any], tracing: Any, **kwargs: Any) -> Any:
        """See ``agents.models.interface.Model.get_response``."""
        system_instructions, input, tools, applied = self._prepare(system_instructions, input, tools)
        response = await self.model.get_response(system_instructions, input, model_settings, tools, output_schema,
                                                 handoffs, tracing, **kwargs)
        if applied is not None and applied.tool_names:
            response.output = [_renamed(item, applied.tool_names) for item in response.output]
        return response

    async def stream_response(self, system_instructions: str | None, input: Any, model_settings: Any,
                              tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any,
                              **kwargs: Any) -> AsyncIterator[Any]:
        """See ``agents.models.interface.Model.stream_response``."""
        system_instructions, input, tools, applied = self._prepare(system_instructions, input, tools)
        async for event in self.model.stream_response(system_instructions, input, model_settings, tools,
                                                      output_schema, handoffs, tracing, **kwargs):
            if applied is not None and applied.tool_names:
                event = _renamed_event(event, applied.tool_names)
            yield event

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.model.close()


def _user_turns(input: Any) -> list[dict[str, Any]]:
    """The user messages of a call's input (what a retrieving harness searches memories with)."""
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    out = []
    for item in input or []:
        role = item.get("role") if isinstance(item, dict) else getattr(item, "role", None)
        if role == "user":
            content = item.get("content") if isinstance(item, dict) else getattr(item, "content", None)
            out.append({"role": "user", "content": content if isinstance(content, str | list) else str(content)})
    return out


def _rewritten(tool: FunctionTool, fn: dict[str, Any]) -> FunctionTool:
    return dataclasses.replace(tool, name=fn["name"], description=fn.get("description") or "",
                               params_json_schema=fn.get("parameters") or tool.params_json_schema)


def _renamed(item: Any, names: dict[str, str]) -> Any:
    """A function-call item (dict or model) with its tool name mapped through ``names``."""
    if isinstance(item, dict):
        if item.get("type") == "function_call" and item.get("name") in names:
            return {**item, "name": names[item["name"]]}
        return item
    if getattr(item, "type", None) == "function_call" and getattr(item, "name", None) in names:
        return item.model_copy(update={"name": names[item.name]})
    return item


def _renamed_event(event: Any, names: dict[str, str]) -> Any:
    item = getattr(event, "item", None)
    if item is not None:
        return event.model_copy(update={"item": _renamed(item, names)})
    response = getattr(event, "response", None)
    if response is not None and getattr(response, "output", None):
        return event.model_copy(update={"response": response.model_copy(
            update={"output": [_renamed(i, names) for i in response.output]})})
    return event

"""``@molt.replayable``: mark the agent entry point a replay re-runs.

The decorated function keeps working as before in production; registering it lets
:func:`molt.replay.replay_episode` (and ``molt replay … --agent``) find it by name and re-run it under
a candidate policy. The contract — one small interface, no gateway needed:

``agent(input, model, tools)`` (sync or ``async``), where

- ``input`` is the trajectory's initial user message (a string);
- ``model`` is a :class:`molt.replay.ModelClient` pinned to the candidate policy version:
  ``model.chat(messages, tools=None, **sampling)`` (``await model.achat(…)`` in async agents) returns a
  :class:`molt.replay.Reply` with ``.text``, ``.tool_calls`` and ``.message`` (the assistant message to
  append); ``model.openai()`` gives an ``openai.AsyncOpenAI`` client over an in-process transport for
  agents written against the OpenAI SDK;
- ``tools`` is a :class:`molt.replay.ToolBox`: ``tools.call(name, **arguments)``,
  ``tools.retrieve(query, index=…)``, ``tools.memory(key=…)`` — served from the cassette in a replay,
  by your live functions when recording;

and the return value is the episode's final answer, scored by the task's verifier.

Example::

    import molt

    @molt.replayable(name="support", verifier="contains:45 days")
    def support(input, model, tools):
        reply = model.chat([{"role": "user", "content": input}])
        return reply.text
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from molt.registry import Registry

__all__ = ["AGENTS", "ReplayableAgent", "replayable"]


@dataclass(frozen=True)
class ReplayableAgent:
    """A registered agent entry point; calling it calls the function unchanged."""

    fn: Callable[..., Any]
    name: str
    verifier: Any = None  # a Verifier, a verifier spec (dict or "kind:arg" string), or None
    is_async: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


#: Replayable agents by name (``@molt.replayable`` registers here).
AGENTS: Registry[ReplayableAgent] = Registry("replayable agent")


@overload
def replayable(fn: Callable[..., Any], /) -> ReplayableAgent: ...
@overload
def replayable(*, name: str | None = None, verifier: Any = None) -> Callable[[Callable[..., Any]], ReplayableAgent]: ...


def replayable(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
               verifier: Any = None) -> Any:
    """Register ``fn`` as a replayable agent (see the module docstring); usable bare or with arguments."""

    def wrap(f: Callable[..., Any]) -> ReplayableAgent:
        agent = ReplayableAgent(fn=f, name=name or f"{f.__module__}:{f.__qualname__}", verifier=verifier,
                                is_async=inspect.iscoroutinefunction(f))
        AGENTS.unregister(agent.name)  # re-decorating (a reloaded module) replaces the entry
        AGENTS.register(agent.name, agent)
        return agent

    return wrap(fn) if fn is not None else wrap

"""The conformance story for the OpenAI Agents SDK: a worker agent with ``lookup`` and ``explode``
tools (and, for handoff tests, a triage agent in front), on a chat-completions model served by the
loopback stub in :mod:`.stub`."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, function_tool
from openai import AsyncOpenAI

from molt.testing import HUGE_TEXT_CHARS, huge_blob


@function_tool
def lookup(query: str) -> str:
    """Look something up."""
    if query.endswith(" huge"):
        return json.dumps(
            {"text": f"result for {query} " + "lorem ipsum " * (HUGE_TEXT_CHARS // 12), "image": huge_blob()}
        )
    return f"result for {query}"


def _report(ctx: Any, error: Exception) -> str:
    return f"error: {error}"


# A failure_error_function of its own: the SDK then puts the exception text in the span (its
# default handler redacts it), and the model sees the error as the tool's result.
@function_tool(failure_error_function=_report)
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"explode failed for {reason}")


def model(url: str) -> OpenAIChatCompletionsModel:
    """The stub's model, through the real OpenAI client (no retries: a failure shows at once)."""
    return OpenAIChatCompletionsModel(
        model="stub-model", openai_client=AsyncOpenAI(base_url=url, api_key="test", max_retries=0)
    )


def worker(url: str, handle: Any = None, **kw: Any) -> Agent[Any]:
    """The agent of the conformance story (its model wrapped by ``handle`` when it applies versions)."""
    m: Any = model(url)
    if getattr(handle, "live", None) is not None:
        m = handle.wrap(m)
    return Agent(name="worker", instructions="work", tools=[lookup, explode], model=m, **kw)


def run_config(marker: str) -> RunConfig:
    """A named workflow, grouped by marker (the group id becomes the session id)."""
    return RunConfig(workflow_name="conformance", group_id=f"group-{marker}")

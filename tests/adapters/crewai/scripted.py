"""The conformance story for CrewAI: one agent with ``lookup`` and ``explode`` tools, one task, on an
OpenAI-compatible model served by the loopback stub in :mod:`..openai_stub`."""

from __future__ import annotations

import json
from typing import Any

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool

from molt.testing import HUGE_TEXT_CHARS, huge_blob


@tool("lookup")
def lookup(query: str) -> str:
    """Look something up."""
    if query.endswith(" huge"):
        return json.dumps(
            {"text": f"result for {query} " + "lorem ipsum " * (HUGE_TEXT_CHARS // 12), "image": huge_blob()}
        )
    return f"result for {query}"


@tool("explode")
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"explode failed for {reason}")


def crew(url: str, marker: str, *, huge: bool = False) -> Crew:
    """A one-agent, one-task crew for ``marker`` (a crew object serves one kickoff at a time)."""
    llm = LLM(model="openai/stub-model", base_url=url, api_key="test")
    agent = Agent(
        role="worker",
        goal="help",
        backstory="a careful worker",
        tools=[lookup, explode],
        llm=llm,
        max_iter=4,
        verbose=False,
    )
    task = Task(
        description=f"help {marker}" + (" huge" if huge else ""),
        expected_output="an answer",
        agent=agent,
        name=f"task-{marker}",
    )
    return Crew(agents=[agent], tasks=[task], name=f"crew-{marker}", verbose=False)


def answer(output: Any) -> str:
    """The crew's final answer."""
    return str(output.raw)

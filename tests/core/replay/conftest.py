"""Fixtures for replay tests: a store, a support agent, a memory-aware stub policy, recorded windows."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from molt.backends import StubBackend
from molt.replay import LiveTools, ReplayAgent, record_episode, replayable, save_trajectories
from molt.store import Store

ROOT = Path(__file__).resolve().parents[3]

KB_TOOL = {"type": "function", "function": {
    "name": "search_kb", "description": "Search the Acme knowledge base.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}

FACT = "Acme's refund window is 45 days."
UNRELATED = "The Paris office closes at 6pm."
REFUND_QUESTIONS = [f"What is the refund window for Acme? (ticket {i})" for i in range(8)]
ORDER_QUESTIONS = [f"Where is my order A-{17 + i}?" for i in range(4)]

_WORD = re.compile(r"[a-z]{5,}")


class FactStub(StubBackend):
    """The deterministic stub policy, plus: when a memory in the system message shares a content word
    with the user's question, it answers with that memory (as a model that reads its context would)."""

    def _answer(self, req: Any) -> Any:
        sys = req.messages[0].get("content") if req.messages and req.messages[0].get("role") == "system" else ""
        users = [m for m in req.messages if m.get("role") == "user"]
        if sys and "Relevant memories:" in sys and users:
            question = set(_WORD.findall(str(users[-1].get("content", "")).lower()))
            for line in sys.split("Relevant memories:", 1)[1].splitlines():
                fact = line.removeprefix("- ").strip()
                if fact and question & set(_WORD.findall(fact.lower())):
                    self.calls += 1
                    return fact, None, fact
        return super()._answer(req)


def kb_search(query: str) -> Any:
    """The live knowledge base: it knows orders, not the refund policy (the missing fact)."""
    m = re.search(r"A-\d+", query)
    return {"order": m.group(0), "state": "shipped"} if m else "no results"


def support_check(answer: Any, ctx: Any) -> None:
    """Unit-test-style verifier: refund questions need the window, order questions the state."""
    if "refund" in ctx.input.lower():
        assert "45 days" in str(answer), "the refund window is missing"
    else:
        assert "shipped" in str(answer), "the order state is missing"


@replayable(name="test-support", verifier=support_check)
def support_agent(input: str, model: Any, tools: Any) -> Any:
    """A small tool-using support agent (sync)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Acme support."},
                                      {"role": "user", "content": input}]
    reply = None
    for _ in range(4):
        reply = model.chat(messages, tools=[KB_TOOL], temperature=0)
        messages.append(reply.message)
        if not reply.tool_calls:
            return reply.text
        for c in reply.tool_calls:
            out = tools.call(c["name"], **c["arguments"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": orjson.dumps(out).decode()})
    return reply.text if reply else None


def live_tools() -> LiveTools:
    live = LiveTools()
    live.register("search_kb", kb_search)
    return live


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "store", auto_compact=False)
    yield s
    s.close()


@pytest.fixture
def stub_policy() -> ReplayAgent:
    return ReplayAgent(FactStub())


async def record_window(store: Store, policy: ReplayAgent, questions: list[str]) -> list[str]:
    """Record one trajectory per question with the live tools; returns their ids."""
    items = []
    for q in questions:
        events, rewards, _ = await record_episode("test-support", q, policy, live_tools(), tenant_id="acme",
                                                  task="support")
        items.append((events, rewards))
    save_trajectories(store, items)
    return [ev[0].trajectory_id for ev, _ in items]


@pytest.fixture(scope="session")
def policy_model_dir() -> Path:
    """The converted SmolLM2 policy, shared across tests and runs (converted once)."""
    from molt.backends.model import ensure_policy_model

    home = Path(os.environ.get("MOLT_TEST_MODEL_HOME", ROOT / ".molt" / "test-models"))
    return ensure_policy_model(home)

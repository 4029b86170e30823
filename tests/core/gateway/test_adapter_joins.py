"""One record per run with the adapter attached *and* the model behind the gateway (what the LangChain,
CrewAI and Agents SDK READMEs show): real LangChain (``create_react_agent`` over ``ChatOpenAI``) pointed at
a real gateway over HTTP, with ``MoltCallbackHandler`` recording through ``GatewayRecorder``.

Each run is one trajectory — the gateway's model calls (token traces, served provenance) and the handler's
graph steps and tool calls — of the handler's tenant and agent, written by one writer (every chain
verifies), and rewardable by the id the agent sees on its answer (``response_metadata["id"]``). Before,
each run landed twice: the handler's trajectory (``acme``) and the gateway's (``default``), unlinked.
Under tenant keys the join holds inside the key's tenant only.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from molt.atdp import EventKind

RUNS = 4


def _runs(served: Any, key: str) -> tuple[list[str], Any]:
    pytest.importorskip("langchain_openai", reason="langchain-openai is installed in the main environment")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    from molt.capture.handover import GatewayRecorder
    from molt_langchain import MoltCallbackHandler

    @tool
    def lookup_order(order_id: str) -> str:
        """The shipping state of an order."""
        return f"{order_id}: shipped"

    recorder = GatewayRecorder(served.url, api_key=key)
    handler = MoltCallbackHandler(recorder, tenant_id="acme", agent_id="support")
    model = ChatOpenAI(base_url=served.base_url, api_key=key, model="stub", max_retries=0,
                       default_headers=handler.gateway_headers())
    agent = create_react_agent(model, [lookup_order])
    calls = []
    for i in range(RUNS):
        result = agent.invoke(
            {"messages": [("user", f'Where is order A-{i}? [[stub:call=lookup_order {{"order_id": "A-{i}"}}]]')]},
            {"callbacks": [handler]})
        assert f"A-{i}: shipped" in result["messages"][-1].content
        calls.append(result["messages"][-1].response_metadata["id"])
    assert handler.flush(30)
    assert recorder.stats.accepted > 0 and recorder.stats.dropped == 0
    recorder.close()
    return calls, handler


def _one_verified_trajectory_per_run(served: Any, runs: int, owner: tuple[str, str]) -> dict[str, list[Any]]:
    """Each stored trajectory's events by its id, after checking there is one per run, each verifies and all of
    it is ``owner``'s (tenant, agent)."""
    served.flush()
    tids = served.store.trajectory_ids()
    assert len(tids) == runs, f"{len(tids)} trajectories for {runs} runs"
    out = {}
    for tid in tids:
        evs = served.store.trajectory(tid).events
        assert served.store.verify(tid).ok
        assert {(e.metadata.tenant_id, e.metadata.agent_id) for e in evs} == {owner}
        out[tid] = evs
    return out


@pytest.mark.parametrize("keys", [False, True], ids=["open", "keyed"])
def test_langchain_via_gateway_and_handler_is_one_trajectory_per_run(serve: Any, keys: bool) -> None:
    served = serve(keys=keys)
    key = "sk-acme-writer" if keys else "sk-local"
    calls, _ = _runs(served, key)
    tids = _one_verified_trajectory_per_run(served, RUNS, ("acme", "support"))
    for evs in tids.values():
        by = {(e.kind, e.provenance.integration) for e in evs}
        # the gateway's model calls (with their token traces) and the handler's steps and tool call
        assert (EventKind.MODEL_CALL, "gateway") in by and (EventKind.AGENT_STEP, "molt-langchain") in by
        assert (EventKind.TOOL_CALL, "molt-langchain") in by
        # the handler's copies of the gateway's model calls are not recorded twice
        assert sum(e.kind == EventKind.MODEL_CALL for e in evs) == 2
        assert all(e.action.tokens is not None for e in evs if e.kind == EventKind.MODEL_CALL)
        ids = {e.event_id for e in evs}
        assert all(e.parent_id is None or e.parent_id in ids for e in evs)  # one tree, no dangling parent
    # the answer's id rewards the run's trajectory
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers={"authorization": f"Bearer {key}",
                                                                  "x-molt-tenant": "acme"},
                   json={"call_id": calls[0], "value": 1, "source": "verifier"})
    assert r.status_code == 200, r.text
    served.flush()
    [rewarded] = [t for t in tids if served.store.trajectory(t).rewards]
    assert any(e.provenance.integration == "molt-langchain" for e in served.store.trajectory(rewarded).events)


def test_openai_agents_sdk_via_gateway_and_processor_is_one_trajectory_per_run(serve: Any) -> None:
    """The Agents SDK on the Responses API (its default) through the gateway, MoltTracingProcessor recording
    through it: one trajectory per run, joined by the ``resp_…`` ids of the response spans."""
    agents = pytest.importorskip("agents", reason="openai-agents is installed in the main environment")
    import asyncio

    from openai import AsyncOpenAI

    from molt.capture.handover import GatewayRecorder
    from molt_openai_agents import MoltTracingProcessor

    served = serve(keys=True)
    key = "sk-acme-writer"

    @agents.function_tool
    def lookup_order(order_id: str) -> str:
        """The shipping state of an order."""
        return f"{order_id}: shipped"

    recorder = GatewayRecorder(served.url, api_key=key)
    processor = MoltTracingProcessor(recorder, tenant_id="acme", agent_id="support")
    agents.set_trace_processors([processor])
    agents.set_tracing_disabled(False)  # another test of this process may have turned tracing off
    try:
        async def main() -> list[str]:
            client = AsyncOpenAI(base_url=served.base_url, api_key=key, max_retries=0,
                                 default_headers=processor.gateway_headers())
            agent = agents.Agent(name="support", instructions="Answer in one sentence.", tools=[lookup_order],
                                 model=agents.OpenAIResponsesModel(model="stub", openai_client=client))
            out = []
            for i in range(RUNS):
                r = await agents.Runner.run(
                    agent, f'Where is order A-{i}? [[stub:call=lookup_order {{"order_id": "A-{i}"}}]]')
                assert f"A-{i}: shipped" in r.final_output
                out.append(r.last_response_id)
            return out

        calls = asyncio.run(main())
        assert processor.flush(30)
    finally:
        agents.set_trace_processors([])
        recorder.close()
    tids = _one_verified_trajectory_per_run(served, RUNS, ("acme", "support"))
    for evs in tids.values():
        assert sum(e.kind == EventKind.MODEL_CALL for e in evs) == 2
        assert {e.provenance.integration for e in evs if e.kind == EventKind.MODEL_CALL} == {"gateway"}
        assert (EventKind.TOOL_CALL, "molt-openai-agents") in {(e.kind, e.provenance.integration) for e in evs}
    r = httpx.post(served.url + "/v1/molt/rewards/call", headers={"authorization": f"Bearer {key}"},
                   json={"call_id": calls[0], "value": 1})
    assert r.status_code == 200, r.text


CREW = """
import os, sys
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
from crewai import LLM, Agent, Crew, Task
from molt.capture.handover import GatewayRecorder
from molt_crewai import MoltEventListener

url, key, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
recorder = GatewayRecorder(url, api_key=key)
listener = MoltEventListener(recorder, tenant_id="acme", agent_id="crew")
llm = LLM(model="openai/stub", base_url=url + "/v1", api_key=key, extra_headers=listener.gateway_headers())
for i in range(runs):
    clerk = Agent(role="Support clerk", goal="Answer order questions", backstory="Knows the orders.", llm=llm)
    crew = Crew(agents=[clerk], tasks=[Task(description=f"Where is order A-{i}?", expected_output="Its state.",
                                            agent=clerk)])
    print(crew.kickoff().raw)
assert listener.flush(30), recorder.stats
print("STATS", recorder.stats)
"""


def test_crewai_via_gateway_and_listener_is_one_trajectory_per_run(serve: Any, tmp_path: Any) -> None:
    """CrewAI (its own environment, ``MOLT_CREWAI_PYTHON``) through the gateway, MoltEventListener recording
    through it: one trajectory per crew run, joined by the ``response_id`` of CrewAI's LLM-call events."""
    import os
    import subprocess
    from pathlib import Path

    python = os.environ.get("MOLT_CREWAI_PYTHON") or str(Path(__file__).resolve().parents[3] / ".venv-crewai"
                                                          / "bin" / "python")
    if not Path(python).exists():
        pytest.skip(f"no CrewAI environment at {python} (scripts/setup.sh makes .venv-crewai)")
    served = serve(keys=True)
    script = tmp_path / "crew.py"
    script.write_text(CREW)
    runs = 2
    out = subprocess.run([python, str(script), served.url, "sk-acme-writer", str(runs)], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "OPENAI_API_KEY": "unused"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    tids = _one_verified_trajectory_per_run(served, runs, ("acme", "crew"))
    for evs in tids.values():
        assert {e.provenance.integration for e in evs if e.kind == EventKind.MODEL_CALL} == {"gateway"}
        assert (EventKind.AGENT_STEP, "molt-crewai") in {(e.kind, e.provenance.integration) for e in evs}


def test_claude_agent_sdk_via_gateway_and_hooks_is_one_trajectory_per_run(serve: Any, tmp_path: Any) -> None:
    """The Claude Agent SDK with no Claude login: its bundled Claude Code calls the gateway's Messages API
    (``ANTHROPIC_BASE_URL``), MoltClaudeHooks record through GatewayRecorder, and ``hooks.watch`` names each
    answer's ``msg_…`` id: one trajectory per run (the prompt, the turn, the gateway's model call)."""
    import asyncio
    from pathlib import Path

    sdk = pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk is installed in the main environment")
    if not (Path(sdk.__file__).parent / "_bundled" / "claude").exists():
        pytest.skip("this claude-agent-sdk build bundles no Claude Code")
    from molt.capture.handover import GatewayRecorder
    from molt_claude_agent import MoltClaudeHooks

    served = serve(keys=False)
    home = tmp_path / "home"
    home.mkdir()
    recorder = GatewayRecorder(served.url, api_key="sk-local")
    hooks = MoltClaudeHooks(recorder, tenant_id="acme", agent_id="coder")
    env = {"ANTHROPIC_BASE_URL": served.url, "ANTHROPIC_API_KEY": "sk-local", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "stub",
           "ANTHROPIC_CUSTOM_HEADERS": "X-Molt-Tenant: acme\nX-Molt-Agent: coder", "HOME": str(home),
           "CLAUDE_CONFIG_DIR": str(home / ".claude"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1"}
    options = hooks.attach(sdk.ClaudeAgentOptions(allowed_tools=["Read"], model="stub", env=env, cwd=str(tmp_path)))
    runs = 2

    async def main() -> None:
        for i in range(runs):
            kinds = [type(m).__name__ async for m in hooks.watch(sdk.query(prompt=f"help {i}", options=options))]
            assert kinds[-1] == "ResultMessage", kinds

    try:
        asyncio.run(asyncio.wait_for(main(), 300))
        assert hooks.flush(30)
    finally:
        recorder.close()
    tids = _one_verified_trajectory_per_run(served, runs, ("acme", "coder"))
    for evs in tids.values():
        assert {(e.kind, e.provenance.integration) for e in evs} >= {
            (EventKind.MODEL_CALL, "gateway"), (EventKind.USER_MESSAGE, "molt-claude-agent"),
            (EventKind.AGENT_STEP, "molt-claude-agent")}
        assert sum(e.kind == EventKind.MODEL_CALL for e in evs) == 1

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


@pytest.mark.parametrize("keys", [False, True], ids=["open", "keyed"])
def test_langchain_via_gateway_and_handler_is_one_trajectory_per_run(serve: Any, keys: bool) -> None:
    served = serve(keys=keys)
    key = "sk-acme-writer" if keys else "sk-local"
    calls, _ = _runs(served, key)
    served.flush()
    tids = served.store.trajectory_ids()
    assert len(tids) == RUNS, f"{len(tids)} trajectories for {RUNS} runs"
    for tid in tids:
        evs = served.store.trajectory(tid).events
        assert served.store.verify(tid).ok
        assert {(e.metadata.tenant_id, e.metadata.agent_id) for e in evs} == {("acme", "support")}
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

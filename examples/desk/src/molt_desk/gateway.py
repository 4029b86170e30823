"""The desk agent captured through the gateway only, as a company's own agent would be.

:class:`GatewayDesk` runs a real gateway (``molt serve``'s app: keys per tenant, the capture recorder,
the live policy versions bound to its router, memories retrieved per request) over the scripted
:class:`~molt_desk.world.DeskModel`, and drives the desk through it as a plain OpenAI tool-calling loop
that knows only the base URL: no ``@molt.replayable`` entry point, and agent ids that none is
registered under (:func:`gateway_agent`). The traffic carries no label: no ``X-Molt-Task``, so no
``metadata.task`` — the plane clusters by what the requests, tool errors and corrections say.
Outcomes arrive the way production sends them: the desk's checker posts a late ``verifier`` reward
per trajectory, users post corrections (``/v1/molt/rewards/trajectory``).

Which consumer sent a request (one wants JSON, one prose) is the checker's own knowledge, never the
traffic's: it remembers the requests it checked, and :func:`register_checkers` registers it as the
agents' checker (``AGENT_VERIFIERS``) so that a replay of a request is judged as the original was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from molt.capture import Recorder
from molt.control.memory import MemoryStore, RetrievalHarness
from molt.gateway import Gateway, GatewayConfig, create_app
from molt.gateway.binding import GatewayBinding
from molt.gateway.loopback import ServerThread
from molt.governance.access import KeyRing, Role
from molt.replay.verifiers import AGENT_VERIFIERS, CallableVerifier, VerifyContext, build_verifier
from molt_desk.world import LEGACY_AGENT, DeskModel, World, desk_tools, verify

__all__ = ["GatewayDesk", "gateway_agent", "register_checkers"]

_VERIFIER = build_verifier(verify)
#: The checker's memory of which consumer (the desk's task) sent each request it checked, by trajectory id.
_CONSUMER: dict[str, str] = {}


def gateway_agent(agent: str) -> str:
    """The id the gateway-captured twin of a desk agent runs under (no entry point is registered for it)."""
    return f"{agent}-via-gateway"


def _check(answer: Any, ctx: VerifyContext) -> Any:
    """The desk's checker on a request it checked before (a replay of it): as its consumer needs."""
    task = _CONSUMER.get(ctx.trajectory_id or "")
    return _VERIFIER.score(answer, VerifyContext(input=ctx.input, trajectory_id=ctx.trajectory_id, task=task)).reward


_CHECKER = CallableVerifier(_check)


def register_checkers(agents: set[str]) -> None:
    """The desk's checker as the checker of each gateway-captured desk agent (what judges its replays)."""
    for agent in agents:
        AGENT_VERIFIERS.register(gateway_agent(agent), _CHECKER)


class GatewayDesk:
    """A gateway over ``backend`` recording into ``store``, and the desk agent as its HTTP client.

    Args:
        store: the store the gateway records into (and the plane reads).
        registry: the version registry whose live versions the gateway serves.
        backend: the scripted desk model the gateway serves.
        tenants: one API key is made per tenant.
        spool: the recorder's spool directory.
    """

    def __init__(self, store: Any, registry: Any, backend: DeskModel, tenants: set[str], spool: Path):
        self.keys = {t: f"sk-desk-{t}" for t in sorted(tenants)}
        ring = KeyRing.from_mapping({k: (t, Role.ADMIN) for t, k in self.keys.items()})
        self.recorder = Recorder(store, spool_dir=spool, fsync="never")
        self.gateway = Gateway([backend], recorder=self.recorder, keyring=ring, store=store,
                               harness=RetrievalHarness(MemoryStore(store)),
                               config=GatewayConfig(health_interval_s=0))
        self.model = backend.model
        self.binding = GatewayBinding(self.gateway, registry, model=self.model)
        self.binding.sync()
        self._server = ServerThread(create_app(self.gateway), name="molt-desk-gateway")
        self.url = self._server.__enter__().url

    def sync(self) -> None:
        """Serve the registry's current live versions (after a promotion)."""
        self.binding.sync()

    def ask(self, tenant: str, agent: str, question: str, world: World) -> tuple[str, str | None]:
        """One conversation of the desk agent ``agent`` (a plain loop: ask, run the tools, ask again,
        up to five model calls). Returns the trajectory id and the answer."""
        tools = desk_tools(clear_ids=agent != LEGACY_AGENT)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Acme's support assistant."},
                                          {"role": "user", "content": question}]
        headers = {"Authorization": f"Bearer {self.keys[tenant]}", "X-Molt-Agent": gateway_agent(agent)}
        tid = ""
        with httpx.Client(base_url=self.url + "/v1", timeout=60) as http:
            for _ in range(5):
                r = http.post("/chat/completions", headers=headers,
                              json={"model": self.model, "messages": messages, "tools": tools, "temperature": 0})
                r.raise_for_status()
                tid = r.headers["x-molt-trajectory"]
                msg = r.json()["choices"][0]["message"]
                messages.append({k: v for k, v in msg.items() if v is not None})
                if not msg.get("tool_calls"):
                    return tid, msg.get("content")
                for c in msg["tool_calls"]:
                    fn = c["function"]
                    try:
                        out: Any = getattr(world, fn["name"])(**orjson.loads(fn["arguments"] or "{}"))
                    except Exception as exc:  # the agent reports a tool error to the model, as the desk does
                        out = {"error": f"{type(exc).__name__}: {exc}"}
                    content = out if isinstance(out, str) else orjson.dumps(out).decode()
                    messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})
        return tid, None

    def check(self, tenant: str, tid: str, question: str, task: str, answer: str | None) -> bool:
        """Run the desk's checker on the answer (``task``: which consumer asked) and post its verdict as
        a late ``verifier`` reward."""
        _CONSUMER[tid] = task
        v = _VERIFIER.score(answer, VerifyContext(input=question, trajectory_id=tid, task=task))
        self.reward(tenant, tid, v.reward, "verifier", None if v.success else v.detail)
        return v.success

    def reward(self, tenant: str, tid: str, value: float, source: str, reason: str | None) -> None:
        """A late reward on trajectory ``tid`` through the gateway's feedback endpoint."""
        with httpx.Client(base_url=self.url, timeout=60) as http:
            r = http.post("/v1/molt/rewards/trajectory", headers={"Authorization": f"Bearer {self.keys[tenant]}"},
                          json={"trajectory_id": tid, "value": value, "source": source, "reason": reason})
            r.raise_for_status()

    def flush(self) -> None:
        """Wait until everything captured so far is in the store."""
        if not self.recorder.flush(timeout=120, deliver=True):
            raise RuntimeError("The gateway's recorder did not deliver its records in 120 s.")

    def close(self) -> None:
        self._server.__exit__(None, None, None)
        self.recorder.close()

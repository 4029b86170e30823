"""The gateway's core, apart from HTTP: authenticate, place the call in a trajectory, route it, apply
the harness, call the backend (with a timeout and one failover), answer, and record.

:class:`Gateway` is what the FastAPI app (:mod:`molt.gateway.app`) drives; tests and embedders can
drive it directly too. One module at ~650 lines because it is one idea: that call path, in its order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from molt.atdp.ids import new_id
from molt.atdp.models import OutcomeStatus
from molt.backends import openai_wire as wire
from molt.backends.base import BaseBackend, ChatRequest, CompletionRequest, Delta, Result, StreamEnd, StreamItem
from molt.backends.upstream import RelayedEvent
from molt.capture.tenancy import TrajectoryNamespace, store_tenant
from molt.errors import (
    BackendError,
    BackendStreamError,
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    InvalidRequest,
    MoltError,
    PermissionDenied,
)
from molt.gateway.agents import AgentDirectory
from molt.gateway.call_record import CallRecord, CallRecorder, StreamAssembler, reply_message, tool_results
from molt.gateway.durable import DurableAcks
from molt.gateway.health import CaptureHealth
from molt.gateway.metrics import Metrics
from molt.gateway.router import Route, Router, RoutingTable, VersionSpec
from molt.gateway.sessions import Resolution, Sessions, TrajectoryState
from molt.governance.access import OPEN_KEY_NAME, KeyRing, Principal, Role
from molt.harness import Applied, HarnessApplier, StaticHarness, belongs_to

__all__ = ["MOLT_METADATA_KEYS", "Call", "Gateway", "GatewayConfig", "Passthrough", "passthrough_metadata"]

log = logging.getLogger("molt.gateway")
#: The event-loop lag monitor's timer (seconds).
LAG_TICK_S = 0.1

#: The caller of a gateway without keys: its one tenant, and the platform operator too.
_OPEN = Principal(tenant_id="default", role=Role.OPERATOR, key_name=OPEN_KEY_NAME)


class GatewayConfig(BaseModel):
    """Gateway settings (all optional).

    - ``max_body_bytes``: request body cap, larger bodies get 413 (default 8 MiB; 1 KiB – 1 GiB).
    - ``backend_timeout_s``: time allowed for a backend's answer, and for each streamed chunk
      (default 120 s).
    - ``health_interval_s``: seconds between backend health checks; 0 turns them off (default 5).
    - ``failover``: retry once on another backend when one is down (default on).
    - ``max_sessions``: sessions / trajectories / answers remembered for linking calls (default 200,000).
    - ``session_idle_s``: …each forgotten when not used for this long (default 1,800 s; ``None``: only
      ``max_sessions`` bounds them). Runs that never end (orphaned) are evicted by it.
    - ``harness_timeout_s``: time a harness that does I/O (memory retrieval) may take per request; past
      it the request is served with the version's static harness and the fallback counted (default 2 s).
    - ``ack_after_durable``: answer a call only once its record is in the recorder's fsynced spool
      (:mod:`molt.gateway.durable`; ``molt serve --ack-after-durable``). Off by default: calls are
      answered first and recorded after, and a gateway killed in between loses the calls it answered
      in the last moments (the acknowledgement window, measured in the gateway README).
    - ``strict_health``: ``/health`` answers 503 (not 200) while capture is degraded — records dropped,
      spool writes failing, or a backlog (:mod:`molt.gateway.health`; ``molt serve --strict-health``).
    - ``feedback_per_minute``: feedback one API key may send a minute (default 120; :mod:`molt.gateway.feedback`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_body_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30)
    backend_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    health_interval_s: float = Field(default=5.0, ge=0)
    failover: bool = True
    max_sessions: int = Field(default=200_000, ge=100)
    session_idle_s: float | None = Field(default=1800.0, gt=0)
    harness_timeout_s: float = Field(default=2.0, gt=0, le=600)
    strict_health: bool = False
    ack_after_durable: bool = False
    feedback_per_minute: int = Field(default=120, ge=1, le=1_000_000)


@dataclass(slots=True)
class Call:
    """One model call in flight."""

    principal: Principal
    endpoint: str
    public_model: str
    #: the routing-table key the request's model named inside the caller's tenant (:meth:`Router.resolve`)
    target: str
    resolution: Resolution | None
    record: CallRecord
    decision: Route
    backend: BaseBackend
    applied: Applied | None
    want_logprobs: bool = False
    include_usage: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    t0: float = 0.0
    state: TrajectoryState | None = None
    #: The upstream's own answer when the call was passed through (:class:`Passthrough`), else ``None``.
    relayed: dict[str, Any] | None = None
    #: Whether the call is being passed through (set once a backend that takes its API was chosen).
    passed_through: bool = False


@dataclass(frozen=True, slots=True)
class Passthrough:
    """A request in a client API (``"messages"``, ``"responses"``) that a backend whose upstream speaks
    that API takes as it is (:attr:`~molt.backends.base.BaseBackend.passthrough`).

    ``build(backend_request, applied)`` gives the body to relay: the client's own body with what the
    chat path would change for the backend — the model the version names, the harness's system text and
    tool rewrites (``backend_request`` is the chat request after the harness, ``applied`` what the
    harness did, ``None`` if nothing). A backend that does not speak the API gets the chat request,
    as it would without a passthrough."""

    api: str
    build: Callable[[ChatRequest, Applied | None], dict[str, Any]]


#: The request ``metadata`` keys addressed to the gateway itself (session, trajectory, agent, task: read by
#: :func:`_ids_from` and :func:`_task_from`).
MOLT_METADATA_KEYS = frozenset({"molt_session", "session_id", "molt_trajectory", "trajectory_id", "agent_id", "task"})


def passthrough_metadata(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without the gateway's own ``metadata`` keys (:data:`MOLT_METADATA_KEYS`), as it is passed
    through: they were addressed to the gateway, and an upstream API may refuse keys it does not know
    (Anthropic's ``metadata`` takes ``user_id`` alone)."""
    md = body.get("metadata")
    if not isinstance(md, dict) or not MOLT_METADATA_KEYS & md.keys():
        return body
    kept = {k: v for k, v in md.items() if k not in MOLT_METADATA_KEYS}
    out = {k: v for k, v in body.items() if k != "metadata"}
    if kept:
        out["metadata"] = kept
    return out


def _ids_from(headers: Mapping[str, str], body: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(session, trajectory, agent) from the X-Molt headers, else the OpenAI ``user``/``metadata`` fields.
    (The task, ``X-Molt-Task`` or ``metadata.task``, is read by :func:`_task_from`.)"""
    md: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    session = headers.get("x-molt-session") or md.get("molt_session") or md.get("session_id")
    if session is None and isinstance(body.get("user"), str) and body["user"]:
        session = body["user"]
    trajectory = headers.get("x-molt-trajectory") or md.get("molt_trajectory") or md.get("trajectory_id")
    agent = headers.get("x-molt-agent") or md.get("agent_id")
    return (str(session)[:256] if session else None, str(trajectory)[:128] if trajectory else None,
            str(agent)[:256] if agent else None)


def _task_from(headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
    """The task label of a call (``X-Molt-Task`` or ``metadata.task``): signals and verifiers group by it."""
    md: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    task = headers.get("x-molt-task") or md.get("task")
    return str(task)[:256] if task else None


class Gateway:
    """Backends, routing, harness, capture and auth behind one OpenAI-compatible surface.

    Args:
        backends: backend instances by name (or a sequence, named by their ``name``).
        table: the routing table (default: one model — the first backend's model name — served by
            every backend as version ``<model>@base``).
        recorder: a :class:`~molt.capture.Recorder`, or a
            :class:`~molt.gateway.capture_process.CaptureProcess` that records in a child process
            (``None``: nothing is recorded).
        keyring: tenant API keys (``None``: open gateway, every caller is tenant ``default``; keep it
            on loopback).
        harness: the harness applier (default :class:`~molt.harness.StaticHarness`).
        config: :class:`GatewayConfig`.
        store: the store, to look up trajectories the gateway no longer remembers (rewards).
        agents: names the agents of calls that name none (default: in memory, see
            :mod:`molt.gateway.agents`).
    """

    def __init__(self, backends: Mapping[str, BaseBackend] | Sequence[BaseBackend], table: RoutingTable | None = None,
                 *, recorder: Any = None, keyring: KeyRing | None = None, harness: HarnessApplier | None = None,
                 config: GatewayConfig | None = None, store: Any = None, agents: AgentDirectory | None = None):
        self.backends: dict[str, BaseBackend] = (dict(backends) if isinstance(backends, Mapping)
                                                 else {b.name: b for b in backends})
        if not self.backends:
            raise ValueError("The gateway needs at least one backend.")
        if table is None:
            first = next(iter(self.backends.values()))
            table = RoutingTable.single(first.model, VersionSpec(version=f"{first.model}@base",
                                                                 backends=tuple(self.backends)))
        unknown = table.backends() - set(self.backends)
        if unknown:
            raise ValueError(f"The routing table names backends {sorted(unknown)} that were not given.")
        self.config = config or GatewayConfig()
        # Plain (non-UUIDv7) session keys' first-seen times are forgotten like the sessions themselves.
        self.router = Router(table, max_sessions=self.config.max_sessions, idle_s=self.config.session_idle_s)
        self.recorder = recorder
        # A CaptureProcess builds events in its own process; an in-process Recorder gets a CallRecorder.
        self.capture: Any = None
        if recorder is not None:
            self.capture = recorder if hasattr(recorder, "submit") else CallRecorder(recorder)
        self.keyring = keyring
        self.harness: HarnessApplier = harness or StaticHarness()
        self._static_harness = StaticHarness()
        #: Requests served with the static harness because the harness took over ``harness_timeout_s``.
        self.harness_fallbacks = 0
        #: Requests refused because the version routed to belongs to another tenant (never expected:
        #: the router resolves a request's model inside its tenant; this is the second wall).
        self.harness_refusals = 0
        #: Adapter names loaded through the admin API → the tenants they serve (a per-tenant adapter, or
        #: one shared by tenants whose policies opt into sharing), ``None`` for the operator's shared
        #: ones. A request of any other tenant is never served by a tenant's adapter, whatever version
        #: routing picked (:meth:`_wall`).
        self.adapter_tenants: dict[str, frozenset[str] | None] = {}
        self.store = store
        self.agents = agents or AgentDirectory()
        self.metrics = Metrics()
        #: Whether capture keeps up (``/health``, ``/metrics``, the status file).
        self.capture_health = CaptureHealth()
        #: With ``ack_after_durable``: answers wait for their records' durability (group commit).
        self.acks = (DurableAcks(recorder) if self.config.ack_after_durable and recorder is not None
                     and hasattr(recorder, "flush") else None)
        new_traj = recorder.new_trajectory if recorder is not None and hasattr(recorder, "new_trajectory") else new_id
        self.sessions = Sessions(new_traj, max_entries=self.config.max_sessions, idle_s=self.config.session_idle_s)
        #: Client-chosen trajectory ids resolved within the caller's tenant: chat, completions,
        #: feedback and OTLP ingest all use this one instance.
        self.namespace = TrajectoryNamespace(
            store_tenant(store) if store is not None else None,
            multi_tenant=keyring.multi_tenant if keyring is not None else (lambda: False),
            max_entries=self.config.max_sessions, idle_s=self.config.session_idle_s)
        self.started_at = time.time()
        #: Parts started beside the gateway (``molt serve``'s weight loop and trainer) whose numeric status
        #: (a :data:`molt.status.StatusSource`) ``/metrics`` shows the platform operator as ``molt_*`` gauges.
        self.status_sources: list[Callable[[], dict[str, dict[str, Any]]]] = []
        self._health_task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start every backend, the health-check loop and the event-loop lag monitor."""
        await asyncio.gather(*(b.start() for b in self.backends.values()))
        if self.config.health_interval_s > 0 and self._health_task is None:
            self._health_task = asyncio.create_task(self._health_loop(), name="molt-health")
        if self._lag_task is None:
            self._lag_task = asyncio.create_task(self._lag_loop(), name="molt-loop-lag")

    async def aclose(self) -> None:
        """Stop the health loop and the lag monitor, close the backends (the owner closes the Recorder)."""
        for task in (self._health_task, self._lag_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._health_task = self._lag_task = None
        if self.acks is not None:
            self.acks.close()
        for b in self.backends.values():
            try:
                await b.aclose()
            except Exception:
                log.exception("Closing backend %s failed.", b.name)

    async def check_health(self) -> dict[str, bool]:
        """Ask every backend now; updates the router."""
        async def one(name: str, b: BaseBackend) -> tuple[str, bool]:
            try:
                return name, bool(await asyncio.wait_for(b.health(), 5.0))
            except Exception:
                return name, False

        for name, ok in await asyncio.gather(*(one(n, b) for n, b in self.backends.items())):
            self.router.set_health(name, ok)
        return self.router.health()

    async def _lag_loop(self) -> None:
        """How late the loop runs a 0.1 s timer: time in which it served nothing (a handler or a
        library holding the loop or the GIL). ``molt_gateway_event_loop_lag_*`` and ``molt doctor``."""
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(LAG_TICK_S)
            self.metrics.observe_loop_lag(max(0.0, loop.time() - t - LAG_TICK_S))

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            try:
                await self.check_health()
            except Exception:  # the loop must outlive any one failure
                log.exception("Health check failed.")

    def capture_state(self, stats: Any) -> dict[str, Any]:
        """Capture's health (:meth:`CaptureHealth.assess`) from the recorder's counters ``stats``."""
        if self.capture is None:
            return self.capture_health.assess(None)
        # an in-process CallRecorder's failures are calls it could not build; a capture process counts its
        # own drops in ``stats`` and reports build failures apart
        built = getattr(self.capture, "build_failures", None)
        return self.capture_health.assess(stats, int(built if built is not None else self.capture.failed))

    # ------------------------------------------------------------------ auth

    def authenticate(self, authorization: str | None, api_key: str | None = None,
                     tenant: str | None = None) -> Principal:
        """The caller, from ``Authorization: Bearer <key>`` (or an ``x-api-key`` header).

        ``tenant`` is what the caller says it is (``X-Molt-Tenant``: an adapter sending its own tenant
        so that its run and the gateway's record are one). A key's tenant is the key's: a header naming
        another is refused (403), never followed across the wall. An open gateway has no wall (its
        caller may already write any tenant into the store it serves) and takes the header's tenant.
        """
        if tenant is not None:
            tenant = tenant.strip()
            if not tenant or len(tenant) > 128 or not tenant.isprintable():
                raise InvalidRequest("X-Molt-Tenant must be a tenant id: 1 to 128 printable characters.")
        if self.keyring is None:
            return _OPEN if tenant is None or tenant == _OPEN.tenant_id else replace(_OPEN, tenant_id=tenant)
        key = api_key
        if authorization:
            scheme, _, token = authorization.partition(" ")
            key = token.strip() if scheme.lower() == "bearer" else None
        p = self.keyring.authenticate(key)
        if tenant is not None and tenant != p.tenant_id:
            raise PermissionDenied(f"X-Molt-Tenant names tenant {tenant!r}, but this key is of tenant "
                                   f"{p.tenant_id!r}; send that tenant's key, or leave the header out.")
        return p

    # ------------------------------------------------------------------ placing a call

    def begin_chat(self, principal: Principal, req: ChatRequest, body: dict[str, Any],
                   headers: Mapping[str, str]) -> Call:
        """Resolve the trajectory, route, and apply the harness for a chat request."""
        session, trajectory, agent = _ids_from(headers, body)
        agent = agent or self.agents.agent(principal.tenant_id, principal.agent_id, req.messages, req.tools, headers)
        target = self.router.resolve(req.model, principal.tenant_id, agent)
        trajectory = self._own_trajectory(principal.tenant_id, trajectory)
        res = self.sessions.resolve(principal.tenant_id, req.messages, session_id=session, trajectory_id=trajectory)
        st = res.state
        self.namespace.claim(principal.tenant_id, st.trajectory_id)
        decision = self.router.route(target, st.route_key)
        rec = CallRecord(endpoint="chat.completions", event_ids=[new_id() for _ in range(req.n)],
                         trajectory_id=st.trajectory_id, session_id=st.session_id, parent_id=res.parent_id,
                         tenant_id=principal.tenant_id, agent_id=agent, public_model=req.model, decision=decision,
                         started=time.time(), messages=req.messages, tools=req.tools,
                         sampling=_sampling(req), key_name=principal.key_name,
                         new_tools=tool_results(req.messages, res.new_from) if res.continued else [],
                         task=_task_from(headers, body))
        so = body.get("stream_options")
        call = Call(principal=principal, endpoint="chat.completions", public_model=req.model, target=target,
                    resolution=res,
                    record=rec, decision=decision, backend=self.backends[decision.backend], applied=None,
                    want_logprobs=req.logprobs,
                    include_usage=bool(isinstance(so, dict) and so.get("include_usage")), t0=time.perf_counter())
        self._headers(call)
        return call

    def begin_completion(self, principal: Principal, req: CompletionRequest, body: dict[str, Any],
                         headers: Mapping[str, str]) -> Call:
        """Resolve the trajectory and route a completions request (no harness: there are no messages)."""
        session, trajectory, agent = _ids_from(headers, body)
        agent = agent or principal.agent_id
        target = self.router.resolve(req.model, principal.tenant_id, agent)
        trajectory = self._own_trajectory(principal.tenant_id, trajectory)
        st = None
        if trajectory is not None:
            st = self.sessions.trajectory(principal.tenant_id, trajectory)
        elif session is not None:
            st = self.sessions.session(principal.tenant_id, session)
        if st is None or st.ended:
            res = self.sessions.resolve(principal.tenant_id, [], session_id=session, trajectory_id=trajectory)
            st = res.state
        self.namespace.claim(principal.tenant_id, st.trajectory_id)
        parent = st.last_event_id
        decision = self.router.route(target, st.route_key)
        rec = CallRecord(endpoint="completions", event_ids=[new_id() for _ in range(req.n)],
                         trajectory_id=st.trajectory_id, session_id=st.session_id, parent_id=parent,
                         tenant_id=principal.tenant_id, agent_id=agent, public_model=req.model, decision=decision,
                         started=time.time(), prompt=req.prompt, sampling=_sampling(req), key_name=principal.key_name,
                         task=_task_from(headers, body))
        so = body.get("stream_options")
        call = Call(principal=principal, endpoint="completions", public_model=req.model, target=target,
                    resolution=None, record=rec,
                    decision=decision, backend=self.backends[decision.backend], applied=None,
                    want_logprobs=req.logprobs is not None,
                    include_usage=bool(isinstance(so, dict) and so.get("include_usage")), t0=time.perf_counter())
        call.state = st
        self._headers(call)
        return call

    def _own_trajectory(self, tenant: str, trajectory_id: str | None) -> str | None:
        """The trajectory a client-chosen id names within the caller's tenant
        (:meth:`~molt.capture.tenancy.TrajectoryNamespace.resolve`: another tenant's id, or one not
        seen yet, names the caller's own namespaced trajectory, never the foreign chain)."""
        if trajectory_id is None:
            return None
        if "\x00" in trajectory_id:
            raise InvalidRequest("A trajectory id may not contain NUL characters.", param="x-molt-trajectory")
        return self.namespace.resolve(tenant, trajectory_id)

    def _headers(self, call: Call) -> None:
        rec = call.record
        call.headers = {"x-molt-trajectory": rec.trajectory_id, "x-molt-event-id": rec.event_ids[0],
                        "x-molt-policy-version": call.decision.version.version}
        if len(rec.event_ids) > 1:
            call.headers["x-molt-event-ids"] = ",".join(rec.event_ids)
        if rec.session_id:
            call.headers["x-molt-session"] = rec.session_id

    def _wall(self, call: Call, model: str) -> None:
        """Refuse to apply a version of another tenant (:func:`~molt.harness.belongs_to`), or a version whose
        adapter was loaded for other tenants only (:attr:`adapter_tenants`, whoever registered the version):
        its prompt, memories, skills and adapter never reach this request, which gets the same 404 as a
        model that does not exist; :attr:`harness_refusals` counts it."""
        spec = call.decision.version
        tenant = call.principal.tenant_id
        if not belongs_to(spec, tenant):
            self.harness_refusals += 1
            log.error("Refused to apply version %r of tenant %r to a request of tenant %r (a routing fault).",
                      spec.version, spec.tenant_id, tenant)
            raise self.router.not_found(model, tenant)
        allowed = self.adapter_tenants.get(spec.upstream_model or "")
        if allowed is not None and tenant not in allowed:
            self.harness_refusals += 1
            log.error("Refused to serve adapter %r (of tenants %s) to a request of tenant %r through version %r.",
                      spec.upstream_model, sorted(allowed), tenant, spec.version)
            raise self.router.not_found(model, tenant)

    async def _apply_harness(self, req: ChatRequest, spec: Any) -> Applied:
        """The harness applied to the request. One that does I/O (``blocking``: memory retrieval embeds
        the query and searches LanceDB) runs on a worker thread, so it never holds the event loop and
        every other request with it, and within ``harness_timeout_s``: past that, or when it raises, the
        version's static harness serves the request (fail open) and :attr:`harness_fallbacks` counts it."""
        if not getattr(self.harness, "blocking", False):
            return self.harness.apply(req.messages, req.tools, spec)
        try:
            async with asyncio.timeout(self.config.harness_timeout_s):
                return await asyncio.to_thread(self.harness.apply, req.messages, req.tools, spec)
        except TimeoutError:
            why = f"took over {self.config.harness_timeout_s:g} s"
        except Exception as exc:
            why = f"failed ({exc!r})"
        self.harness_fallbacks += 1
        log.warning("The harness of version %r %s; serving its static harness.", getattr(spec, "version", None), why)
        return self._static_harness.apply(req.messages, req.tools, spec)

    async def _backend_chat_request(self, call: Call, req: ChatRequest) -> ChatRequest:
        self._wall(call, req.model)
        spec = call.decision.version
        applied = await self._apply_harness(req, spec)
        call.applied = applied
        call.record.harness_fingerprint = applied.fingerprint
        model = spec.upstream_model or call.backend.model
        if applied.messages is req.messages and applied.tools is req.tools and model == req.model:
            return req
        return ChatRequest(model=model, messages=applied.messages, tools=applied.tools, tool_choice=req.tool_choice,
                           n=req.n, stop=req.stop, temperature=req.temperature, top_p=req.top_p,
                           max_tokens=req.max_tokens, logprobs=req.logprobs, top_logprobs=req.top_logprobs,
                           seed=req.seed, extra=req.extra)

    def _backend_completion_request(self, call: Call, req: CompletionRequest) -> CompletionRequest:
        self._wall(call, req.model)
        model = call.decision.version.upstream_model or call.backend.model
        if model == req.model:
            return req
        return CompletionRequest(model=model, prompt=req.prompt, n=req.n, stop=req.stop, temperature=req.temperature,
                                 top_p=req.top_p, max_tokens=req.max_tokens, logprobs=req.logprobs, seed=req.seed,
                                 extra=req.extra)

    def _failover(self, call: Call, exc: BackendError) -> bool:
        """Mark the backend down and re-route the call elsewhere; False if there is nowhere to go."""
        self.router.set_health(call.decision.backend, False)
        if not self.config.failover:
            return False
        key = call.resolution.state.route_key if call.resolution else call.record.trajectory_id
        try:
            decision = self.router.route(call.target, key)
        except MoltError:
            return False
        log.warning("Backend %s failed (%s); failing over to %s.", call.decision.backend, exc, decision.backend)
        self.metrics.failovers += 1
        call.decision = call.record.decision = decision
        call.backend = self.backends[decision.backend]
        self._headers(call)
        return True

    # ------------------------------------------------------------------ non-streamed

    async def run(self, call: Call, req: ChatRequest | CompletionRequest,
                  passthrough: Passthrough | None = None) -> Result:
        """Call the backend (timeout, one failover); on failure the call is recorded and the error raised.
        With ``passthrough`` and a backend that takes its API, the request is relayed as it is and
        ``call.relayed`` holds the upstream's answer."""
        for attempt in range(2):
            try:
                if isinstance(req, ChatRequest):
                    breq: Any = await self._backend_chat_request(call, req)
                    if self._passes(call, passthrough):
                        assert passthrough is not None
                        body = passthrough.build(breq, call.applied)
                        async with asyncio.timeout(self.config.backend_timeout_s):
                            relayed = await call.backend.relay(passthrough.api, body)
                        call.relayed = relayed.body
                        result: Result = relayed.result
                    else:
                        async with asyncio.timeout(self.config.backend_timeout_s):
                            result = await call.backend.chat(breq)
                else:
                    breq = self._backend_completion_request(call, req)
                    async with asyncio.timeout(self.config.backend_timeout_s):
                        result = await call.backend.complete(breq)
            except TimeoutError as exc:
                err = exc if isinstance(exc, BackendTimeout) else BackendTimeout(
                    f"The backend {call.decision.backend!r} did not answer within "
                    f"{self.config.backend_timeout_s:g} s.", backend=call.decision.backend)
                self._fail(call, err, OutcomeStatus.TIMEOUT, "timeout")
                raise err from None
            except BackendUnavailable as exc:
                if attempt == 0 and self._failover(call, exc):
                    continue
                self._fail(call, exc, OutcomeStatus.ERROR, "unavailable")
                raise
            except (BackendError, GatewayError) as exc:
                self._fail(call, exc, OutcomeStatus.ERROR, "error")
                raise
            self._restore_tool_names(call, result)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def passes_through(self, api: str) -> bool:
        """Whether every backend relays requests of client API ``api`` as they are: then its requests
        are parsed only for what the record needs, and the upstream judges the rest."""
        return all(api in b.passthrough for b in self.backends.values())

    @staticmethod
    def _passes(call: Call, passthrough: Passthrough | None) -> bool:
        call.passed_through = passthrough is not None and passthrough.api in call.backend.passthrough
        return call.passed_through

    def _restore_tool_names(self, call: Call, result: Result) -> None:
        if call.applied is not None and call.applied.tool_names:
            for c in result.choices:
                for t in c.tool_calls or ():
                    t.name = call.applied.client_tool_name(t.name)

    def _fail(self, call: Call, exc: BaseException, status: OutcomeStatus, outcome: str) -> None:
        self.metrics.backend(call.decision.backend, call.decision.version.key, outcome)
        call.record.status, call.record.error = status, exc
        call.record.latency_ms = (time.perf_counter() - call.t0) * 1000.0
        if self.capture is not None:
            self.capture.submit(call.record)

    def finish(self, call: Call, result: Result) -> None:
        """Register the answer with the session index (before the response, so the agent's next
        turn finds its trajectory); :meth:`record` then records the call (after the response)."""
        rec = call.record
        rec.result = result
        rec.latency_ms = (time.perf_counter() - call.t0) * 1000.0
        state = call.state
        if call.resolution is not None:
            self.sessions.register(call.resolution, [reply_message(c) for c in result.choices],
                                   rec.event_ids[:len(result.choices)])
        elif state is not None:
            self.sessions.note_call(state, rec.event_ids[:max(1, len(result.choices))])
        version = call.decision.version.key  # a tenant's version is labelled id#tenant: never merged across tenants
        self.metrics.backend(call.decision.backend, version, "ok")
        if result.usage is not None:
            self.metrics.add_tokens(version, result.usage.prompt_tokens, result.usage.completion_tokens)

    def record(self, call: Call) -> None:
        """Build and record the call's events (off the request path: after the response is sent)."""
        if self.capture is not None:
            self.capture.submit(call.record)

    async def record_durably(self, call: Call) -> bool:
        """Record the call now and wait until its record is durable (``ack_after_durable``); ``False``
        when that was not confirmed in time (the answer goes out anyway: fail open for the agent)."""
        self.record(call)
        if self.acks is None:
            return False
        return await self.acks.wait(self.acks.submitted())

    # ------------------------------------------------------------------ streamed

    async def open_stream(self, call: Call, req: ChatRequest | CompletionRequest,
                          passthrough: Passthrough | None = None) -> tuple[Any, AsyncIterator[Any]]:
        """Start the backend's stream and wait for its first item, so a backend that is down or too
        slow is still an HTTP error (502/504) rather than an error chunk. With ``passthrough`` and a
        backend that takes its API (``call.passed_through``), the items are the upstream's own
        events (:class:`~molt.backends.upstream.RelayedEvent`)."""
        for attempt in range(2):
            it: AsyncIterator[Any]
            if isinstance(req, ChatRequest):
                breq = await self._backend_chat_request(call, req)
                if self._passes(call, passthrough):
                    assert passthrough is not None
                    it = call.backend.relay_stream(passthrough.api, passthrough.build(breq, call.applied))
                else:
                    it = call.backend.stream_chat(breq)
            else:
                it = call.backend.stream_complete(self._backend_completion_request(call, req))
            try:
                async with asyncio.timeout(self.config.backend_timeout_s):
                    first = await it.__anext__()
                return first, it
            except StopAsyncIteration:
                err = BackendStreamError(f"The backend {call.decision.backend!r} sent an empty stream.",
                                         backend=call.decision.backend)
                self._fail(call, err, OutcomeStatus.ERROR, "stream_error")
                raise err from None
            except TimeoutError as exc:
                await _aclose(it)
                slow = exc if isinstance(exc, BackendTimeout) else BackendTimeout(
                    f"The backend {call.decision.backend!r} did not start answering within "
                    f"{self.config.backend_timeout_s:g} s.", backend=call.decision.backend)
                self._fail(call, slow, OutcomeStatus.TIMEOUT, "timeout")
                raise slow from None
            except BackendUnavailable as exc:
                await _aclose(it)
                if attempt == 0 and self._failover(call, exc):
                    continue
                self._fail(call, exc, OutcomeStatus.ERROR, "unavailable")
                raise
            except (BackendError, GatewayError) as exc:
                await _aclose(it)
                self._fail(call, exc, OutcomeStatus.ERROR, "error")
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def deltas(self, call: Call, first: Any, it: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
        """The backend's stream as deltas (tool names as the client knows them), for any wire format
        to render; a passed-through stream's items are its upstream events
        (:class:`~molt.backends.upstream.RelayedEvent`), yielded as they are while what they mean is
        assembled for the record (tool names restored there; the route restores them in the event).
        At the end of the stream the call is finished (``call.record.result`` holds the assembled
        answer); the caller records it with :meth:`record` after its last bytes. A backend
        failure mid-stream records the partial answer with the error and raises it as a
        :class:`~molt.errors.BackendError`; the client going away records the call as cancelled."""
        rec = call.record
        asm = StreamAssembler(call.public_model)
        error: BackendError | None = None
        item: StreamItem | None = first
        try:
            while item is not None:
                if isinstance(item, RelayedEvent):
                    for piece in item.items:
                        if isinstance(piece, StreamEnd):
                            asm.end = piece
                        else:
                            self._restore_delta_names(call, piece)
                            asm.add(piece)
                    yield item
                elif isinstance(item, StreamEnd):
                    asm.end = item
                else:
                    self._restore_delta_names(call, item)
                    asm.add(item)
                    yield item
                try:
                    async with asyncio.timeout(self.config.backend_timeout_s):
                        item = await it.__anext__()
                except StopAsyncIteration:
                    item = None
        except TimeoutError:
            error = BackendStreamError(f"The backend {call.decision.backend!r} stopped streaming for "
                                       f"{self.config.backend_timeout_s:g} s.", backend=call.decision.backend)
        except MoltError as exc:
            error = exc if isinstance(exc, BackendError) else BackendStreamError(
                str(exc), backend=call.decision.backend)
        except BaseException as exc:  # the client went away (cancelled) or a bug: record what was streamed
            rec.result = asm.result()
            cancelled = isinstance(exc, asyncio.CancelledError | GeneratorExit)
            status = OutcomeStatus.CANCELLED if cancelled else OutcomeStatus.ERROR
            self._fail(call, exc if status == OutcomeStatus.ERROR else BackendStreamError(
                "The client disconnected mid-stream.", backend=call.decision.backend), status, "cancelled")
            await _aclose(it)
            raise
        if error is not None:
            self.metrics.stream_errors += 1
            rec.result = asm.result()
            self._fail(call, error, OutcomeStatus.ERROR, "stream_error")
            await _aclose(it)
            raise error
        self.finish(call, asm.result())

    async def sse(self, call: Call, first: StreamItem, it: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]:
        """The chat / completions SSE body: chunks as the backend streams; a backend failure mid-stream
        becomes an error chunk (the partial answer is recorded with the error), then ``[DONE]``."""
        rec = call.record
        chat = call.endpoint == "chat.completions"
        cid = ("chatcmpl-" if chat else "cmpl-") + rec.event_ids[0]
        created = int(rec.started)
        seen: set[int] = set()
        try:
            async with contextlib.aclosing(self.deltas(call, first, it)) as pieces:
                async for item in pieces:
                    if chat:
                        chunk = wire.chat_chunk(id=cid, created=created, model=call.public_model, delta=item,
                                                first=item.index not in seen, logprobs=call.want_logprobs)
                        seen.add(item.index)
                    else:
                        chunk = wire.completion_chunk(id=cid, created=created, model=call.public_model, delta=item,
                                                      logprobs=call.want_logprobs)
                    yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        except BackendError as error:
            body = {"error": {"message": error.message, "type": "backend_error",
                              "code": getattr(error, "code", "backend_error"), "param": None}}
            yield b"data: " + orjson.dumps(body) + b"\n\n"
            yield b"data: [DONE]\n\n"
            return
        result = rec.result
        recorded = False
        try:
            if call.include_usage and result is not None and result.usage is not None:
                maker = wire.chat_chunk if chat else wire.completion_chunk
                yield b"data: " + orjson.dumps(maker(id=cid, created=created, model=call.public_model,
                                                     usage=result.usage)) + b"\n\n"
            if self.acks is not None:  # --ack-after-durable: the stream ends once its record is durable
                recorded = True
                await self.record_durably(call)
            yield b"data: [DONE]\n\n"
        finally:
            if not recorded:
                self.record(call)

    def _restore_delta_names(self, call: Call, d: Delta) -> None:
        if call.applied is not None and call.applied.tool_names and d.tool_calls:
            for t in d.tool_calls:
                if t.name:
                    t.name = call.applied.client_tool_name(t.name)


def _sampling(req: ChatRequest | CompletionRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("temperature", "top_p", "max_tokens", "seed", "stop"):
        v = getattr(req, key)
        if v is not None:
            out[key] = v
    if req.n != 1:
        out["n"] = req.n
    return out


async def _aclose(it: AsyncIterator[StreamItem]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(BaseException):
            await aclose()

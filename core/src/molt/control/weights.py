"""The weights branch of the plane: a weight-update decision → a training run → an adapter served as a
new composite version of *that* agent.

:class:`WeightLoop` is the :class:`~molt.control.plane.ControlPlane`'s ``trainer`` hook. When the plane
decides that only new weights close a failure cluster of ``tenant/agent`` it calls the hook, which

1. builds a :class:`WeightRequest`: the agent's traffic on the cluster's task (failures and the
   successes that contrast them) and, as anchors against forgetting, its recent successes on other
   tasks — read through ``read``, by default the governance training queue, so only eligible,
   redacted trajectories are ever trained on (fail closed: none eligible → no training);
2. hands it to ``train`` (``molt_trainer.RequestTrainer`` in ``molt serve --train``; any callable
   returning an object with ``version`` and ``path``), in a worker thread, within ``timeout_s``;
3. checks the adapter directory (a peft ``adapter_config.json`` and weights that are not empty) and
   loads it into the serving backends through ``load`` for that tenant only (``load(name, path,
   [tenant])``: the gateway serves it to no other tenant's request) — the trainer may already have done
   that; ``load`` is then a check that it is served;
4. returns the :class:`~molt.control.versions.ModelPart`; the plane creates the new composite version
   (live parts + these weights), canaries it under the agent's routing key
   (``model#tenant/agent``), and promotes or aborts it on the canary delta like any other change.
   An abort or a rollback restores the previous version, whose adapter is still loaded (adapters are
   never unloaded while a version names them).

Any failure — no eligible data, a trainer that raises or hangs, a corrupt adapter, a serving engine
that refuses the load — raises :class:`~molt.errors.InterventionError`: the plane logs the cycle as a
no-op with the error as its reason, and no version names the adapter, so nothing half-published is
ever routed to. The link decision → run → adapter → outcome: the decision's ``applied_version`` is the
canary version, whose ``parts.model.adapter`` is the trainer's version id, registered in the store's
``policy_versions`` table with the run (request, trajectories, metrics; :func:`training_run`); the
later promote or abort decision names the same version. :attr:`WeightLoop.runs` keeps the request
outcomes of this process for ``molt doctor`` and ``/metrics``.

:func:`restore_adapters` loads the adapters of every live and canary version into a freshly started
server (through :func:`gateway_loader`, the gateway's admin API), so a restarted ``molt serve`` serves
what the registry says rather than the base model.

:class:`CanaryTarget` is the same last step for the trainer run as a service of its own
(``molt-trainer serve --agent``): each adapter it publishes is checked, loaded at weight 0 and made a
canary composite version of that agent, which the control plane of ``molt serve`` promotes or aborts
like the in-process loop's.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from molt.atdp.ids import new_id
from molt.control.provenance import record_change
from molt.control.versions import ModelPart, VersionRegistry
from molt.errors import InterventionError
from molt.store import Filter, Store
from molt.store.query import Trajectory

#: How often a request waiting for its training run looks whether the loop was closed.
CLOSE_POLL_S = 0.5

__all__ = ["CanaryTarget", "WeightLoop", "WeightRequest", "check_adapter", "gateway_loader", "governed_reader",
           "restore_adapters", "sharing_group", "store_reader", "training_reader", "training_run"]

log = logging.getLogger("molt.control.weights")

#: A trajectory reader: ``(tenant_id, trajectory ids) → the eligible ones among them``.
Reader = Callable[[str, Sequence[str]], list[Trajectory]]
#: An adapter loader: ``(name, path, tenants)`` makes the adapter servable to those tenants' requests only.
Loader = Callable[[str, str, Sequence[str]], None]


@dataclass
class WeightRequest:
    """What one training run is asked to do (see the module docstring)."""

    request_id: str
    tenant_id: str
    agent_id: str
    cluster: str
    task: str | None
    #: The live weights the adapter starts from (its base model, and its adapter when it has one).
    model: ModelPart
    #: The agent's eligible traffic on the cluster's task: the failures and the successes that contrast them.
    trajectories: list[Trajectory]
    #: Eligible successes on the agent's other tasks, trained on too so the update does not forget them.
    anchors: list[Trajectory] = field(default_factory=list)
    #: The other tenants of a shared adapter (their policies and this tenant's list each other in
    #: ``training.share_with``): their agent's traffic on the task is in ``trajectories`` too, and the
    #: adapter serves them as well; empty: the adapter is this tenant's alone.
    share_with: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"request": self.request_id, "tenant": self.tenant_id, "agent": self.agent_id, "cluster": self.cluster,
                "task": self.task, "trajectories": len(self.trajectories), "anchors": len(self.anchors),
                "from": self.model.adapter or self.model.base, "share_with": list(self.share_with)}


def governed_reader(store: Store, policy: Any) -> Reader:
    """Read through the governance training queue of ``policy``: eligible, redacted trajectories only."""
    from molt.governance import Principal, TrainingQueue
    from molt.governance.access import Role

    def read(tenant_id: str, ids: Sequence[str]) -> list[Trajectory]:
        wanted = set(ids)
        queue = TrainingQueue(store, policy, Principal(tenant_id, Role.TRAINER))
        return [t for t in queue.eligible_trajectories() if t.trajectory_id in wanted]

    return read


def store_reader(store: Store) -> Reader:
    """Read the store as recorded (no governance: development only, ``--train-on-ungoverned-data``)."""
    def read(tenant_id: str, ids: Sequence[str]) -> list[Trajectory]:
        out = []
        for tid in ids:
            t = store.trajectory(tid)
            if t.events and t.events[0].tenant_id == tenant_id:
                out.append(t)
        return out

    return read


def sharing_group(policy: Any) -> Callable[[str], list[str]]:
    """``group(tenant)``: the tenants a shared adapter of ``tenant`` may learn from and serve under the
    governance ``policy`` — those that opted in to training and that ``tenant`` shares with both ways
    (each lists the other in ``training.share_with``); ``[]``: its adapters are its own."""
    def group(tenant: str) -> list[str]:
        if not policy.for_tenant(tenant).training.opt_in:
            return []
        return sorted(u for u in policy.training_tenants()
                      if u != tenant and policy.shares(u, tenant) and policy.shares(tenant, u))

    return group


def training_reader(store: Store, governance: str | None, *, ungoverned: bool = False) -> Reader:
    """What a weight loop reads: :func:`governed_reader` under the policy file ``governance`` (``None`` or
    ``"default"``: the built-in policy), or :func:`store_reader` when the caller said to train on
    ungoverned data (``--train-on-ungoverned-data``)."""
    if ungoverned:
        return store_reader(store)
    from molt.governance import load_policy_file

    return governed_reader(store, load_policy_file(governance))


def check_adapter(path: str | Path) -> None:
    """Raise :class:`InterventionError` unless ``path`` is a complete peft adapter directory."""
    p = Path(path)
    cfg = p / "adapter_config.json"
    weights = [w for w in (p / "adapter_model.safetensors", p / "adapter_model.bin") if w.exists()]
    if not cfg.is_file() or not weights:
        raise InterventionError(f"The trained adapter at {p} is incomplete (adapter_config.json and "
                                f"adapter_model.safetensors expected); not served.")
    try:
        conf = orjson.loads(cfg.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InterventionError(f"The trained adapter's config at {cfg} is not JSON ({exc}); not served.") from exc
    if not isinstance(conf, dict) or not conf.get("peft_type"):
        raise InterventionError(f"The trained adapter's config at {cfg} names no peft_type; not served.")
    if weights[0].stat().st_size == 0:
        raise InterventionError(f"The trained adapter's weights at {weights[0]} are empty; not served.")


class WeightLoop:
    """The plane's ``trainer`` hook (see the module docstring).

    Args:
        store: the store (trajectories, versions, ``policy_versions``).
        train: ``fn(WeightRequest) → adapter`` (``version``, ``path``; optional ``run_id``, ``metrics``).
        read: the trajectory reader (:func:`governed_reader` in production; :func:`store_reader` only
            when the caller said to train on ungoverned data).
        load: ``fn(version, path, tenants)`` that makes the adapter servable to ``tenants`` only (raises
            when the engine refuses); ``None`` when ``train`` publishes it itself.
        window: newest trajectories of the agent looked at (default 200). ``max_anchors``: successes on
            other tasks added (default 16). ``min_trajectories``: eligible ones needed (default 4).
        timeout_s: how long a run may take before it is given up (default 1,800 s).
        share: ``share(tenant)`` → the tenants whose policies opt into sharing with it both ways
            (:func:`sharing_group`): a gap of ``tenant``'s agent is then trained into one adapter on the
            same agent's traffic on that task of all of them, served to them only (the manifest names
            them). ``None`` (default): one adapter per tenant, on its own data.
    """

    def __init__(self, store: Store, train: Callable[[WeightRequest], Any], *, read: Reader,
                 load: Loader | None = None, window: int = 200, max_anchors: int = 16,
                 min_trajectories: int = 4, timeout_s: float = 1800.0,
                 share: Callable[[str], Sequence[str]] | None = None):
        self.store = store
        self.train = train
        self.read = read
        self.load = load
        self.window = window
        self.max_anchors = max_anchors
        self.min_trajectories = min_trajectories
        self.timeout_s = timeout_s
        self.share = share
        self.runs: list[dict[str, Any]] = []
        self.counters: Counter[str] = Counter()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="molt-weights")
        self._closing = threading.Event()

    def request(self, tenant_id: str, agent_id: str, cand: Any) -> WeightRequest:
        """The request for candidate ``cand`` (a ``weight_update``) of ``tenant_id/agent_id``."""
        from molt.control.signals import episodes

        live = VersionRegistry(self.store).live(tenant_id, agent_id)
        model = live.parts.model if live is not None else ModelPart.model_validate(cand.payload.get("model") or {})
        task = cand.payload.get("task")
        eps = episodes(self.store, tenant_id, agent_id, limit=self.window)
        same = {e.trajectory_id for e in eps if e.success is not None and (task is None or e.task == task)}
        same |= set(cand.source_trajectories)
        # a retraining after an erasure names the erased subject's trajectories: never trained on again
        excluded = set(cand.payload.get("exclude_trajectories") or ())
        same -= excluded
        others = [e.trajectory_id for e in reversed(eps) if e.success and e.trajectory_id not in same | excluded]
        got = {t.trajectory_id: t for t in self.read(tenant_id, [*same, *others[: self.max_anchors]])}
        shared: list[Trajectory] = []
        group = [u for u in (self.share(tenant_id) if self.share is not None else []) if u != tenant_id]
        for u in group:  # each read as that tenant's own eligible data, through the same reader
            theirs = {e.trajectory_id for e in episodes(self.store, u, agent_id, limit=self.window)
                      if e.success is not None and (task is None or e.task == task)} - excluded
            shared += sorted(self.read(u, sorted(theirs)), key=lambda t: t.trajectory_id)
        return WeightRequest(request_id="wu-" + new_id()[-12:], tenant_id=tenant_id, agent_id=agent_id,
                             cluster=cand.cluster, task=task, model=model,
                             trajectories=[got[t] for t in sorted(same) if t in got] + shared,
                             anchors=[got[t] for t in others[: self.max_anchors] if t in got], share_with=group)

    def __call__(self, tenant_id: str, agent_id: str, cand: Any) -> ModelPart:
        try:
            req = self.request(tenant_id, agent_id, cand)
        except Exception as exc:  # an unreadable store or a refused read: a logged no-op, never a crashed cycle
            self.counters["failed"] += 1
            raise InterventionError(f"weight update for {tenant_id}/{agent_id}: reading its trajectories failed "
                                    f"({type(exc).__name__}: {exc}); nothing trained") from exc
        entry: dict[str, Any] = {**req.summary(), "at": time.time(), "outcome": "running"}
        self.runs.append(entry)
        try:
            part = self._run(req, entry)
        except InterventionError as exc:
            entry.update(outcome="failed", error=str(exc))
            self.counters["failed"] += 1
            log.warning("Weight update %s for %s/%s failed: %s", req.request_id, tenant_id, agent_id, exc)
            raise
        entry.update(outcome="published", adapter=part.adapter)
        self.counters["published"] += 1
        return part

    def _run(self, req: WeightRequest, entry: dict[str, Any]) -> ModelPart:
        if len(req.trajectories) < self.min_trajectories:
            raise InterventionError(
                f"weight update {req.request_id}: {len(req.trajectories)} eligible trajectories of {req.agent_id} on "
                f"task {req.task!r} (at least {self.min_trajectories} needed; training reads only what governance "
                f"finds eligible)")
        t0 = time.perf_counter()
        # The plane calls the hook from inside its event loop; training (and a load that runs its own loop)
        # goes to a worker thread, and a run that hangs is given up rather than stalling the plane.
        # The wait is sliced so that close() (a server stopping) ends it at once rather than after the run.
        fut = self._pool.submit(self.train, req)
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                try:
                    adapter = fut.result(max(0.0, min(CLOSE_POLL_S, deadline - time.monotonic())))
                    break
                except concurrent.futures.TimeoutError:
                    if self._closing.is_set():
                        raise InterventionError(f"weight update {req.request_id}: the weight loop was closed (the "
                                                f"server is stopping) while training; nothing published") from None
                    if time.monotonic() >= deadline:
                        raise InterventionError(f"weight update {req.request_id}: the training run did not finish "
                                                f"within {self.timeout_s:.0f} s; nothing published") from None
        except InterventionError:
            raise
        except Exception as exc:
            if self._closing.is_set():
                raise InterventionError(f"weight update {req.request_id}: the weight loop was closed (the server is "
                                        f"stopping) while training ({exc}); nothing published") from exc
            raise InterventionError(f"weight update {req.request_id}: the training run failed "
                                    f"({type(exc).__name__}: {exc}); nothing published") from exc
        entry["train_s"] = round(time.perf_counter() - t0, 2)
        version, path = getattr(adapter, "version", None), getattr(adapter, "path", None)
        if not version or not path:
            raise InterventionError(f"weight update {req.request_id}: the trainer returned no adapter ({adapter!r})")
        entry.update(run=getattr(adapter, "run_id", None), adapter=version, path=str(path))
        check_adapter(path)
        if self.load is not None:
            try:  # on the worker thread too: a loader may run its own event loop
                self._pool.submit(self.load, str(version), str(path), [req.tenant_id, *req.share_with]
                                  ).result(self.timeout_s)
            except Exception as exc:
                raise InterventionError(f"weight update {req.request_id}: the serving engine refused adapter "
                                        f"{version} ({type(exc).__name__}: {exc}); the live version keeps "
                                        f"serving") from exc
        return ModelPart(base=req.model.base, adapter=str(version), adapter_path=str(path))

    def status(self) -> dict[str, dict[str, Any]]:
        """Counters for ``molt doctor`` (a :data:`molt.status.StatusSource`)."""
        last = self.runs[-1] if self.runs else {}
        return {"faults": {"weights.failed_runs": self.counters["failed"]},
                "state": {"weights.published": self.counters["published"],
                          "weights.last": f"{last.get('request')} {last.get('outcome')} {last.get('adapter') or ''}"
                                          .strip() if last else "none"}}

    def close(self) -> None:
        """Stop: a request waiting for its run fails with the reason, queued runs are dropped, and ``train``
        (when it has a ``close``, as :class:`molt_trainer.requests.RequestTrainer` does) abandons the run in
        flight at its next step. Nothing half-trained is published or loaded."""
        self._closing.set()
        stop = getattr(self.train, "close", None)
        if callable(stop):
            stop()
        self._pool.shutdown(wait=False, cancel_futures=True)


def training_run(store: Store, adapter: str) -> dict[str, Any] | None:
    """The trainer's ``policy_versions`` row of ``adapter`` (its run: request, data, metrics), or ``None``."""
    try:
        tbl = store.table("policy_versions")
    except Exception:
        return None
    rows = tbl.search().where(str(Filter(version_id=adapter))).limit(None).to_arrow().to_pylist()
    if not rows:
        return None
    row = max(rows, key=lambda r: r["created_at"])
    return {**row, "parts": orjson.loads(row["parts"])}


def restore_adapters(registry: VersionRegistry, load: Loader) -> list[str]:
    """Load (``load(name, path, tenants)``) the adapter of every live and canary version for the tenants
    whose versions name it, so a restarted server serves what the registry says rather than its base
    model; returns the adapters loaded. One that fails is logged and skipped."""
    wanted: dict[str, str] = {}
    tenants: dict[str, set[str]] = {}
    pairs: Sequence[tuple[str, str]] = registry.agents()
    for t, a in pairs:
        live = registry.live(t, a)
        for v in [*([live] if live is not None else []), *registry.canaries(t, a)]:
            m = v.parts.model
            if m.adapter and m.adapter_path:
                wanted[m.adapter] = m.adapter_path
                tenants.setdefault(m.adapter, set()).add(t)
    done = []
    for name, path in sorted(wanted.items()):
        try:
            load(name, path, sorted(tenants[name]))
            done.append(name)
        except Exception:
            log.exception("Restoring adapter %s from %s failed.", name, path)
    return done


def gateway_loader(url: str, admin_key: str | None, model: str, *, timeout_s: float = 300.0) -> Loader:
    """``load(name, path, tenants)`` through the gateway's admin API (``POST /v1/molt/admin/adapters``, the
    platform operator's key): loaded into every LoRA-capable backend of ``model`` for ``tenants`` only
    (the gateway serves it to no other tenant's request), registered at weight 0 (the version's own
    routing key is what routes traffic to it)."""
    import httpx

    headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}

    def load(name: str, path: str, tenants: Sequence[str] | None = None) -> None:
        body: dict[str, Any] = {"model": model, "version": name, "path": path, "weight": 0.0}
        if tenants is not None:
            body["tenants"] = list(tenants)
        r = httpx.post(url.rstrip("/") + "/v1/molt/admin/adapters", headers=headers, timeout=timeout_s, json=body)
        if r.status_code != 200:
            raise InterventionError(f"the gateway answered {r.status_code}: {r.text[:300]}")

    return load


class CanaryTarget:
    """A publish target of ``molt_trainer.publish.Publisher`` (``name`` and ``load(version, path, previous)``)
    for a trainer in its own process: the adapter becomes a canary composite version of ``tenant/agent``.

    ``load`` is checked (:func:`check_adapter`) and loaded into the serving backends with ``loader``
    (:func:`gateway_loader`: weight 0 on the plain model key, so only the version's routing key reaches it);
    then a version with the live parts and this adapter as its model part is created and canaried at
    ``weight``. A canary this target made earlier and the plane has not judged yet is aborted first
    (superseded: one change at a time per agent, and the newest weights are the ones worth judging); a
    canary someone else made (the plane's context fix) is left alone and this adapter waits, registered
    but not routed. A failed check or load raises before any version names the adapter.
    """

    name = "canary"

    def __init__(self, store: Store, tenant_id: str, agent_id: str, *, base: str,
                 loader: Loader | None, weight: float = 0.2, actor: str = "molt-trainer"):
        self.store = store
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.base = base
        self.loader = loader
        self.weight = weight
        self.actor = actor
        self.versions: list[str] = []

    def load(self, version: str, path: Path, previous: list[str]) -> None:
        from molt.control.versions import EVENTS_TABLE, VERSIONS_TABLE, AgentConfig

        check_adapter(path)
        if self.loader is not None:
            self.loader(version, str(path), [self.tenant_id])
        registry = VersionRegistry(self.store)  # makes the tables on a first start
        for name in (VERSIONS_TABLE, EVENTS_TABLE):  # what the plane in another process changed since
            self.store.table(name).checkout_latest()
        t, a = self.tenant_id, self.agent_id
        live = registry.ensure_base(t, a, AgentConfig(model=ModelPart(base=self.base)), actor=self.actor)
        pending: Sequence[Any] = registry.canaries(t, a)  # (mypy reads list[...] there as the registry's .list)
        for c in pending:
            if c.created_by != self.actor:
                log.info("trainer adapter %s waits: %s/%s has a canary under judgement (%s)", version, t, a,
                         c.version_id)
                return
            registry.abort(c.version_id, actor=self.actor, reason=f"superseded by adapter {version}")
        parts = live.parts.with_model(ModelPart(base=live.parts.model.base, adapter=version, adapter_path=str(path)))
        v = registry.create(t, a, parts, parent=live.version_id, created_by=self.actor,
                            note=f"weight update: trainer adapter {version}")
        record_change(self.store, v, live, [], kind="weight_update")
        registry.canary(v.version_id, self.weight, actor=self.actor, reason=f"trainer adapter {version}")
        self.versions.append(v.version_id)
        log.info("trainer adapter %s is canary %s of %s/%s at %.2f", version, v.version_id, t, a, self.weight)

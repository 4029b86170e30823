"""The weight loop's wiring (molt.control.weights): the plane's weight-update decision → a training run on
that agent's traffic → the adapter checked and loaded → a canary version of that agent → promoted or aborted
on the canary delta, an abort restoring the previous adapter; and every failure (no eligible data, a run
that raises, a corrupt adapter, an engine that refuses the load) a logged no-op with nothing routed to.

The desk world (a scripted model that cannot do tax arithmetic, and garbles answers under an adapter named
``*-broken``) is the fixture: the runs here write adapter files without training. The real-model loop is
tests/e2e/test_serve_train.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from molt.control.plane import ControlPlane, PlaneSettings, overrides_for
from molt.control.versions import AgentVersion
from molt.control.weights import WeightLoop, WeightRequest, check_adapter, governed_reader, store_reader
from molt.errors import InterventionError
from molt.replay import ReplayAgent, record_episode, save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, ORDERS, DeskModel, World

TENANTS = ("acme", "globex")


def _tax(n: int, tenants: tuple[str, ...] = TENANTS, start: int = 0) -> list[Traffic]:
    ids = sorted(ORDERS)
    return [Traffic(t, AGENT, f"What is the total of order {ids[i % len(ids)]} in cents including 7% tax? "
                              f"(ticket {t}-{i})", "capability") for t in tenants for i in range(start, start + n)]


def _fine(n: int, tenants: tuple[str, ...] = TENANTS) -> list[Traffic]:
    return [Traffic(t, AGENT, f"Where is order A-{1000 + i}? (ticket {t}-s{i})", "status")
            for t in tenants for i in range(n)]


class Runs:
    """A trainer stand-in: writes a peft-shaped adapter directory per request (``broken`` names it so the
    desk model garbles under it: a run that diverged)."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[WeightRequest] = []
        self.broken = False
        self.fail: Exception | None = None
        self.corrupt = False

    def __call__(self, req: WeightRequest) -> Any:
        self.requests.append(req)
        if self.fail is not None:
            raise self.fail
        name = f"desk-lora-{len(self.requests)}" + ("-broken" if self.broken else "")
        path = self.root / name
        path.mkdir(parents=True)
        (path / "adapter_config.json").write_bytes(b"{not json" if self.corrupt else
                                                   orjson.dumps({"peft_type": "LORA", "r": 8}))
        (path / "adapter_model.safetensors").write_bytes(b"\0" * 64)
        return SimpleNamespace(version=name, path=path, run_id=req.request_id)


def _setup(store: Store, tmp: Path, *, load_error: Exception | None = None, read: Any = None
           ) -> tuple[ControlPlane, Runs, list[tuple[str, str]]]:
    model = DeskModel()
    runs = Runs(tmp / "adapters")
    loaded: list[tuple[str, str]] = []

    def load(name: str, path: str, tenants: Any) -> None:
        assert list(tenants) == ["acme"]  # loaded for the tenant whose data trained it, and no other
        if load_error is not None:
            raise load_error
        asyncio.run(model.load_adapter(name, path))
        loaded.append((name, path))

    hook = WeightLoop(store, runs, read=read or store_reader(store), load=load, timeout_s=30)
    plane = ControlPlane(store, model, live_tools=World().live_tools(), base_parts=base_parts(), trainer=hook,
                         settings=PlaneSettings(canary_min=4, canary_weight=0.5, replay_sample=6, regression_sample=4))
    for t in TENANTS:
        plane.registry.ensure_base(t, AGENT, base_parts())
    save_trajectories(store, asyncio.run(record_traffic(_tax(8) + _fine(12), plane.registry, plane, World(), model)))
    return plane, runs, loaded


def _ask_weights(plane: ControlPlane) -> Any:
    """Cycles until the plane decides on weights (the first waits for late evidence)."""
    for _ in range(3):
        res = plane.run_cycle("acme", AGENT)
        if res.choice != "noop" or not res.record.reason.startswith("waiting for evidence"):
            return res
    return res


def _canary_traffic(store: Store, plane: ControlPlane, v: AgentVersion, items: list[Traffic],
                    served_by: Any = None) -> None:
    pol = ReplayAgent(served_by or plane.backend, overrides_for(v.parts), version=v.version_id)
    runs = [asyncio.run(record_episode(AGENT, t.input, pol, World().live_tools(), task=t.task, tenant_id="acme"))
            for t in items]
    save_trajectories(store, [(e, r) for e, r, _ in runs])


def test_the_adapter_is_canaried_for_that_agent_promoted_then_a_diverged_one_is_aborted(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane, runs, loaded = _setup(store, tmp_path)
        base = plane.registry.live("acme", AGENT)
        res = _ask_weights(plane)
        assert res.choice == "weight_update", res.record.reason
        # The request: that agent's traffic on the failing task (failures and contrasting successes are
        # whatever the window holds), plus successes on its other tasks as anchors.
        req = runs.requests[0]
        assert (req.tenant_id, req.agent_id, req.task) == ("acme", AGENT, "capability")
        assert {t.events[0].metadata.task for t in req.trajectories} == {"capability"}
        assert req.anchors and all(t.events[0].tenant_id == "acme" for t in req.trajectories + req.anchors)
        # The adapter: loaded, then a canary version of acme's agent with only the weights changed.
        v = res.version
        assert v is not None and v.status == "canary" and (v.tenant_id, v.agent_id) == ("acme", AGENT)
        assert loaded == [("desk-lora-1", str(tmp_path / "adapters" / "desk-lora-1"))]
        assert v.parts.model.adapter == "desk-lora-1" and v.parts.model_copy(update={"model": base.parts.model}) \
            == base.parts
        assert res.record.applied_version == v.version_id
        assert plane.registry.live("globex", AGENT).version_id != v.version_id  # another tenant's agent: untouched
        # Canary traffic as good as live → promoted (the plane's canary rule, as for any change).
        _canary_traffic(store, plane, v, _tax(3, ("acme",), 100) + _fine(3, ("acme",)))
        promoted = plane.run_cycle("acme", AGENT)
        assert promoted.choice == "promote" and plane.registry.live("acme", AGENT).version_id == v.version_id

        # A run that diverged: its adapter garbles every answer. Canaried, aborted, and the live version
        # (with the first adapter) serves again.
        runs.broken = True
        _canary_traffic(store, plane, v, _tax(6, ("acme",), 200))
        res2 = _ask_weights(plane)
        assert res2.choice == "weight_update", res2.record.reason
        bad = res2.version
        assert bad is not None and bad.parts.model.adapter == "desk-lora-2-broken"
        _canary_traffic(store, plane, bad, _fine(4, ("acme",)) + _tax(2, ("acme",), 300))
        aborted = plane.run_cycle("acme", AGENT)
        assert aborted.choice == "rollback" and "aborted" in aborted.record.reason, aborted.record.reason
        live = plane.registry.live("acme", AGENT)
        assert live.version_id == v.version_id and live.parts.model.adapter == "desk-lora-1"
        assert plane.registry.canaries("acme", AGENT) == []
        hook = plane.trainer
        assert isinstance(hook, WeightLoop) and [r["outcome"] for r in hook.runs] == ["published", "published"]


def _unreadable(tenant: str, ids: Any) -> Any:
    raise OSError("the object store timed out")


@pytest.mark.parametrize("fault", ["run_raises", "corrupt_adapter", "load_refused", "not_eligible", "read_fails"])
def test_a_failed_run_is_a_logged_noop_and_nothing_is_routed_to_it(fault: str, tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        read = None
        if fault == "not_eligible":  # the built-in governance policy opts no tenant in to training
            from molt.governance import load_policy_file

            read = governed_reader(store, load_policy_file("default"))
        elif fault == "read_fails":
            read = _unreadable
        plane, runs, loaded = _setup(store, tmp_path, read=read,
                                     load_error=RuntimeError("vLLM: 400 adapter rank too large")
                                     if fault == "load_refused" else None)
        runs.fail = RuntimeError("CUDA error mid-step") if fault == "run_raises" else None
        runs.corrupt = fault == "corrupt_adapter"
        live = plane.registry.live("acme", AGENT)
        res = _ask_weights(plane)
        assert res.choice == "noop" and res.record.reason.startswith("applying weight_update failed"), \
            res.record.reason
        why = {"run_raises": "CUDA error mid-step", "corrupt_adapter": "not served",
               "load_refused": "refused adapter desk-lora-1", "not_eligible": "eligible",
               "read_fails": "object store timed out"}[fault]
        assert why in res.record.reason
        assert res.version is None and plane.registry.canaries("acme", AGENT) == []
        assert plane.registry.live("acme", AGENT).version_id == live.version_id
        assert all(v.parts.model.adapter is None for v in plane.registry.list("acme", AGENT))
        assert loaded == []
        logged = plane.log.list("acme", AGENT, limit=1)[0]
        assert logged.reason == res.record.reason   # the failure is in the decision log
        hook = plane.trainer
        assert isinstance(hook, WeightLoop) and hook.status()["faults"]["weights.failed_runs"] == 1
        assert fault == "read_fails" or hook.runs[-1]["outcome"] == "failed"


def test_check_adapter_refuses_half_written_directories(tmp_path: Path) -> None:
    with pytest.raises(InterventionError, match="incomplete"):
        check_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_bytes(b'{"r": 8}')
    (tmp_path / "adapter_model.safetensors").write_bytes(b"x")
    with pytest.raises(InterventionError, match="peft_type"):
        check_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_bytes(b'{"peft_type": "LORA"}')
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(InterventionError, match="empty"):
        check_adapter(tmp_path)


def test_closing_the_loop_ends_a_request_waiting_for_its_run_and_closes_the_trainer(tmp_path: Path) -> None:
    import threading
    import time

    class Blocking:
        """A trainer whose run goes on until it is closed (a long run on a CPU)."""

        def __init__(self) -> None:
            self.started, self.closed = threading.Event(), threading.Event()

        def __call__(self, req: WeightRequest) -> Any:
            self.started.set()
            self.closed.wait(60)
            raise RuntimeError("abandoned")

        def close(self) -> None:
            self.closed.set()

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        train = Blocking()
        loop = WeightLoop(store, train, read=lambda tenant, ids: [], min_trajectories=0)
        cand = SimpleNamespace(payload={"task": "capability", "model": {"base": "desk-model"}}, cluster="capability|x",
                               source_trajectories=[])
        got: list[BaseException] = []

        def ask() -> None:
            try:
                loop("acme", AGENT, cand)
            except BaseException as exc:
                got.append(exc)

        asker = threading.Thread(target=ask)
        asker.start()
        assert train.started.wait(30), got
        t0 = time.monotonic()
        loop.close()
        asker.join(10)
        assert not asker.is_alive() and time.monotonic() - t0 < 10
        assert train.closed.is_set()
        assert len(got) == 1 and isinstance(got[0], InterventionError) and "closed" in str(got[0]), got
        assert loop.runs[-1]["outcome"] == "failed" and loop.status()["faults"]["weights.failed_runs"] == 1


def test_a_trainer_service_answers_the_planes_requests_through_the_queue(tmp_path: Path) -> None:
    """``molt serve`` without ``--train`` queues the plane's weight updates (molt.control.weight_queue); a
    trainer service (``molt-trainer serve --plane-requests``, here in this process) trains each through the
    same weight loop and canaries the adapter for that agent; the plane judges it as it does its own. A
    failed run is the request's outcome, with the reason, and names no version. The service loads the adapter
    into the gateway's backends only; the plane loads it into its replay backend when it replays under it."""
    import threading

    from molt.control.weight_queue import WeightQueue, serve_requests

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane, runs, loaded = _setup(store, tmp_path)
        loop = plane.trainer  # the service's weight loop (in its own process in production)
        assert isinstance(loop, WeightLoop)
        gateway, served_by = [], DeskModel()  # the gateway's backend: the service loads the adapter there

        def gateway_load(name: str, path: str, tenants: Any) -> None:
            assert list(tenants) == ["acme"]
            asyncio.run(served_by.load_adapter(name, path))
            gateway.append((name, path))

        loop.load = gateway_load
        queue = WeightQueue(store)
        plane.trainer = queue
        base = plane.registry.live("acme", AGENT)
        res = _ask_weights(plane)
        assert res.choice == "weight_update" and res.version is None, res.record.reason
        [req] = queue.pending("acme", AGENT)
        assert f"request {req.request_id}" in " ".join(res.record.actions), res.record.actions
        assert req.cluster == res.chosen.cluster and runs.requests == []  # nothing trained in the plane
        # While the request is open the plane waits for it; asked anyway, the queue answers with the open one.
        again = plane.run_cycle("acme", AGENT)
        assert again.choice == "noop" and "already requested" in again.record.reason, again.record.reason
        assert queue("acme", AGENT, res.chosen).startswith(req.request_id)
        assert [r.request_id for r in queue.requests("acme")] == [req.request_id]

        stop = threading.Event()
        assert serve_requests(queue, loop, stop, tenant_id="acme", canary_weight=0.5, poll_s=0, max_requests=1) == 1
        assert runs.requests[0].task == "capability" and {t.events[0].tenant_id for t in runs.requests[0].trajectories
                                                          } == {"acme"}
        [done] = queue.requests("acme")
        assert done.status == "done", done
        v = plane.registry.get(done.detail or "")
        assert v.status == "canary" and (v.tenant_id, v.agent_id, v.parent_id) == ("acme", AGENT, base.version_id)
        assert v.parts.model.adapter == "desk-lora-1" and gateway == [("desk-lora-1", str(runs.root / "desk-lora-1"))]
        assert loaded == [] and "desk-lora-1" not in asyncio.run(plane.backend.models())
        assert req.request_id in (v.note or "")
        _canary_traffic(store, plane, v, _tax(3, ("acme",), 100) + _fine(3, ("acme",)), served_by)
        assert plane.run_cycle("acme", AGENT).choice == "promote"
        assert plane.registry.live("acme", AGENT).version_id == v.version_id

        # A run that raises: the request fails with the reason; nothing is canaried; the plane asks anew.
        runs.fail = RuntimeError("CUDA error mid-step")
        _canary_traffic(store, plane, v, _tax(6, ("acme",), 200), served_by)
        assert _ask_weights(plane).choice == "weight_update"
        assert "desk-lora-1" in asyncio.run(plane.backend.models())  # replayed under the live adapter
        assert serve_requests(queue, loop, stop, tenant_id="acme", poll_s=0, max_requests=1) == 1
        failed = queue.requests("acme")[-1]
        assert failed.status == "failed" and "CUDA error mid-step" in (failed.detail or ""), failed
        assert plane.registry.canaries("acme", AGENT) == [] and plane.registry.live("acme", AGENT).version_id == \
            v.version_id
        assert _ask_weights(plane).choice == "weight_update"
        assert [r.status for r in queue.requests("acme")] == ["done", "failed", "queued"]


def test_a_claim_whose_service_died_is_queued_again(tmp_path: Path) -> None:
    """A request left running past ``stale_after_s`` (its service died mid-run) is pending again for the next
    service, and no longer holds the plane's wait; a fresh claim does both."""
    from molt.control.diagnose import Candidate
    from molt.control.weight_queue import WeightQueue

    model = {"base": "m"}
    cand = Candidate(candidate_id="c1", kind="weight_update", cluster="k", description="d", cost=10.0,
                     payload={"model": model}, source_trajectories=["t1"])
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        fresh, stale = WeightQueue(store), WeightQueue(store, stale_after_s=0.0)
        rid = fresh("acme", AGENT, cand)
        [req] = fresh.pending("acme", AGENT)
        assert req.request_id == rid and fresh.outstanding("acme", AGENT, model) == {"k"}
        fresh.claim(req)
        assert fresh.pending("acme", AGENT) == [] and fresh.outstanding("acme", AGENT, model) == {"k"}
        assert [r.request_id for r in stale.pending("acme", AGENT)] == [rid]
        assert stale.outstanding("acme", AGENT, model) == set()
        fresh.finish(req, "failed", "CUDA error")
        assert fresh.outstanding("acme", AGENT, model) == set() and stale.pending("acme", AGENT) == []


def test_the_trainer_service_takes_tenants_in_turn_so_one_backlog_cannot_starve_another(tmp_path: Path) -> None:
    """``molt-trainer serve --plane-requests`` serving every tenant: acme has four requests queued before
    globex's and initech's first, and each acme run queues one more acme request (a backlog that grows
    while it is served). The others are still trained second and third, and every later round gives each
    tenant with work one run; served oldest-first (the order before) globex would wait for acme's whole
    backlog, which never ends."""
    import threading

    from molt.control.diagnose import Candidate
    from molt.control.versions import ModelPart
    from molt.control.weight_queue import WeightQueue, serve_requests

    def cand(cluster: str) -> Candidate:
        return Candidate(candidate_id=cluster, kind="weight_update", cluster=cluster, description="d", cost=10.0,
                         payload={"model": {"base": "m"}}, source_trajectories=[])

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane_registry = ControlPlane(store, DeskModel(), base_parts=base_parts()).registry
        tenants = ("acme", "globex", "initech")
        for t in tenants:
            plane_registry.ensure_base(t, AGENT, base_parts())
        queue = WeightQueue(store)
        for i in range(4):
            queue("acme", AGENT, cand(f"acme-{i}"))
        queue("globex", AGENT, cand("globex-0"))
        queue("initech", AGENT, cand("initech-0"))
        queue("globex", AGENT, cand("globex-1"))
        order: list[str] = []

        def train(tenant_id: str, agent_id: str, c: Candidate) -> ModelPart:
            order.append(c.cluster)
            if tenant_id == "acme":  # acme's backlog grows while it is being served
                queue("acme", AGENT, cand(f"acme-{len(order) + 10}"))
            return ModelPart(base="m", adapter=f"{c.cluster}-lora", adapter_path="/nowhere")

        assert serve_requests(queue, train, threading.Event(), poll_s=0, max_requests=7) == 7
        tenant_of = [c.split("-")[0] for c in order]
        assert tenant_of == ["acme", "globex", "initech", "acme", "globex", "acme", "acme"], order
        assert order[:5] == ["acme-0", "globex-0", "initech-0", "acme-1", "globex-1"]  # each tenant oldest first
        done = {r.cluster: r.status for r in queue.requests()}
        assert all(done[c] == "done" for c in order) and len(done) == 7 + 4  # four acme runs queued four more
        assert {c.split("-")[0] for c, s in done.items() if s == "queued"} == {"acme"}  # only acme's backlog waits


def test_a_shared_adapter_learns_from_and_serves_only_the_tenants_that_share_both_ways(tmp_path: Path) -> None:
    """acme and globex list each other in ``training.share_with``; initech lists acme, which does not list it.
    A gap of acme's agent, trained into one shared adapter: acme's and globex's traffic on the task, never
    initech's, and the adapter is loaded for acme and globex only. Without sharing (initech's own gap) the
    adapter is initech's alone, on its own data."""
    from molt.control.weights import sharing_group
    from molt.governance import GovernancePolicy

    policy = GovernancePolicy.model_validate({"tenants": {
        "acme": {"training": {"opt_in": True, "share_with": ["globex"]}},
        "globex": {"training": {"opt_in": True, "share_with": ["acme"]}},
        "initech": {"training": {"opt_in": True, "share_with": ["acme"]}}}})
    group = sharing_group(policy)
    assert (group("acme"), group("globex"), group("initech")) == (["globex"], ["acme"], [])
    tenants = ("acme", "globex", "initech")
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        model, runs = DeskModel(), Runs(tmp_path / "adapters")
        loads: list[tuple[str, list[str]]] = []
        loop = WeightLoop(store, runs, read=store_reader(store), share=group, timeout_s=30,
                          load=lambda name, path, ts: loads.append((name, list(ts))))
        plane = ControlPlane(store, model, live_tools=World().live_tools(), base_parts=base_parts(), trainer=loop)
        for t in tenants:
            plane.registry.ensure_base(t, AGENT, base_parts())
        save_trajectories(store, asyncio.run(record_traffic(_tax(6, tenants), plane.registry, plane, World(), model)))
        cand = SimpleNamespace(payload={"task": "capability", "model": {"base": "desk-model"}}, cluster="capability|x",
                               source_trajectories=[])
        part = loop("acme", AGENT, cand)
        req = runs.requests[-1]
        assert req.share_with == ["globex"] and loads[-1] == (part.adapter, ["acme", "globex"])
        counts = {t: sum(1 for x in req.trajectories if x.events[0].tenant_id == t) for t in tenants}
        assert counts == {"acme": 6, "globex": 6, "initech": 0}, counts
        loop("initech", AGENT, cand)
        req = runs.requests[-1]
        assert req.share_with == [] and {x.events[0].tenant_id for x in req.trajectories} == {"initech"}
        assert loads[-1][1] == ["initech"]

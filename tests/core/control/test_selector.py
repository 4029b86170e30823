"""The honest selector: what the plane does with failure patterns the templates were not written beside.

Each test is a pattern a user meets in the first week (issue 20): a procedure skipped with no tool error,
corrections that carry personal data, an agent replay cannot run, users who contradict each other, an
upstream tool renamed, a tool that times out. The agent is the scripted desk world (a context-reading
fixture, ``examples/desk``) — these are wiring tests; the real-model figures are ``bench/bench_evolve.py``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from molt.backends.base import ChatRequest
from molt.control.diagnose import cluster_failures, propose
from molt.control.memory import MemoryStore
from molt.control.plane import ControlPlane, PlaneSettings, overrides_for
from molt.control.signals import Episode, ToolUse
from molt.control.versions import AgentConfig, AgentVersion, ModelPart
from molt.replay import LiveTools, ReplayAgent, record_episode, save_trajectories
from molt.store import Store
from molt_desk.scenarios import Traffic, base_parts, record_traffic
from molt_desk.world import AGENT, FACTS, ORDERS, DeskModel, World

REFUND = FACTS["refund window"]
STATUS_IDS = sorted(ORDERS)


def _plane(store: Store, world: World | None = None, backend: Any = None, **settings: Any) -> ControlPlane:
    plane = ControlPlane(store, backend or DeskModel(), live_tools=(world or World()).live_tools(),
                         base_parts=base_parts(), settings=PlaneSettings(promote_directly=True, **settings))
    return plane


def _record(store: Store, plane: ControlPlane, items: list[Traffic], world: World | None = None) -> None:
    for t in sorted({x.tenant for x in items}):
        plane.registry.ensure_base(t, AGENT, base_parts())
    save_trajectories(store, asyncio.run(record_traffic(items, plane.registry, plane, world or World(), DeskModel())))


def _healthy(tenant: str, n: int = 12) -> list[Traffic]:
    return [Traffic(tenant, AGENT, f"Where is order {STATUS_IDS[i % len(STATUS_IDS)]}? (ticket {tenant}-s{i})",
                    "status") for i in range(n)]


def _fact_asks(tenant: str, corrections: list[str | None]) -> list[Traffic]:
    return [Traffic(tenant, AGENT, f"{REFUND.questions[i % 3]} (ticket {tenant}-{i})", "kb_question", c)
            for i, c in enumerate(corrections)]


def _live_successes(plane: ControlPlane, tenant: str, items: list[Traffic], world: World | None = None) -> int:
    live = plane.registry.live(tenant, AGENT)
    assert live is not None
    pol = ReplayAgent(DeskModel(), overrides_for(live.parts, plane.memories, tenant_id=tenant),
                       version=live.version_id)
    wins = 0
    for tr in items:
        _, rewards, _ = asyncio.run(record_episode(AGENT, tr.input, pol, (world or World()).live_tools(),
                                                   task=tr.task, tenant_id=tenant))
        wins += bool(rewards and rewards[0].value > 0.5)
    return wins


# --------------------------------------------------------------------------- procedure without a tool error


def _episode(i: int, question: str, tools: list[str], success: bool) -> Episode:
    return Episode(trajectory_id=f"t{i}", tenant_id="clinic", agent_id="refill-desk", task=None, policy_version="v1",
                   started_at=datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=i), success=success,
                   reward=1.0 if success else 0.0, question=question, answer="Your refill is on its way.",
                   tools=[ToolUse(name, {"rx": f"RX-{i}"}, True) for name in tools],
                   failure_signals=[] if success else ["reward"])


def test_procedural_failure_signalled_only_by_late_rewards_gets_a_skill() -> None:
    """A pharmacy's refill agent skips the interaction check: no tool errs, the refill goes out, and the
    pharmacist's late negative reward is the only signal. The successes of the same request checked
    first — that procedure is what the failures lack, so it becomes a skill candidate (the templates
    used to propose skills for tool-error clusters only: here the plane had nothing to offer)."""
    asks = ["Please refill my prescription RX-{}.", "Can you refill prescription RX-{} for me?",
            "I need a refill of RX-{}, please."]
    eps = [_episode(i, asks[i % 3].format(100 + i), ["check_interactions", "refill_prescription"], True)
           for i in range(6)]
    # ten failures beside six successes: the cluster clears the evidence bar split over every region of
    # the request tree that holds them (eight: Fisher 0.0019 > 0.01 / (3 x 3 regions))
    eps += [_episode(10 + i, asks[i % 3].format(200 + i), ["refill_prescription"], False) for i in range(10)]
    eps += [_episode(30 + i, q, ["clinic_hours"], True) for i, q in enumerate(
        ["When does the clinic open on Saturday?", "What are your opening hours?", "Are you open on Sunday?"] * 4)]
    [cl] = [c for c in cluster_failures(eps) if c.significant]
    assert cl.kind == "answer" and cl.tool is None
    live = AgentVersion(version_id="v1", tenant_id="clinic", agent_id="refill-desk", status="live",
                         parts=AgentConfig(model=ModelPart(base="m")), parts_bytes=b"{}",
                         created_at=datetime(2026, 11, 1, tzinfo=UTC))
    skills = [c for c in propose(cl, eps, live) if c.kind == "skill_patch"]
    assert len(skills) == 1, [c.kind for c in propose(cl, eps, live)]
    instr = skills[0].payload["instructions"]
    assert instr.index("check_interactions") < instr.index("refill_prescription")
    assert set(skills[0].source_trajectories) == {f"t{i}" for i in range(6)}
    # The failures that already follow the successes' procedure lack nothing it could add.
    same = [_episode(50 + i, asks[i % 3].format(300 + i), ["check_interactions", "refill_prescription"], False)
            for i in range(10)]
    [cl2] = [c for c in cluster_failures(eps[:6] + same + eps[16:]) if c.significant]
    assert not [c for c in propose(cl2, eps[:6] + same + eps[16:], live) if c.kind == "skill_patch"]


# --------------------------------------------------------------------------- corrections with personal data

PEOPLE = [("Maria Lopez", "maria.lopez@example.com"), ("Tom Becker", "tom.becker@mailbox.org"),
          ("Aiko Tanaka", "aiko.t@example.net"), ("Samuel Okafor", "s.okafor@example.com"),
          ("Lena Fischer", "lena.fischer@web.de"), ("Rahul Mehta", "rahul.mehta@example.org"),
          ("Claire Dubois", "claire.d@example.fr"), ("Jonas Berg", "jonas.berg@example.se")]


def test_corrections_with_personal_data_yield_a_pii_free_memory_that_fixes_the_cluster(tmp_path: Path) -> None:
    """Each user corrects the answer in their own words around the same fact, signing with their name
    and email. The memory is the fact — abstracted through the governance redactor — not any customer:
    it passes the safety gate, is replayed, goes live and fixes fresh traffic (the verbatim correction
    used to be refused by the safety gate, leaving the cluster unfixed — or, large enough, sent to
    training)."""
    corrections: list[str | None] = [f"Hi, I am {n}. {REFUND.text} Please write to me at {m}." for n, m in PEOPLE]
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store)
        _record(store, plane, _fact_asks("acme", corrections) + _healthy("acme"))
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "memory_insert", (res.record.reason, res.record.rejected)
        text = res.chosen.payload["text"] if res.chosen else ""
        assert REFUND.answer in text
        assert not any(part in text for person in PEOPLE for part in (*person[0].split(), person[1]))
        assert plane.redactor.redact(text)[1] == []
        [stored] = MemoryStore(store).memories("acme")
        assert stored.text == text
        replay = next(c for c in res.record.candidates if c["kind"] == "memory_insert")["evidence"]["replay"]
        assert replay["candidate_success_rate"] > replay["baseline_success_rate"]
        fresh = _fact_asks("acme", [None] * 6)
        assert _live_successes(plane, "acme", fresh) == 6


# --------------------------------------------------------------------------- an agent replay cannot run


class _Unreplayable(DeskModel):
    """The plane's replay backend for an agent that cannot be re-driven: every replay raises."""

    async def chat(self, req: ChatRequest) -> Any:
        raise RuntimeError("this agent keeps its state outside its messages; its loop cannot be re-driven")


def test_fact_gap_of_an_agent_that_cannot_be_replayed_is_never_a_weight_update(tmp_path: Path) -> None:
    """A large, corrected fact cluster in two tenants — the size at which the plane used to escalate to
    training by cluster size alone — of an agent whose candidates all fail to replay: no context change
    was *tried*, so no weight update, this cycle or the next; the log says the candidates could not be
    replayed."""
    asked: list[str] = []
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, backend=_Unreplayable())
        plane.trainer = lambda t, a, c: asked.append(t) or "train-1"
        items = [x for t in ("acme", "globex") for x in _fact_asks(t, [REFUND.text] * 14) + _healthy(t)]
        _record(store, plane, items)
        for _ in range(2):
            res = plane.run_cycle("acme", AGENT)
            assert res.choice == "noop", res.record.reason
            assert "could be replayed" in res.record.reason and "raised" in res.record.reason, res.record.reason
        assert asked == [] and not plane.log.list("acme", AGENT, choice="weight_update")


# --------------------------------------------------------------------------- contradicting corrections


def test_contradicting_corrections_are_a_noop_with_the_reason(tmp_path: Path) -> None:
    """Eight users correct the refund-window answer; they name six different windows (two agree). Which
    correction came first used to decide the memory; now no memory is proposed, and the log says the
    corrections disagree (no weight update either: the one context candidate left, the self-check rule,
    failed on a cluster neither large nor seen in another tenant)."""
    days = [45, 30, 14, 45, 60, 90, 7, 21]
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store)
        _record(store, plane, _fact_asks("acme", [f"The refund window is {d} days." for d in days])
                + _healthy("acme"))
        for _ in range(2):
            res = plane.run_cycle("acme", AGENT)
            assert res.choice == "noop", res.record.reason
            assert "corrections disagree" in res.record.reason and "no majority" in res.record.reason, \
                res.record.reason
            assert not [c for c in res.record.candidates + res.record.rejected if c["kind"] == "memory_insert"]
        assert plane.registry.live("acme", AGENT).parent_id is None


# --------------------------------------------------------------------------- an upstream tool renamed


class ToolNotFound(Exception):
    """What an upstream says to a call of a tool it no longer has."""


class RenamedWorld(World):
    """The order service renamed ``lookup_order`` to ``get_order``; the agent still offers the old name."""

    def lookup_order(self, order_id: str) -> dict[str, Any]:
        raise ToolNotFound("unknown tool 'lookup_order'; this service offers get_order, refund, search_kb")

    def get_order(self, order_id: str) -> dict[str, Any]:
        return World.lookup_order(self, order_id)

    def live_tools(self) -> LiveTools:
        live = super().live_tools()
        live.register("get_order", self.get_order)
        return live


def test_upstream_rename_gets_a_rename_candidate_that_works(tmp_path: Path) -> None:
    """Every order lookup fails with "unknown tool": the plane proposes dispatching the agent's
    ``lookup_order`` calls as ``get_order`` (the name the error points to), replays it against the
    upstream's tools, promotes it, and fresh traffic through the new version succeeds. Without the
    upstream's tools replay cannot judge it: then the log names the 10-failure cluster and why its
    candidates were refused (it used to say "no failures")."""
    world = RenamedWorld()
    items = [Traffic("acme", AGENT, f"Where is order {STATUS_IDS[i % len(STATUS_IDS)]}? (ticket {i})", "status")
             for i in range(10)]
    with Store.open(tmp_path / "blind", auto_compact=False) as store:
        plane = _plane(store)
        plane.live_tools = None
        _record(store, plane, items, world)
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "noop"
        assert "tool:lookup_order:ToolNotFound" in res.record.reason and "10 failure" in res.record.reason
        assert "no failures" not in res.record.reason
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, world)
        _record(store, plane, items, world)
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "tool_schema_edit", (res.record.reason, res.record.rejected)
        assert res.chosen is not None and res.chosen.payload.get("rename") == "get_order"
        live = plane.registry.live("acme", AGENT)
        assert live.parts.tools["lookup_order"].dispatch == "get_order"
        assert _live_successes(plane, "acme", items[:4], world) == 4


def test_rename_targets_are_names_the_error_points_to_not_abbreviations() -> None:
    from molt.control.clusters import Cluster
    from molt.control.diagnose import rename_targets

    err = ToolUse("lookup_order", {"order_id": "A-1"}, False, "ToolNotFound",
                  "unknown tool 'lookup_order' (e.g. a renamed one, i.e. see the catalogue); available: get_order")
    eps = [Episode(trajectory_id=f"t{i}", tenant_id="acme", agent_id=AGENT, task=None, policy_version="v1",
                   started_at=datetime(2026, 12, 1, tzinfo=UTC), success=False, reward=0.0, question="Where?",
                   answer=None, tools=[err]) for i in range(3)]
    cl = Cluster(key="k", task=None, signature="tool:lookup_order:ToolNotFound", kind="tool_error", failures=eps,
                 tool="lookup_order", error_type="ToolNotFound")
    assert rename_targets(cl) == ["get_order"]


# --------------------------------------------------------------------------- a tool that times out


def test_timing_out_tool_is_a_flagged_environment_fault(tmp_path: Path) -> None:
    """The order service times out on every lookup; the agent's calls are right. No intervention on the
    agent (none would help, and training would teach the model to avoid a tool that works tomorrow):
    the cycle's outcome is ``environment_fault``, flagged with the error, and the live version stays."""
    world = World(flaky=1.0)
    items = [Traffic("acme", AGENT, f"Where is order {STATUS_IDS[i % len(STATUS_IDS)]}? (ticket {i})", "status")
             for i in range(10)]
    items += [Traffic("acme", AGENT, f"{FACTS['warranty period'].questions[i % 3]} (ticket w{i})", "kb_question")
              for i in range(6)]
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store, world)
        _record(store, plane, items, world)
        base = plane.registry.live("acme", AGENT)
        res = plane.run_cycle("acme", AGENT)
        assert res.choice == "environment_fault", res.record.reason
        assert "timed out" in res.record.reason and "lookup_order" in res.record.reason
        assert any(a.startswith("flagged") for a in res.record.actions)
        [cl] = [c for c in res.record.signals["clusters"] if "environment_fault" in c]
        assert cl["size"] == 10
        assert plane.registry.live("acme", AGENT).version_id == base.version_id
        # No candidate for the fault (the unanswered warranty asks are screened: a self-check rule is
        # replayed on them and fixes nothing).
        assert not [c for c in res.record.candidates if c["cluster"] == cl["key"]]


def test_decision_log_names_every_significant_cluster(tmp_path: Path) -> None:
    """The log's signals list every significant cluster with its size, failure signals and evidence."""
    with Store.open(tmp_path / "s", auto_compact=False) as store:
        plane = _plane(store)
        _record(store, plane, _fact_asks("acme", [REFUND.text] * 8) + _healthy("acme"))
        res = plane.run_cycle("acme", AGENT)
        [cl] = res.record.signals["clusters"]
        assert cl["size"] == 8 and cl["failure_signals"].get("correction") == 8 and cl["evidence"]["significant"]
        [logged] = plane.log.list("acme", AGENT)
        assert logged.signals["clusters"][0]["key"] == cl["key"]


def test_a_correction_governed_at_capture_keeps_the_fact_not_the_placeholders(tmp_path: Path) -> None:
    """Corrections reach the plane as governance stored them: the customer's name already a
    placeholder or a pseudonym. Those clauses are the customer, not the fact (the memory used to begin
    "Hello, this is <PERSON_1>.")."""
    from molt.control.diagnose import abstract_correction

    with Store.open(tmp_path / "s", auto_compact=False) as store:
        redactor = _plane(store).redactor  # the plane's: personal data and secrets, not firms or places
    fact = "The late fine at Pinecrest Public Library is 35 cents per day."
    for who in ("<PERSON_1>", "<PERSON_5e1f0a9c2b>"):
        stored = f"Hello, this is {who}. {fact} Write to me at <EMAIL_ADDRESS_1>."
        assert abstract_correction(stored, redactor) == fact
    assert abstract_correction(fact, redactor) == fact  # nothing personal: as it is

"""``molt demo``: watch a real agent evolve through Molt, end to end, on a laptop.

Two tenants run the support-desk agent of :mod:`molt_desk.world` — its model calls made with
LangChain's ``ChatOpenAI`` (tools bound with ``bind_tools``, tools as LangChain ``StructuredTool``\\s)
against Molt's OpenAI-compatible gateway on a loopback port:

- **acme** deploys the current integration; its consumers need JSON answers for status requests
  (a format failure), its knowledge base lacks the refund window (a missing fact), its refunds skip
  the lookup (a procedural failure);
- **globex** runs the legacy integration whose ``lookup_order`` schema confuses the model (tool-schema
  confusion) and its knowledge base lacks the warranty period;
- both ask tax arithmetic the model cannot do (a capability gap only a weight update can close).

Every call is captured (gateway → Recorder → LanceDB), rewarded by the task verifier through the
gateway's reward endpoint, and some failures get a *late* user correction in the next round. After
each round the control plane runs one cycle per agent: it diagnoses failure clusters, replays
candidates on them, gates them, canaries the winner (half the sessions) and promotes or aborts it the
next round. The success rate climbs as interventions land. At the end: a table in the terminal, an
HTML report with plots (success per tenant over rounds with intervention markers, reward, cost per
success, the decision log) and a PNG of the main curve, and every stored trajectory's hash chain
verified.

``--quick`` (CI) runs 8 rounds of 12 requests per tenant in a few minutes. Without ``--train`` the weight
update is only requested (the scripted desk model has no weights), so the capability cluster is reported
as "weight update requested" and stays failing.

``--train`` (needs molt-trainer) adds a real policy model: the gateway gets a second backend, SmolLM2-135M
on the local backend, and both tenants run a third agent, ``molt-math`` (:mod:`molt_demo.math_agent`),
whose replies must open with a number — a capability gap of the model. The plane waits a cycle for late
corrections (none come), replays the context fixes it has for that cluster, finds none that works, and asks
for a weight update; the trainer hook
(:mod:`molt_demo.training`) trains a LoRA adapter on the agent's recorded token-level trajectories,
hot-loads it into the backend and returns its model part; the plane canaries it and promotes it, and the
math success rate climbs. The report's fixes table credits each change per version: success served under
the version it made against its parent's (the versions in the trajectories' provenance).

Library messages (model load reports, warnings, progress bars) go to ``molt-demo.log`` beside the report.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import io
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from molt.atdp.ids import new_id
from molt.atdp.models import ErrorInfo, Outcome, OutcomeStatus
from molt.replay import ToolFailed

__all__ = ["DemoResult", "demo_command", "run_demo"]

log = logging.getLogger("molt_demo")
console = Console(stderr=True)

MODEL = "desk-model"
KEYS = {"sk-demo-acme": ("acme", "agent_writer"), "sk-demo-globex": ("globex", "agent_writer"),
        "sk-demo-acme-admin": ("acme", "admin"), "sk-demo-globex-admin": ("globex", "admin")}
TENANT_KEYS = {"acme": "sk-demo-acme", "globex": "sk-demo-globex"}
MATH_TASK_KEY = "arithmetic"  # molt_demo.math_agent.MATH_TASK (not imported: the quick demo never loads it)


# --------------------------------------------------------------------------- the agent's LangChain side


class LangChainModel:
    """The agent's model client for live runs: LangChain ``ChatOpenAI`` against the gateway.

    It offers the same ``chat(messages, tools=..., **sampling)`` the agent uses under replay, so the
    one agent function serves live traffic and counterfactual replays alike.
    """

    def __init__(self, base_url: str, api_key: str, *, agent: str, task: str, trajectory_id: str,
                 model: str = MODEL, session_id: str | None = None):
        from langchain_openai import ChatOpenAI

        headers = {"x-molt-agent": agent, "x-molt-task": task, "x-molt-trajectory": trajectory_id}
        if session_id is not None:  # the gateway routes a session, not the trajectory, when it has one
            headers["x-molt-session"] = session_id
        self.llm = ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=0, timeout=60,
                              default_headers=headers)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **sampling: Any) -> Any:
        from langchain_core.messages import convert_to_messages

        from molt.replay.episode import Reply

        llm: Any = self.llm.bind_tools(tools) if tools else self.llm
        ai = llm.invoke(convert_to_messages(messages), **sampling)
        calls = [{"id": c["id"], "name": c["name"], "arguments": c["args"]} for c in ai.tool_calls]
        msg: dict[str, Any] = {"role": "assistant", "content": ai.content or None}
        if calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": orjson.dumps(c["arguments"]).decode()}}
                                 for c in calls]
        return Reply(ai.content or None, calls, msg)


class LangChainTools:
    """The world's tools as LangChain ``StructuredTool``\\s; an exception becomes :class:`ToolFailed`,
    as the agent expects from any tool box."""

    def __init__(self, world: Any):
        from langchain_core.tools import StructuredTool

        self.tools = {fn.__name__: StructuredTool.from_function(fn, name=fn.__name__,
                                                                description=(fn.__doc__ or fn.__name__))
                      for fn in (world.lookup_order, world.refund, world.search_kb)}

    def call(self, name: str, **arguments: Any) -> Any:
        try:
            return self.tools[name].invoke(arguments)
        except Exception as exc:
            raise ToolFailed(name, Outcome(status=OutcomeStatus.ERROR,
                                           error=ErrorInfo(type=type(exc).__name__, message=str(exc)))) from None


# --------------------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Task:
    tenant: str
    agent: str
    task: str
    input: str
    correction: str | None = None


def _round_traffic(rnd: int, per_tenant: int) -> list[Task]:
    """The round's requests: a fixed mix per tenant (every failure kind present every round)."""
    import random

    from molt_desk.world import AGENT, FACTS, LEGACY_AGENT, ORDERS

    rng = random.Random(f"demo-{rnd}")
    ids = sorted(ORDERS)
    out: list[Task] = []

    def ticket() -> str:
        return f"(ticket {rng.randrange(10**6)})"

    def refund_q() -> str:
        return f"Please refund order {rng.choice(ids)}. {ticket()}"

    for tenant, agent, fact in (("acme", AGENT, "refund window"), ("globex", LEGACY_AGENT, "warranty period")):
        f = FACTS[fact]
        mix: list[Task] = []
        for i in range(per_tenant):
            kind = i % 6
            if kind == 0:
                mix.append(Task(tenant, agent, "kb_question", f"{rng.choice(f.questions)} {ticket()}", f.text))
            elif kind == 1:
                task = "status_json" if tenant == "acme" else "status"
                mix.append(Task(tenant, agent, task, f"Where is order {rng.choice(ids)}? {ticket()}"))
            elif kind in (2, 5) and tenant == "acme":
                mix.append(Task(tenant, agent, "refund", refund_q()))
            elif kind == 3:
                oid = rng.choice(ids)
                mix.append(Task(tenant, agent, "capability",
                                f"What is the total of order {oid} in cents including 7% tax? {ticket()}"))
            elif kind == 4:
                r = FACTS["returns"]
                mix.append(Task(tenant, agent, "kb_question", f"{rng.choice(r.questions)} {ticket()}"))
            else:
                task = "status" if tenant == "acme" else "kb_question"
                q = (f"Where is order {rng.choice(ids)}? {ticket()}" if tenant == "acme"
                     else f"{rng.choice(f.questions)} {ticket()}")
                mix.append(Task(tenant, agent, task, q, None if tenant == "acme" else f.text))
        out.extend(mix)
    rng.shuffle(out)
    return out


# --------------------------------------------------------------------------- the run


@dataclass
class RoundStats:
    round: int
    tenant: str
    n: int = 0
    successes: int = 0
    reward: float = 0.0
    model_calls: int = 0
    by_task: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    versions: Counter[str] = field(default_factory=Counter)
    math_correct: int = 0


@dataclass
class DemoResult:
    """What the demo measured (also written as JSON beside the report)."""

    rounds: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    fixes: list[dict[str, Any]]
    first_success: float
    last_success: float
    verified: int
    broken: int
    report: Path
    png: Path
    seconds: float
    training: dict[str, Any] | None = None
    #: Requests the gateway served with the static harness because memory retrieval was too slow or failed.
    harness_fallbacks: int = 0


@dataclass
class _TrainMode:
    """What ``--train`` adds: SmolLM2 on a local backend, the ``molt-math`` agent, the weight trainer."""

    backend: Any
    trainer: Any
    agent: str
    model: str

    @classmethod
    def build(cls, store: Any, home: Path, model_dir: Path | None) -> _TrainMode:
        from molt.backends import LocalBackend
        from molt.backends.model import ensure_policy_model
        from molt_demo.math_agent import MATH_AGENT, MATH_MAX_TOKENS, MATH_MODEL
        from molt_demo.training import WeightTrainer

        try:
            import molt_trainer  # noqa: F401
        except ImportError as exc:
            raise typer.BadParameter(f"--train needs molt-trainer ({exc}); install it with "
                                     f"pip install -e trainer", param_hint="--train") from None
        path = model_dir or ensure_policy_model()
        # One CPU thread: serving and training take turns on a small machine (the rounds never overlap them).
        backend = LocalBackend("smollm2-0", model_path=path, model=MATH_MODEL, threads=1,
                               max_new_tokens=MATH_MAX_TOKENS)
        trainer = WeightTrainer(store, backend, path, home / "adapters", agent=MATH_AGENT, model=MATH_MODEL)
        return cls(backend, trainer, MATH_AGENT, MATH_MODEL)

    def plane(self, store: Any, desk: Any, memories: Any) -> Any:
        """The plane that runs ``molt-math``'s cycles. PlaneSettings are plane-wide, so the math agent gets
        its own plane over the same store: a short window (three rounds), so failures from before the
        adapter age out; small replay samples (every replay is a SmolLM2 generation on the CPU); and six
        canary runs, so a canary is judged against at least three concurrent live runs (with two, a lucky
        base model aborted a good adapter)."""
        from molt.control.plane import ControlPlane, PlaneSettings
        from molt_desk.world import AGENT, LEGACY_AGENT

        settings = PlaneSettings(canary_weight=0.5, canary_min=6, window=24, replay_sample=8, regression_sample=6)
        return ControlPlane(store, {AGENT: desk, LEGACY_AGENT: desk, self.agent: self.backend}, memories=memories,
                            trainer=self.trainer, settings=settings)

    def gateway(self, registry: Any, math_registry: Any, recorder: Any, store: Any, keyring: Any,
                harness: Any) -> Any:
        """The gateway with both backends, each public model bound to its own backend's versions (and to
        the registry of the plane that changes them)."""
        from molt.control.versions import ModelPart, PolicyParts
        from molt.gateway import Gateway, GatewayConfig, RoutingTable, VersionSpec
        from molt.gateway.binding import GatewayBinding
        from molt.gateway.router import Generation
        from molt_desk.world import DeskModel

        for tenant in TENANT_KEYS:
            math_registry.ensure_base(tenant, self.agent, PolicyParts(model=ModelPart(base=self.model)), actor="demo")
        table = RoutingTable(
            versions={f"{MODEL}@base": VersionSpec(version=f"{MODEL}@base", backends=("desk-0",)),
                      f"{self.model}@base": VersionSpec(version=f"{self.model}@base", backends=(self.backend.name,))},
            models={MODEL: (Generation(weights={f"{MODEL}@base": 1.0}),),
                    self.model: (Generation(weights={f"{self.model}@base": 1.0}),)})
        gw = Gateway([DeskModel("desk-0", model=MODEL), self.backend], table, recorder=recorder, store=store,
                     keyring=keyring, harness=harness, config=GatewayConfig(health_interval_s=0, backend_timeout_s=300))
        GatewayBinding(gw, registry, model=MODEL, backends=("desk-0",)).sync()
        GatewayBinding(gw, math_registry, model=self.model, backends=(self.backend.name,)).sync()
        return gw

    def summary(self, store: Any, registry: Any, stats: list[RoundStats]) -> dict[str, Any]:
        """Math success served by the base model vs by an adapter (from the store), per round, and what
        the trainer did."""
        from molt.control.signals import episodes
        from molt.errors import MoltError

        adapter_of: dict[str, str | None] = {}
        served: dict[str, list[int]] = {"base": [0, 0], "adapter": [0, 0]}
        for tenant in TENANT_KEYS:
            for e in episodes(store, tenant, self.agent, limit=100_000):
                if e.success is None or e.policy_version is None:
                    continue
                if e.policy_version not in adapter_of:
                    try:
                        adapter_of[e.policy_version] = registry.get(e.policy_version).parts.model.adapter
                    except MoltError:  # served before the registry bound the agent: the base model
                        adapter_of[e.policy_version] = None
                k = served["adapter" if adapter_of[e.policy_version] else "base"]
                k[0] += bool(e.success)
                k[1] += 1
        per_round = []
        for rnd in sorted({s.round for s in stats}):
            ss = [s for s in stats if s.round == rnd]
            k = sum(s.by_task.get(MATH_TASK_KEY, [0, 0])[0] for s in ss)
            n = sum(s.by_task.get(MATH_TASK_KEY, [0, 0])[1] for s in ss)
            per_round.append({"round": rnd, "n": n, "success_rate": k / n if n else None,
                              "correct_sum_rate": sum(s.math_correct for s in ss) / n if n else None})
        return {"agent": self.agent, "model": self.model,
                "success_base": served["base"][0] / served["base"][1] if served["base"][1] else None,
                "n_base": served["base"][1],
                "success_adapter": served["adapter"][0] / served["adapter"][1] if served["adapter"][1] else None,
                "n_adapter": served["adapter"][1],
                "adapters": sorted({a for a in adapter_of.values() if a}), "rounds": per_round,
                "requests": self.trainer.requests}


def run_demo(home: Path, *, rounds: int = 7, per_tenant: int = 12, out_dir: Path | None = None,
             progress: bool = True, train: bool = False, math_per_tenant: int = 8,
             model_dir: Path | None = None) -> DemoResult:
    """Run the demo in ``home`` (a fresh directory) and write the report to ``out_dir`` (default ``home``).

    ``train``: add the ``molt-math`` agent on SmolLM2 (``model_dir``, default the converted policy model)
    with ``math_per_tenant`` questions per tenant per round, and train its weights when the plane asks.
    Library messages (model load reports, warnings) go to ``molt-demo.log`` beside the report.
    """
    t_start = time.perf_counter()
    out_dir = out_dir or home
    out_dir.mkdir(parents=True, exist_ok=True)
    with _library_log(out_dir / LIBRARY_LOG):
        return _run(home, t_start, out_dir, rounds, per_tenant, progress, train, math_per_tenant, model_dir)


def _run(home: Path, t_start: float, out_dir: Path, rounds: int, per_tenant: int, progress: bool, train: bool,
         math_per_tenant: int, model_dir: Path | None) -> DemoResult:
    from molt.capture import Recorder
    from molt.control.memory import RetrievalHarness
    from molt.control.plane import ControlPlane, PlaneSettings
    from molt.gateway import Gateway, GatewayConfig
    from molt.gateway.binding import GatewayBinding
    from molt.governance.access import KeyRing
    from molt.store import Store
    from molt_desk.scenarios import base_parts
    from molt_desk.world import AGENT, LEGACY_AGENT, DeskModel, World

    store = Store.open(home / "store", auto_compact=False)
    recorder = Recorder(store, spool_dir=home / "spool", fsync="never", name="molt-demo")
    requests: list[dict[str, Any]] = []

    def trainer_hook(tenant: str, agent: str, cand: Any) -> str:
        rid = "train-" + new_id()[-8:]
        requests.append({"request": rid, "tenant": tenant, "agent": agent, "task": cand.payload.get("task"),
                         "trajectories": len(cand.source_trajectories)})
        return rid

    settings = PlaneSettings(canary_weight=0.5, canary_min=4, window=200)
    trained = _TrainMode.build(store, home, model_dir) if train else None
    plane = ControlPlane(store, DeskModel(), live_tools=World().live_tools(),
                         base_parts=base_parts(), trainer=trainer_hook if trained is None else trained.trainer,
                         settings=settings)
    memories = plane.memories  # redacted by the plane's redactor: one policy for what it checks and what is stored
    math_plane = trained.plane(store, DeskModel(), memories) if trained is not None else None
    for tenant, agent in (("acme", AGENT), ("globex", LEGACY_AGENT)):
        plane.registry.ensure_base(tenant, agent, base_parts(), actor="demo")
    if trained is None:
        gw = Gateway([DeskModel("desk-0", model=MODEL)], recorder=recorder, store=store,
                     keyring=KeyRing.from_mapping(KEYS), harness=RetrievalHarness(memories),
                     config=GatewayConfig(health_interval_s=0))
        GatewayBinding(gw, plane.registry, model=MODEL).sync()
    else:
        assert math_plane is not None
        gw = trained.gateway(plane.registry, math_plane.registry, recorder, store, KeyRing.from_mapping(KEYS),
                             RetrievalHarness(memories))
    world = World()
    tools = LangChainTools(world)
    stats: list[RoundStats] = []
    decisions: list[dict[str, Any]] = []
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, disable=not progress, transient=False)
    try:
        _rounds(gw, plane, recorder, store, stats, decisions, rounds, per_tenant, prog, tools,
                math_plane, math_per_tenant if trained is not None else 0)
    except BaseException:
        recorder.close(timeout=60)  # also on Ctrl-C: every acknowledged event reaches the store
        (home / "recorder-stats.json").write_bytes(orjson.dumps(recorder.stats.as_dict()))
        store.close()
        raise
    recorder.close(timeout=60)
    (home / "recorder-stats.json").write_bytes(orjson.dumps(recorder.stats.as_dict()))
    verified, broken = _verify_all(store)
    rounds_out = [{"round": s.round, "tenant": s.tenant, "n": s.n, "success_rate": s.successes / s.n if s.n else None,
                   "mean_reward": s.reward / s.n if s.n else None,
                   "model_calls_per_success": s.model_calls / s.successes if s.successes else None,
                   "by_task": {k: v[0] / v[1] for k, v in s.by_task.items()}} for s in stats]
    pairs = [(d["tenant"], d["agent"]) for d in decisions]
    fixes = _fixes(decisions, _served(store, list(dict.fromkeys(pairs))), _parent_of(plane.registry),
                   requests if trained is None else trained.trainer.requests, trains=trained is not None)
    training = trained.summary(store, plane.registry, stats) if trained is not None else None
    first = _rate([s for s in stats if s.round == 0])
    last = _rate([s for s in stats if s.round == rounds - 1])
    png = out_dir / "molt-demo-success.png"
    report = out_dir / "molt-demo-report.html"
    _plots_and_report(rounds_out, decisions, fixes, report, png, first, last, verified, broken, training)
    result = DemoResult(rounds_out, decisions, fixes, first, last, verified, broken, report, png,
                        time.perf_counter() - t_start, training, gw.harness_fallbacks)
    (out_dir / "molt-demo-result.json").write_bytes(orjson.dumps(
        {k: (str(v) if isinstance(v, Path) else v) for k, v in result.__dict__.items()}, option=orjson.OPT_INDENT_2))
    store.close()
    return result


#: Where the libraries' own messages go (beside the report): the terminal shows the demo's progress only.
LIBRARY_LOG = "molt-demo.log"


@contextlib.contextmanager
def _library_log(path: Path) -> Iterator[None]:
    """Route library messages to ``path`` for the run: log records of every logger (the root's handlers are
    swapped for the file), Python warnings (peft's "multiple adapters", deprecations), and transformers'
    logger — which has a stderr handler of its own and does not propagate, so its model LOAD REPORT
    would reach the terminal — and its progress bars."""
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    hf: Any = None
    with contextlib.suppress(ImportError):
        import transformers.utils.logging as hf

        hf.disable_default_handler()
        hf.enable_propagation()
        hf.disable_progress_bar()
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.handlers = saved[0]
        root.setLevel(saved[1])
        handler.close()
        if hf is not None:
            hf.enable_default_handler()
            hf.disable_propagation()
            hf.enable_progress_bar()


def _rounds(gw: Any, plane: Any, recorder: Any, store: Any, stats: list[RoundStats], decisions: list[dict[str, Any]],
            rounds: int, per_tenant: int, prog: Progress, tools: LangChainTools, math_plane: Any = None,
            math_per_tenant: int = 0) -> None:
    """The rounds: traffic through the gateway, rewards, late corrections, one plane cycle per agent
    (``math_plane``: plus the ``molt-math`` agent's questions and cycles, see :mod:`molt_demo.math_agent`)."""
    from molt.gateway import create_app
    from molt.gateway.loopback import ServerThread
    from molt.replay.decorator import AGENTS
    from molt.replay.verifiers import VerifyContext
    from molt_desk.world import AGENT, LEGACY_AGENT, verify

    cycles = [(plane, "acme", AGENT), (plane, "globex", LEGACY_AGENT)]
    if math_plane is not None:
        from molt_demo.math_agent import MATH_AGENT

        cycles += [(math_plane, "acme", MATH_AGENT), (math_plane, "globex", MATH_AGENT)]

    pending_corrections: list[tuple[str, str, str]] = []
    seen_calls: dict[str, int] = {}
    with ServerThread(create_app(gw), name="molt-demo-gateway") as srv, prog:
        base = f"http://127.0.0.1:{srv.port}"
        bar = prog.add_task("rounds", total=rounds)
        for rnd in range(rounds):
            # Late rewards: last round's users correct the answers they got wrong.
            for tenant, tid, text in pending_corrections:
                _post_reward(base, TENANT_KEYS[tenant], tid, 0.0, "user_correction", text)
            pending_corrections = []
            per: dict[str, RoundStats] = {t: RoundStats(rnd, t) for t in TENANT_KEYS}
            for i, tk in enumerate(_round_traffic(rnd, per_tenant) + _math_traffic(rnd, math_per_tenant)):
                tid = new_id()
                ag = AGENTS.get(tk.agent)
                math = tk.agent not in (AGENT, LEGACY_AGENT)
                # A session id of the demo's own: the canary split (a hash of the session key) is the same in
                # every run, as the traffic is, so the report is reproducible. Keyed by the random trajectory
                # id, how many requests a canary got each round, and the round it could be promoted, varied.
                model = LangChainModel(base + "/v1", TENANT_KEYS[tk.tenant], agent=tk.agent, task=tk.task,
                                       trajectory_id=tid, session_id=f"demo-{rnd + 1}-{i}",
                                       **({"model": _math().MATH_MODEL} if math else {}))
                answer = ag.fn(tk.input, model, tools)
                try:
                    (ag.verifier if math else verify)(answer, VerifyContext(input=tk.input, trajectory_id=tid,
                                                                            task=tk.task))
                    ok = True
                    reason = "check passed"
                except AssertionError as exc:
                    ok, reason = False, f"assertion failed: {exc}"
                _post_reward(base, TENANT_KEYS[tk.tenant], tid, 1.0 if ok else 0.0, "verifier", reason)
                if not ok and tk.correction:
                    pending_corrections.append((tk.tenant, tid, tk.correction))
                s = per[tk.tenant]
                s.n += 1
                s.successes += ok
                s.reward += 1.0 if ok else 0.0
                s.by_task[tk.task][0] += ok
                s.by_task[tk.task][1] += 1
                if math:
                    s.math_correct += _math().correct(answer, tk.input)
            if not recorder.flush(timeout=120, deliver=True):
                raise RuntimeError(f"the demo's recorder did not drain in 120 s: {recorder.stats.as_dict()}")
            for s in per.values():
                stats.append(s)
            calls = _model_calls(store)
            for s in per.values():
                s.model_calls = calls.get(s.tenant, 0) - seen_calls.get(s.tenant, 0)
            seen_calls = calls
            # One control-plane cycle per agent.
            for pl, tenant, agent in cycles:
                res = asyncio.run(pl.arun_cycle(tenant, agent))
                rec = res.record
                decisions.append({"round": rnd, "tenant": tenant, "agent": agent, "choice": rec.choice,
                                  "reason": rec.reason, "version": rec.applied_version,
                                  "cluster": res.chosen.cluster if res.chosen else None,
                                  "description": res.chosen.description if res.chosen else None,
                                  "actions": rec.actions, "rejected": len(rec.rejected)})
            prog.update(bar, advance=1, description=_round_line(rnd, per, decisions[-len(cycles):]))


def _math() -> Any:
    from molt_demo import math_agent

    return math_agent


def _math_traffic(rnd: int, per_tenant: int) -> list[Task]:
    """The ``molt-math`` agent's questions of the round (none without ``--train``)."""
    if not per_tenant:
        return []
    m = _math()
    return [Task(t, m.MATH_AGENT, m.MATH_TASK, q) for t in TENANT_KEYS for q in m.questions(rnd, t, per_tenant)]


def _post_reward(base: str, key: str, tid: str, value: float, source: str, reason: str) -> None:
    r = httpx.post(base + "/v1/molt/rewards/trajectory", timeout=30, headers={"authorization": f"Bearer {key}"},
                   json={"trajectory_id": tid, "value": value, "source": source, "reason": reason})
    r.raise_for_status()


def _model_calls(store: Any) -> dict[str, int]:
    tbl = store.table("events").search().where("kind = 'model_call'").select(["tenant_id"]).limit(None).to_arrow()
    return dict(Counter(tbl.column("tenant_id").to_pylist()))


def _rate(stats: list[RoundStats]) -> float:
    n = sum(s.n for s in stats)
    return sum(s.successes for s in stats) / n if n else 0.0


def _round_line(rnd: int, per: dict[str, RoundStats], decs: list[dict[str, Any]]) -> str:
    parts = [f"{t} {s.successes}/{s.n}" for t, s in per.items()]
    acts = [f"{d['tenant']}: {d['choice']}" for d in decs if d["choice"] != "noop"]
    return f"round {rnd + 1}: " + ", ".join(parts) + (f" — {'; '.join(acts)}" if acts else "")


def _verify_all(store: Any) -> tuple[int, int]:
    ok = bad = 0
    for tid in store.trajectory_ids():
        if store.verify(tid).ok:
            ok += 1
        else:
            bad += 1
    return ok, bad


def _served(store: Any, pairs: list[tuple[str, str]]) -> dict[tuple[str, str, str, str], list[int]]:
    """Successes and runs per (tenant, agent, policy version, task): the version is the one stamped in each
    trajectory's provenance, i.e. what the gateway served that request with."""
    from molt.control.signals import episodes

    out: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for tenant, agent in pairs:
        for e in episodes(store, tenant, agent, limit=1_000_000):
            if e.success is None or e.policy_version is None or e.task is None:
                continue
            k = out[(tenant, agent, e.policy_version, e.task)]
            k[0] += bool(e.success)
            k[1] += 1
    return dict(out)


def _fixes(decisions: list[dict[str, Any]], served: dict[tuple[str, str, str, str], list[int]],
           parent_of: Any, requests: list[dict[str, Any]], *, trains: bool = False) -> list[dict]:
    """Which intervention fixed which failure cluster, per version.

    A change is credited only with what the traffic it served shows: success on the cluster's task of
    the requests served under the version it made (``after``) against those served under that version's
    parent, the version live when it was chosen (``before``) — both read from the version in each
    trajectory's provenance. The two run side by side while the new version is in canary, so the
    difference is this change's alone; an intervention that made no version (a weight update only
    requested) served nothing and is credited with nothing. When the version also carries an earlier
    intervention on the same task (one in its parent chain), ``overlaps`` names it: ``after`` is then
    the rate of both together.
    """
    out: list[dict[str, Any]] = []
    for d in decisions:
        if d["choice"] in ("noop", "promote") or not d.get("cluster"):
            continue
        task = d["cluster"].split("|", 1)[0] if "|" in d["cluster"] else None
        version = d["version"] if d["choice"] != "rollback" else None
        parent = parent_of(version) if version else None

        def rate(v: str | None, d: dict[str, Any] = d, task: str | None = task) -> tuple[float | None, int]:
            k, n = served.get((d["tenant"], d["agent"], v, task), (0, 0)) if v and task else (0, 0)
            return (k / n if n else None), n

        (before, n_before), (after, n_after) = rate(parent), rate(version)
        promoted = next((p["round"] + 1 for p in decisions if p["choice"] == "promote" and d["version"]
                         and p["version"] == d["version"]), None)
        out.append({"tenant": d["tenant"], "agent": d["agent"], "cluster": d["cluster"], "task": task,
                    "intervention": d["choice"], "round": d["round"] + 1,
                    "live_from": promoted + 1 if promoted else None, "version": d["version"], "parent": parent,
                    "before": before, "n_before": n_before, "after": after, "n_after": n_after,
                    "overlaps": [], "what": d["description"]})
    made = {f["version"]: f for f in out if f["version"] and f["intervention"] != "rollback"}
    for f in out:
        if not f["version"] or f["intervention"] == "rollback":
            continue
        seen, v = {f["version"]}, f["parent"]
        while v and v not in seen:   # the version's lineage: earlier changes it still carries
            seen.add(v)
            o = made.get(v)
            if o is not None and o["task"] == f["task"]:
                f["overlaps"].append(f"{o['intervention']} of round {o['round']} ({v})")
            v = parent_of(v)
    if trains:
        return _train_fixes(out, requests)
    asked = {(r["tenant"], r["task"]): r for r in requests}
    for f in out:
        r = asked.get((f["tenant"], f["task"]))
        if f["intervention"] == "weight_update" and r is not None:
            f["what"] = (f"requested from the trainer ({r['request']}, {r['trajectories']} failing trajectories); "
                         f"this demo trains nothing, so no traffic was served with it")
    return out


def _train_fixes(out: list[dict[str, Any]], requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--train``: what the trainer did for each weight update (requests and decisions are both in
    the order the plane made them)."""
    queues: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in requests:
        if r.get("outcome") not in ("deferred", "failed"):  # those were logged as no-ops, not weight updates
            queues[(r["tenant"], r["task"])].append(r)
    for f in out:
        q = queues.get((f["tenant"], f["task"]))
        if f["intervention"] != "weight_update" or not q:
            continue
        r = q.pop(0)
        f["trainer"] = r
        if r.get("outcome") == "trained":
            f["what"] = (f"trained a LoRA adapter ({r['steps']} steps on {r['samples']} recorded samples, mean reward "
                         f"{r['reward_before']:.2f}, {r['seconds']:.0f} s) and hot-loaded it as {r['adapter']}; "
                         + (f"canaried, live from round {f['live_from']}" if f.get("live_from")
                            else "canaried, not promoted in this run"))
        elif r.get("outcome") == "shared":
            f["what"] = f"the adapter {r['adapter']} already trained for this cluster (weights serve every tenant)"
        elif r.get("outcome") == "budget":
            f["what"] = f"requested ({r['request']}); this run's training budget is spent"
        else:
            f["what"] = (f"requested from the trainer ({r['request']}, {r['trajectories']} failing trajectories); "
                         f"the scripted desk model has no weights to train, so no traffic was served with it")
    return out


def _parent_of(registry: Any) -> Any:
    """``version id → its parent's id`` (``None`` for a base version or an unknown id)."""
    from molt.errors import MoltError

    def parent(version: str) -> str | None:
        try:
            return registry.get(version).parent_id
        except MoltError:
            return None

    return parent


def _plots_and_report(rounds: list[dict[str, Any]], decisions: list[dict[str, Any]], fixes: list[dict[str, Any]],
                      report: Path, png: Path, first: float, last: float, verified: int, broken: int,
                      training: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tenants = sorted({r["tenant"] for r in rounds})
    marks = {"memory_insert": "o", "tool_schema_edit": "s", "harness_edit": "D", "skill_patch": "^",
             "weight_update": "*", "rollback": "x", "promote": "P"}
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for t in tenants:
        xs = [r["round"] + 1 for r in rounds if r["tenant"] == t]
        ys = [r["success_rate"] for r in rounds if r["tenant"] == t]
        line, = ax.plot(xs, ys, label=t, linewidth=2)
        for d in decisions:
            if d["tenant"] == t and d["choice"] in marks:
                y = next(r["success_rate"] for r in rounds if r["tenant"] == t and r["round"] == d["round"])
                ax.plot(d["round"] + 1, y, marks[d["choice"]], color=line.get_color(), markersize=9)
                ax.annotate(d["choice"].replace("_", " "), (d["round"] + 1, y), textcoords="offset points",
                            xytext=(4, -12 if t == tenants[0] else 8), fontsize=7)
    ax.set_xlabel("round")
    ax.set_ylabel("task success rate")
    ax.set_ylim(0, 1.05)
    ax.set_title("Molt demo: success per tenant, with the interventions the control plane chose")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    main_b64 = _b64(fig, plt)

    fig2, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
    for t in tenants:
        rs = [r for r in rounds if r["tenant"] == t]
        a1.plot([r["round"] + 1 for r in rs], [r["mean_reward"] for r in rs], label=t)
        a2.plot([r["round"] + 1 for r in rs], [r["model_calls_per_success"] for r in rs], label=t)
    a1.set_title("mean reward")
    a2.set_title("model calls per success")
    for a in (a1, a2):
        a.set_xlabel("round")
        a.grid(alpha=0.3)
        a.legend()
    fig2.tight_layout()
    side_b64 = _b64(fig2, plt)

    def cell(x: Any) -> str:
        if isinstance(x, float):
            return f"{x:.0%}"
        return html.escape("-" if x is None else str(x))

    def served(x: float | None, n: int) -> str:
        return "-" if x is None else f"{x:.0%} of {n}"

    fix_rows = "".join(
        f"<tr><td>{cell(f['tenant'])}</td><td>{cell(f['cluster'])}</td><td>{cell(f['intervention'])}</td>"
        f"<td>{cell(f['round'])}</td><td>{cell(f['version'])}</td><td>{served(f['before'], f['n_before'])}</td>"
        f"<td>{served(f['after'], f['n_after'])}</td><td>{cell(f['what'])}"
        + (f"<br><i>overlaps: served together with {cell('; '.join(f['overlaps']))} on this task</i>"
           if f["overlaps"] else "") + "</td></tr>" for f in fixes)
    dec_rows = "".join(
        f"<tr><td>{d['round'] + 1}</td><td>{cell(d['tenant'])}</td><td>{cell(d['choice'])}</td>"
        f"<td>{cell(d['reason'])}</td><td>{cell(d['version'])}</td></tr>" for d in decisions)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Molt demo report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;width:100%;font-size:13px}}
td,th{{border:1px solid #ddd;padding:4px 6px;text-align:left}}
th{{background:#f3f3f3}}.big{{font-size:20px}}</style>
</head><body>
<h1>Molt demo report</h1>
<p class="big">Task success: <b>{first:.0%}</b> in the first round → <b>{last:.0%}</b> in the last.</p>
<p>Hash chains verified: {verified} trajectories, {broken} broken. Library messages (model load reports,
warnings): <a href="{LIBRARY_LOG}">{LIBRARY_LOG}</a>.</p>{_training_html(training)}
<img alt="success per tenant" src="data:image/png;base64,{main_b64}">
<img alt="reward and cost" src="data:image/png;base64,{side_b64}">
<h2>Which intervention fixed which failure cluster</h2>
<p>Per version: success on the cluster's task of the requests served under the version the intervention made
(the version in each trajectory's provenance) against those served under its parent, the version live when
it was chosen. An intervention that made no version (a weight update only requested) served nothing and is
credited with nothing.</p>
<table><tr><th>tenant</th><th>failure cluster</th><th>intervention</th><th>chosen in round</th><th>version</th>
<th>success on the task, served by the parent</th><th>served by this version</th><th>what</th></tr>{fix_rows}</table>
<h2>Decision log</h2>
<table><tr><th>round</th><th>tenant</th><th>choice</th><th>why</th><th>version</th></tr>{dec_rows}</table>
</body></html>"""
    report.write_text(page, encoding="utf-8")
    plt.close("all")


def _training_html(t: dict[str, Any] | None) -> str:
    if t is None:
        return ""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    rows = "".join(f"<tr><td>{r['round'] + 1}</td><td>{r['n']}</td><td>{pct(r['success_rate'])}</td>"
                   f"<td>{pct(r['correct_sum_rate'])}</td></tr>" for r in t["rounds"])
    return (f"<h2>Weights: the {html.escape(t['agent'])} agent on {html.escape(t['model'])}</h2>"
            f"<p>Success served by the base model: <b>{pct(t['success_base'])}</b> of {t['n_base']}; served by the "
            f"trained adapter ({html.escape(', '.join(t['adapters']) or 'none')}): <b>{pct(t['success_adapter'])}</b> "
            f"of {t['n_adapter']}.</p><table><tr><th>round</th><th>questions</th><th>success (opens with a number)"
            f"</th><th>opens with the correct sum</th></tr>{rows}</table>")


def _b64(fig: Any, plt: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()


def demo_command(
    quick: Annotated[bool, typer.Option("--quick", help="The CI-sized run (8 rounds × 12 requests per tenant).")]
    = False,
    rounds: Annotated[int | None, typer.Option("--rounds", min=2, help="Rounds (default 8 quick, 12 full, "
                                                                    "8 with --train).")] = None,
    per_tenant: Annotated[int | None, typer.Option("--per-tenant", min=6, help="Support-desk requests per tenant per "
                                                   "round (default 12 quick, 24 full, 12 with --train).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Where the report, PNG and JSON go.")] = Path("molt-demo"),
    home: Annotated[Path | None, typer.Option("--home", help="Demo store directory (default: a fresh temporary "
                                                               "one, removed afterwards).")] = None,
    train: Annotated[bool, typer.Option("--train", help="Add the molt-math agent on SmolLM2 and train its weights "
                                                        "when the control plane asks (needs molt-trainer).")] = False,
    math_per_tenant: Annotated[int, typer.Option("--math-per-tenant", min=4, help="With --train: molt-math "
                                                 "questions per tenant per round.")] = 8,
    model_dir: Annotated[Path | None, typer.Option("--model-dir", help="With --train: the converted policy model "
                                                   "directory (default: converted once into $MOLT_HOME).")] = None,
) -> None:
    """Run the end-to-end demo: an agent evolving through Molt, with a report at the end."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    n_rounds = rounds or (8 if quick or train else 12)
    n_per = per_tenant or (12 if quick or train else 24)  # --train: the CPU time goes to SmolLM2 instead
    tmp = None
    if home is None:
        tmp = tempfile.mkdtemp(prefix="molt-demo-")
        home = Path(tmp)
    elif home.exists() and any(home.iterdir()):
        raise typer.BadParameter(f"{home} is not empty; the demo needs a fresh directory.", param_hint="--home")
    console.print(f"[bold]molt demo[/bold]: {n_rounds} rounds × {n_per} requests for tenants acme and globex "
                  f"(LangChain agent → Molt gateway → scripted support-desk model)"
                  + (f", plus {math_per_tenant} molt-math questions each (→ SmolLM2, trained)" if train else ""))
    # Ctrl-C stops the demo wherever it is. Python's default handler lets asyncio.run() turn SIGINT into a
    # cancellation of its task, and a cancellation absorbed on the way (the control plane's replays run
    # inside asyncio.run) let a CI run finish as if never interrupted; a handler of our own is left alone
    # by asyncio and raises KeyboardInterrupt at once.
    previous = signal.signal(signal.SIGINT, _interrupt) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        res = (run_demo(home, rounds=n_rounds, per_tenant=n_per, out_dir=out, train=True,
                        math_per_tenant=math_per_tenant, model_dir=model_dir) if train
               else run_demo(home, rounds=n_rounds, per_tenant=n_per, out_dir=out))
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    tbl = Table(title=f"Molt demo — success {res.first_success:.0%} → {res.last_success:.0%} "
                      f"in {res.seconds:.0f} s")
    for col in ("tenant", "failure cluster", "intervention", "round", "version", "parent served", "it served"):
        tbl.add_column(col)
    for f in res.fixes:  # per version: the task's success under the parent vs under the version it made
        tbl.add_row(f["tenant"], f["cluster"], f["intervention"], str(f["round"] or "-"), f["version"] or "-",
                    "-" if f["before"] is None else f"{f['before']:.0%} of {f['n_before']}",
                    ("-" if f["after"] is None else f"{f['after']:.0%} of {f['n_after']}")
                    + (" (overlaps)" if f["overlaps"] else ""))
    Console().print(tbl)
    if res.training is not None:
        t = res.training
        Console().print(f"{t['agent']}: success {_pct(t['success_base'])} served by the base model → "
                        f"{_pct(t['success_adapter'])} served by the trained adapter "
                        f"({', '.join(t['adapters']) or 'none'})")
    Console().print(f"chains verified: {res.verified} ok, {res.broken} broken · report: {res.report} · "
                    f"plot: {res.png} · library messages: {res.report.parent / LIBRARY_LOG}")
    if res.broken or res.last_success <= res.first_success:
        raise typer.Exit(1)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"

"""Episode replay: re-run a whole trajectory through its ``@molt.replayable`` agent.

The agent gets a :class:`ModelClient` pinned to the candidate policy (backend + harness + overrides,
in process) and a :class:`ToolBox` served from the trajectory's cassette. It starts from the
recorded initial input; its new final answer is scored by the task's verifier and compared with the
recorded reward. A request that leaves the recording is reported; without a registered live tool the
episode stops there with status ``unknown`` — its outcome is never guessed.

The same two objects, with live tools instead of a cassette, record an episode
(:func:`run_agent` with ``mode="live"``), which is how tests and the benchmark make recordings and the
live reference that replay throughput is compared with.

Example::

    result = await replay_episode(traj, "support", ReplayAgent(create_backend("stub")))
    print(result.status, result.replayed_reward, result.recorded_reward, result.same_actions)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from molt.atdp.models import EventKind, Generation, Outcome, OutcomeStatus, Passage, UserMessage
from molt.errors import ReplayError
from molt.replay.cassette import Cassette, CassetteMiss, Channel, Hit, LiveTools, Miss, Normalization
from molt.replay.decorator import AGENTS, ReplayableAgent
from molt.replay.policy import ReplayAgent, ReplayedCall
from molt.replay.step import StepAction, action_of
from molt.replay.verifiers import TASK_VERIFIERS, Verdict, Verifier, VerifyContext, build_verifier
from molt.store import Trajectory

__all__ = ["EpisodeResult", "EpisodeTrace", "ModelClient", "Reply", "ToolBox", "ToolFailed", "replay_episode",
           "run_agent", "initial_input", "recorded_answer", "resolve_agent", "resolve_verifier"]


@dataclass(slots=True)
class Reply:
    """A model answer as the agent sees it; ``message`` is the assistant message to append."""

    text: str | None
    tool_calls: list[dict[str, Any]]
    message: dict[str, Any]


@dataclass
class Step:
    """One thing the agent did in a run: a model call or a tool / retrieval / memory request."""

    kind: Literal["model", "tool", "retrieval", "memory"]
    name: str = ""
    request: Any = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    decision: ReplayedCall | None = None
    outcome: Outcome | None = None
    passages: list[Passage] | None = None
    match: str | None = None

    def action(self) -> StepAction:
        """Comparable form (tool steps: their name and arguments)."""
        if self.decision is not None:
            return action_of(self.decision)
        import orjson

        return StepAction(None, ((f"{self.kind}:{self.name}",
                              orjson.dumps(self.request, option=orjson.OPT_SORT_KEYS).decode()),))


@dataclass
class EpisodeTrace:
    """What one run did, in order, with its cost."""

    steps: list[Step] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ToolFailed(Exception):
    """A tool call ended in error (the recorded or live outcome says so); ``outcome`` has the details."""

    def __init__(self, name: str, outcome: Outcome):
        msg = outcome.error.message if outcome.error else outcome.status.value
        super().__init__(f"tool {name!r} failed: {msg}")
        self.outcome = outcome


class ModelClient:
    """The candidate policy as the agent calls it (see :mod:`molt.replay.decorator`).

    ``chat`` is for sync agents (run in a worker thread), ``achat`` for async ones; ``openai()`` an
    OpenAI SDK client over an in-process transport.
    """

    def __init__(self, policy: ReplayAgent, trace: EpisodeTrace, loop: asyncio.AbstractEventLoop | None = None):
        self.policy = policy
        self._trace = trace
        self._loop = loop

    async def achat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    **sampling: Any) -> Reply:
        """Ask the candidate policy (harness overrides applied) for the next message."""
        snapshot = [dict(m) for m in messages]
        d = await self.policy.decide(snapshot, tools, sampling)
        self._trace.steps.append(Step("model", messages=snapshot, tools=tools, request=sampling or None, decision=d))
        self._trace.prompt_tokens += d.prompt_tokens
        self._trace.completion_tokens += d.completion_tokens
        import orjson

        msg: dict[str, Any] = {"role": "assistant", "content": d.text}
        if d.tool_calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                else orjson.dumps(c["arguments"]).decode()}} for c in d.tool_calls]
        return Reply(d.text, d.tool_calls, msg)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
             **sampling: Any) -> Reply:
        """:meth:`achat` for sync agents (which the runner calls from a worker thread)."""
        if self._loop is None:
            return asyncio.run(self.achat(messages, tools, **sampling))
        return asyncio.run_coroutine_threadsafe(self.achat(messages, tools, **sampling), self._loop).result()

    def openai(self) -> Any:
        """An ``openai.AsyncOpenAI`` client whose chat completions are answered by this policy, in process."""
        from molt.replay.openai_client import openai_client

        return openai_client(self)


class ToolBox:
    """Tools, retrieval and memory as the agent calls them: from the cassette, or live when recording."""

    def __init__(self, answer: Any, trace: EpisodeTrace):
        self._answer = answer  # (channel, name, request) -> Hit
        self._trace = trace

    def _ask(self, channel: Channel, name: str, request: Any) -> Hit:
        step = Step(channel, name=name, request=request)
        self._trace.steps.append(step)
        hit: Hit = self._answer(channel, name, request)
        step.outcome, step.passages, step.match = hit.outcome, hit.passages, hit.match
        return hit

    def call_outcome(self, name: str, **arguments: Any) -> Outcome:
        """The tool's full :class:`Outcome` (status, output, error)."""
        return self._ask("tool", name, arguments).outcome

    def call(self, name: str, **arguments: Any) -> Any:
        """The tool's output; an error outcome raises :class:`ToolFailed`."""
        out = self.call_outcome(name, **arguments)
        if out.status != OutcomeStatus.OK:
            raise ToolFailed(name, out)
        return out.output

    def retrieve(self, query: str, index: str | None = None, top_k: int | None = None) -> list[Passage]:
        """Retrieved passages."""
        hit = self._ask("retrieval", index or "", {"query": query, "top_k": top_k})
        if hit.passages is not None:
            return hit.passages
        return [Passage.model_validate(p) if isinstance(p, dict) else Passage(text=str(p))
                for p in (hit.outcome.output or []) if p is not None]  # type: ignore[union-attr]

    def memory(self, key: str | None = None, query: str | None = None) -> Any:
        """A memory read's output."""
        return self._ask("memory", key or "", {"query": query}).outcome.output


def live_answer(live: LiveTools) -> Any:
    """An answer function calling registered live tools (recording mode); unknown names raise."""

    def answer(channel: Channel, name: str, request: Any) -> Hit:
        if live.get(channel, name) is None:
            raise ReplayError(f"No live {channel} named {name!r} is registered; register it with LiveTools.register.")
        return Hit(outcome=live.call(channel, name, request), match="live")

    return answer


def resolve_agent(agent: str | ReplayableAgent) -> ReplayableAgent:
    """A registered agent by name (``module:function`` names are imported first)."""
    if isinstance(agent, ReplayableAgent):
        return agent
    if agent not in AGENTS and ":" in agent:
        import importlib

        importlib.import_module(agent.partition(":")[0])
    return AGENTS.get(agent)


def resolve_verifier(verifier: Any, agent: ReplayableAgent | None, task: str | None) -> Verifier | None:
    """The explicit verifier, else the agent's, else the task's (``TASK_VERIFIERS``), else ``None``."""
    for spec in (verifier, agent.verifier if agent else None):
        if spec is not None:
            return build_verifier(spec)
    if task and task in TASK_VERIFIERS:
        return TASK_VERIFIERS.get(task)
    return None


async def run_agent(agent: ReplayableAgent, input: str, policy: ReplayAgent, answer: Any) -> tuple[Any, EpisodeTrace]:
    """Run ``agent`` once on ``input``; ``answer(channel, name, request) -> Hit`` serves its tools."""
    trace = EpisodeTrace()
    tools = ToolBox(answer, trace)
    if agent.is_async:
        out = await agent.fn(input, ModelClient(policy, trace), tools)
    else:
        loop = asyncio.get_running_loop()
        out = await asyncio.to_thread(agent.fn, input, ModelClient(policy, trace, loop), tools)
    return out, trace


def initial_input(traj: Trajectory) -> str:
    """The trajectory's first user message (what an episode replay starts from)."""
    for ev in traj.events:
        if ev.kind == EventKind.USER_MESSAGE and isinstance(ev.action, UserMessage):
            c = ev.action.content
            return c if isinstance(c, str) else "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p)
                                                      for p in c)
    for ev in traj.events:  # gateway-only capture: the first user message of the first model call
        if ev.kind == EventKind.MODEL_CALL and ev.observation and ev.observation.messages:
            for m in ev.observation.messages:
                if m.role == "user" and isinstance(m.content, str):
                    return m.content
    raise ReplayError(f"Trajectory {traj.trajectory_id} has no initial user input, so its episode cannot be "
                      f"re-run; replay its model calls one by one (step replay) instead.",
                      trajectory_id=traj.trajectory_id)


def recorded_answer(traj: Trajectory) -> str | None:
    """The recorded final answer: the text of the last model call that called no tool."""
    for ev in reversed(traj.events):
        if ev.kind == EventKind.MODEL_CALL and isinstance(ev.action, Generation) and not ev.action.tool_calls:
            return ev.action.text
    return None


def recorded_actions(traj: Trajectory) -> list[StepAction]:
    """The recorded model actions and tool requests, in order, comparable with a run's steps."""
    import orjson

    out: list[StepAction] = []
    for ev in traj.events:
        a = ev.action
        if ev.kind == EventKind.MODEL_CALL and isinstance(a, Generation):
            out.append(action_of(a))
        elif ev.kind == EventKind.TOOL_CALL and a is not None and a.type == "tool_call":
            out.append(StepAction(None, ((f"tool:{a.tool_name}",
                                      orjson.dumps(a.arguments, option=orjson.OPT_SORT_KEYS).decode()),)))
        elif ev.kind == EventKind.RETRIEVAL and a is not None and a.type == "retrieval":
            out.append(StepAction(None, ((f"retrieval:{a.index or ''}", orjson.dumps(
                {"query": a.query, "top_k": a.top_k}, option=orjson.OPT_SORT_KEYS).decode()),)))
        elif ev.kind == EventKind.MEMORY_READ and a is not None and a.type == "memory_read":
            out.append(StepAction(None, ((f"memory:{a.key or ''}", orjson.dumps(
                {"query": a.query}, option=orjson.OPT_SORT_KEYS).decode()),)))
    return out


@dataclass
class EpisodeResult:
    """An episode replay.

    ``status``: ``ok`` (ran to an answer), ``unknown`` (left the recording with no live tool: the
    outcome is not known), ``error`` (the agent raised). Rewards are in the verifier's [0, 1] scale;
    ``replayed_reward`` is ``None`` unless ``status == "ok"`` and a verifier is known.
    """

    trajectory_id: str
    candidate: str
    status: Literal["ok", "unknown", "error"]
    answer: Any
    recorded_answer: str | None
    recorded_reward: float | None
    replayed_reward: float | None
    verdict: Verdict | None
    same_actions: bool
    actions: list[StepAction]
    recorded: list[StepAction]
    misses: list[Miss]
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    #: How the episode was re-run: ``agent`` (its ``@molt.replayable`` entry point), ``episode`` (re-driven
    #: from the recording, :mod:`molt.replay.generic`) or ``step (…why)`` (one model call re-decided).
    mode: str = "agent"

    @property
    def delta(self) -> float | None:
        """Replayed minus recorded reward, when both are known."""
        if self.replayed_reward is None or self.recorded_reward is None:
            return None
        return self.replayed_reward - self.recorded_reward

    def as_dict(self) -> dict[str, Any]:
        """JSON-able evidence for the results table and the CLI."""
        return {
            "trajectory_id": self.trajectory_id, "candidate": self.candidate, "status": self.status,
            "answer": self.answer if isinstance(self.answer, str | int | float | bool | None) else repr(self.answer),
            "recorded_answer": self.recorded_answer, "recorded_reward": self.recorded_reward,
            "replayed_reward": self.replayed_reward, "delta": self.delta,
            "verdict": None if self.verdict is None else self.verdict.detail, "same_actions": self.same_actions,
            "actions": [a.render() for a in self.actions], "recorded": [a.render() for a in self.recorded],
            "misses": [m.describe() for m in self.misses], "error": self.error,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 6), "mode": self.mode,
        }


def _recorded_reward(traj: Trajectory, verdict_of_recorded: Verdict | None) -> float | None:
    if traj.rewards or any(e.reward is not None for e in traj.events):
        total = traj.total_reward
        return None if total is None else max(0.0, min(1.0, total))
    return None if verdict_of_recorded is None else verdict_of_recorded.reward


async def replay_episode(traj: Trajectory, agent: str | ReplayableAgent, policy: ReplayAgent, *,
                         verifier: Any = None, live: LiveTools | None = None,
                         normalization: Normalization | None = None) -> EpisodeResult:
    """Re-run ``traj`` from its initial input through ``agent`` under ``policy``, tools from its cassette.

    ``verifier`` (instance or spec) overrides the agent's and the task's; ``live`` answers requests
    that leave the recording (otherwise they stop the episode as ``unknown``).
    """
    ag = resolve_agent(agent)
    task = next((e.metadata.task for e in traj.events if e.metadata.task), None)
    ver = resolve_verifier(verifier, ag, task)
    cassette = Cassette.from_events(traj.events, normalization=normalization, live=live,
                                    trajectory_id=traj.trajectory_id)
    inp = initial_input(traj)
    ctx = VerifyContext(input=inp, trajectory_id=traj.trajectory_id, task=task)
    t0 = time.perf_counter()
    status: Literal["ok", "unknown", "error"] = "ok"
    answer: Any = None
    error = None
    trace = EpisodeTrace()
    try:
        answer, trace = await run_agent(ag, inp, policy, cassette.lookup)
    except CassetteMiss as exc:
        status, error = "unknown", exc.message
    except ReplayError:
        raise
    except Exception as exc:  # the agent's own failure is an outcome of the replay, not a crash
        status, error = "error", f"{type(exc).__name__}: {exc}"
    dt = time.perf_counter() - t0
    verdict = await ver.ascore(answer, ctx) if ver is not None and status == "ok" else None
    rec_answer = recorded_answer(traj)
    rec_verdict = await ver.ascore(rec_answer, ctx) if ver is not None else None
    recorded = recorded_actions(traj)
    actions = [s.action() for s in trace.steps]
    same = status == "ok" and len(actions) == len(recorded) and all(a.same(b) for a, b in zip(actions, recorded,
                                                                                                  strict=True))
    return EpisodeResult(
        trajectory_id=traj.trajectory_id, candidate=policy.version, status=status, answer=answer,
        recorded_answer=rec_answer, recorded_reward=_recorded_reward(traj, rec_verdict),
        replayed_reward=None if verdict is None else verdict.reward, verdict=verdict, same_actions=same,
        actions=actions, recorded=recorded, misses=list(cassette.misses), error=error,
        prompt_tokens=trace.prompt_tokens, completion_tokens=trace.completion_tokens, latency_s=dt)

"""Generic replay: re-drive an agent from its recording alone, with no ``@molt.replayable`` entry point.

A trajectory captured at the gateway or by an adapter already holds the agent's loop: each model
call's message list and offered tools, each tool call and its outcome. For the common tool-calling
loop — the agent keeps its state in the message list, appends the model's reply and one tool message
per call, and asks again until the model answers without calling a tool — that is enough to run the
agent again under a candidate. :func:`replay_recording`:

1. starts from the first recorded model call: its messages (the system prompt and the first user
   turn), its offered tools and its sampling parameters;
2. asks the candidate :class:`~molt.replay.policy.ReplayAgent` (the same harness code as the gateway
   applies the system prompt, memories, skills and tool rewrites);
3. answers each tool call from the trajectory's cassette (exact, then the declared normalisation); a
   call that leaves the recording stops the branch as *unknown* unless a live tool is registered;
4. at an answer without tool calls — the answer to a user turn — opens the recording's next user turn,
   if any: the candidate's own answer, then the user's recorded message(s), and asks again (5.);
5. stops after the last recorded user turn's answer, or, as *unknown*, after the recorded number of
   model calls plus ``EXTRA_CALLS`` per turn.

Whether the recording *is* such a loop is checked, never assumed (:func:`loop_shape`): within a user
turn every model call must send the previous call's messages plus the assistant's reply plus one tool
message per call; between turns, the previous messages plus the answer as generated plus the user's
message(s); always with the same tools. When the first turn is not (the agent summarises or rewrites
its messages between calls, changes its tools, keeps state outside its messages), re-driving it would
run an agent that never existed; the fallback is **step replay** of the first model call that went
wrong (:func:`first_wrong_call`), judged the same way. When a later turn is not, the turns before it
are re-driven. A later turn re-driven after a different answer is faithful only as far as what the
user said next did not depend on the answer (see the README's table).

The answers of a conversation of several turns are judged together (joined, one per turn): a
correction's facts may be stated in any of them.

The new answer is judged, in order, by (:func:`judge_answer`):

1. the trajectory's verifier: an explicit one, else its task's (``TASK_VERIFIERS``), else its agent's
   checker (``AGENT_VERIFIERS``: registered by whoever runs the agent, no label in the traffic);
2. the user's word: the latest correction (a ``user_correction`` / ``human_label`` reward's reason, a
   ``FEEDBACK`` event's correction), else the accepted recorded answer of a trajectory the user
   rewarded. An answer identical to the recorded one keeps the recorded outcome. Otherwise the
   reference's *checkable facts* — its tokens holding a digit (amounts, dates, times, codes, ids) —
   must all appear in the answer; a reference with none goes to the judge;
3. a judge model (:class:`~molt.replay.verifiers.JudgeVerifier`) through a configurable backend —
   by default the policy's own backend, the served model — with the reference as its rubric.

A trajectory that cannot be replayed is refused with a :class:`~molt.errors.ReplayError` that says why
(the loader refuses erased payloads, broken chains and tool calls without outcome; this module refuses
another tenant's trajectory and a recording with no model call to start from).

Example::

    traj = load_trajectory(store, trajectory_id)
    result = await replay_recording(traj, ReplayAgent(backend, Overrides(memories=(fact,))), tenant_id="acme")
    print(result.status, result.mode, result.replayed_reward, result.verdict)
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from molt.atdp.models import Event, EventKind, Generation, Outcome, OutcomeStatus, RewardSource
from molt.backends.chat_format import text_content
from molt.errors import ReplayError
from molt.replay.cassette import Cassette, CassetteMiss, LiveTools, Normalization
from molt.replay.episode import EpisodeResult, EpisodeTrace, Step
from molt.replay.load import model_request, offered_tools
from molt.replay.policy import ReplayAgent
from molt.replay.step import StepAction, action_of, replay_step
from molt.replay.verifiers import (
    AGENT_VERIFIERS,
    TASK_VERIFIERS,
    JudgeVerifier,
    Verdict,
    Verifier,
    VerifyContext,
    build_verifier,
)
from molt.store import Trajectory

__all__ = ["LoopShape", "check_tenant", "checkable_facts", "first_turn", "first_wrong_call", "judge_answer",
           "loop_shape", "recorded_outcome", "replay_recording", "states_fact", "tenant_of", "user_turns"]

#: Reward sources that state the outcome of a trajectory (the latest one decides).
_OUTCOME_SOURCES = {RewardSource.VERIFIER, RewardSource.TEST_RESULT, RewardSource.HUMAN_LABEL, RewardSource.JUDGE,
                    RewardSource.ENVIRONMENT}
_FACT = re.compile(r"\S*\d\S*")
_EDGE = re.compile(r"^[\W_]+|[\W_]+$")
#: What the redactor's placeholder mode writes (molt.governance.redaction: ``<TYPE_n>``).
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z_]*_\d+>")
#: Model calls a re-driven loop may make beyond the recorded ones before it counts as unknown: the
#: candidate may take a step or two more than the recording, not loop forever.
EXTRA_CALLS = 4


@dataclass(frozen=True, slots=True)
class LoopShape:
    """Whether a recording is a plain tool-calling loop that :func:`replay_recording` can re-drive.

    ``calls``: the model calls it re-drives — every user turn's, up to the turn where the recording
    stops being a plain loop (only the first turn's when even that one is not); ``faithful``: each of
    them sent the previous one's messages + the reply + its tool results (within a turn) or + the
    reply + the next user message(s) (between turns), with the same tools; ``why``: the first
    departure, for reports; ``later_turns``: the user messages that open each user turn after the
    first, as recorded.
    """

    calls: tuple[Event, ...]
    faithful: bool
    why: str
    later_turns: tuple[tuple[dict[str, Any], ...], ...] = ()


def _model_calls(traj: Trajectory) -> list[Event]:
    return [e for e in traj.events if e.kind == EventKind.MODEL_CALL and isinstance(e.action, Generation)
            and e.observation is not None and e.observation.messages]


def user_turns(traj: Trajectory) -> list[list[Event]]:
    """The model calls grouped by user turn: each turn runs up to and including its first call that
    called no tool (its answer). Calls after the last answer (a turn that never answered) are left out
    unless no turn answered: then they are the one turn."""
    out: list[list[Event]] = []
    cur: list[Event] = []
    for ev in _model_calls(traj):
        cur.append(ev)
        if not ev.action.tool_calls:  # type: ignore[union-attr]
            out.append(cur)
            cur = []
    return out or ([cur] if cur else [])


def first_turn(traj: Trajectory) -> list[Event]:
    """The model calls of the first user turn: up to and including the first that called no tool."""
    turns = user_turns(traj)
    return turns[0] if turns else []


def _shape(m: dict[str, Any]) -> tuple[Any, ...]:
    calls = tuple((c["function"]["name"], _canon(c["function"]["arguments"])) for c in m.get("tool_calls") or ())
    return m.get("role"), " ".join(text_content(m.get("content")).split()), calls, m.get("tool_call_id")


def _canon(args: Any) -> str:
    if isinstance(args, str):
        try:
            args = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError:
            return args
    return orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()


def _link(prev: Event, cur: Event) -> tuple[str | None, list[dict[str, Any]]]:
    """Why ``cur`` is not the next call of a plain loop after ``prev`` (``None`` when it is), and — when
    ``prev`` answered (no tool calls) — the user messages that ``cur`` added: the next user turn."""
    before, now = model_request(prev), model_request(cur)
    if [_shape(m) for m in now[:len(before)]] != [_shape(m) for m in before]:
        return (f"model call {cur.event_id} does not extend the messages of {prev.event_id} (the agent edits "
                f"its history between calls)"), []
    added = now[len(before):]
    asked = action_of(prev.action)  # type: ignore[arg-type]
    reply = added[0] if added else {}
    got = tuple((c["function"]["name"], _canon(c["function"]["arguments"])) for c in reply.get("tool_calls") or ())
    said = " ".join(text_content(reply.get("content")).split())
    if reply.get("role") != "assistant" or got != asked.tool_calls or (
            not asked.tool_calls and said != " ".join((asked.text or "").split())):
        return f"model call {cur.event_id} does not carry the reply of {prev.event_id} as it was generated", []
    rest = added[1:]
    if asked.tool_calls:
        if len(rest) != len(asked.tool_calls) or any(m.get("role") != "tool" for m in rest):
            return (f"between {prev.event_id} and {cur.event_id} the agent added messages other than one tool "
                    f"result per call"), []
    elif not rest or any(m.get("role") != "user" for m in rest):
        return (f"between the answer {prev.event_id} and {cur.event_id} the agent added messages other than "
                f"the user's next turn"), []
    if _canon(offered_tools(prev) or []) != _canon(offered_tools(cur) or []):
        return f"model call {cur.event_id} offers other tools than {prev.event_id}", []
    return None, [] if asked.tool_calls else rest


def loop_shape(traj: Trajectory) -> LoopShape:
    """Check that the recording is a plain tool-calling loop, turn by turn (see the module docstring).

    The first user turn must be one for the recording to be re-driven at all; a later turn that is
    not (the agent rewrote its history before it, added a reminder) ends the re-drive there: the
    turns before it are replayed, and ``why`` says where it stopped."""
    turns = user_turns(traj)
    if not turns:
        return LoopShape((), False, "no model call recorded its chat messages")
    calls: list[Event] = []
    later: list[tuple[dict[str, Any], ...]] = []
    for i, turn in enumerate(turns):
        why: str | None = None
        opened: list[dict[str, Any]] = []
        if i:
            why, opened = _link(calls[-1], turn[0])
        for prev, cur in itertools.pairwise(turn):
            if why is None:
                why = _link(prev, cur)[0]
        if why is not None:
            if not i:
                return LoopShape(tuple(turn), False, why)
            return LoopShape(tuple(calls), True, f"plain tool-calling loop for user turns 1-{i} of {len(turns)}; "
                                                 f"turn {i + 1} is not replayed: {why}", tuple(later))
        if i:
            later.append(tuple(opened))
        calls.extend(turn)
    return LoopShape(tuple(calls), True, "plain tool-calling loop" + (
        f" over {len(turns)} user turns" if len(turns) > 1 else ""), tuple(later))


def _answers(calls: Sequence[Event]) -> list[str | None]:
    """The answers of a re-drivable recording's turns (each turn's call without tool calls)."""
    return [c.action.text for c in calls if not c.action.tool_calls]  # type: ignore[union-attr]


def _joined(answers: Sequence[str | None]) -> str | None:
    """A conversation's answers as one text to judge (one answer: itself)."""
    if len(answers) == 1:
        return answers[0]
    return "\n\n".join(a or "" for a in answers)


def tenant_of(traj: Trajectory) -> str | None:
    """The trajectory's tenant; :class:`ReplayError` when its events name more than one."""
    tenants = {e.metadata.tenant_id for e in traj.events if e.metadata is not None and e.metadata.tenant_id}
    if len(tenants) > 1:
        raise ReplayError(f"Trajectory {traj.trajectory_id} mixes the tenants {', '.join(sorted(tenants))}; "
                          f"it is refused for replay (a trajectory belongs to one tenant).",
                          trajectory_id=traj.trajectory_id)
    return next(iter(tenants), None)


def check_tenant(traj: Trajectory, tenant_id: str | None) -> None:
    """Refuse ``traj`` unless it belongs to ``tenant_id`` (``None``: no tenant to check against)."""
    owner = tenant_of(traj)
    if tenant_id is not None and owner != tenant_id:
        raise ReplayError(f"Trajectory {traj.trajectory_id} belongs to tenant {owner or '(none)'}, not {tenant_id}; "
                          f"it is refused: a tenant's candidates are replayed on its own traffic only.",
                          trajectory_id=traj.trajectory_id)


def recorded_outcome(traj: Trajectory) -> tuple[float | None, str | None]:
    """``(reward in [0, 1], reference)`` of what was recorded, as production says it.

    The latest outcome reward (verifier, test, human label, judge, environment) or user correction (a
    failure) decides; else a ``FEEDBACK`` correction marks a failure; else the latest ``user_feedback`` reward
    (a thumbs-up 1, a thumbs-down 0 or below). ``None``: nobody said. The reference is the latest
    correction, else — for a success — the recorded answer the user accepted.
    """
    reward: float | None = None
    corrections: list[str] = []
    feedback: float | None = None
    for r in sorted(traj.rewards, key=lambda r: r.created_at):
        if r.source in (RewardSource.USER_CORRECTION, RewardSource.HUMAN_LABEL) and r.reason:
            corrections.append(r.reason)
        if r.source in _OUTCOME_SOURCES:
            reward = max(0.0, min(1.0, r.value))
        elif r.source == RewardSource.USER_CORRECTION:  # the user says the answer was wrong
            reward = 0.0
        elif r.source == RewardSource.USER_FEEDBACK:
            feedback = max(0.0, min(1.0, r.value))
    for e in traj.events:
        a: Any = e.action
        if e.kind == EventKind.FEEDBACK and getattr(a, "correction", None):
            corrections.append(a.correction)
            reward = 0.0 if reward is None else reward
    if reward is None:
        reward = feedback
    if corrections:
        return reward, corrections[-1]
    if reward is not None and reward > 0.5:
        turns = user_turns(traj)  # the answers the user accepted: every turn's
        return reward, (_joined([t[-1].action.text for t in turns]) if turns else None)  # type: ignore[union-attr]
    return reward, None


def checkable_facts(text: str) -> list[str]:
    """The words of ``text`` that hold a digit (amounts, dates, times, codes, ids), without the
    punctuation or currency signs around them: what an answer agreeing with ``text`` must repeat.
    Governance's placeholders (``<PERSON_1>``) are not facts: they stand for a value the replay never
    saw, numbered per scope, so no answer can be asked to repeat them."""
    return list(dict.fromkeys(_EDGE.sub("", t) for t in _FACT.findall(_PLACEHOLDER.sub(" ", text))))


async def judge_answer(answer: Any, traj: Trajectory, *, verifier: Verifier | None = None,
                       judge_backend: Any = None, recorded: str | None = None) -> Verdict | None:
    """The verdict on a replayed ``answer`` of ``traj`` (see the module docstring), ``None`` when
    nothing can judge it. ``verdict.detail`` starts with what judged: ``verifier``, ``correction``,
    ``accepted answer``, ``recorded answer`` or ``judge``."""
    ctx = VerifyContext(input=_first_user_text(traj), trajectory_id=traj.trajectory_id, task=_task(traj))
    if verifier is not None:
        v = await verifier.ascore(answer, ctx)
        return Verdict(v.reward, v.success, f"verifier: {v.detail}")
    reward, reference = recorded_outcome(traj)
    text = "" if answer is None else str(answer)
    if recorded is not None and reward is not None and " ".join(text.split()) == " ".join(recorded.split()):
        return Verdict(reward, reward > 0.5, "recorded answer: the replay answered exactly as recorded")
    if reference:
        kind = "correction" if reward is None or reward <= 0.5 else "accepted answer"
        facts = checkable_facts(reference)
        if facts:
            missing = [f for f in facts if not states_fact(text, f)]
            return Verdict(0.0 if missing else 1.0, not missing,
                           f"{kind}: " + (f"misses {', '.join(missing)}" if missing else f"states {', '.join(facts)}"))
    if judge_backend is None:
        return None
    rubric = (f"The answer must agree with this reference answer from the user: {reference}" if reference
              else "The answer correctly and helpfully answers the question.")
    v = await JudgeVerifier(judge_backend, rubric).ascore(answer, ctx)
    return Verdict(v.reward, v.success, f"judge: {v.detail}")


def states_fact(text: str, fact: str) -> bool:
    """Whether ``text`` holds ``fact`` as a whole word (17 is not stated by 170), case aside."""
    return re.search(rf"(?<!\w){re.escape(fact)}(?!\w)", text, re.IGNORECASE) is not None


def first_wrong_call(traj: Trajectory) -> Event | None:
    """The first model call that went wrong: the one a correction points at, else the one whose tool
    call failed first, else the answer of the first user turn."""
    calls = _model_calls(traj)
    by_id = {e.event_id: e for e in calls}
    for r in traj.rewards:
        if r.event_id in by_id and r.source in (RewardSource.USER_CORRECTION, RewardSource.HUMAN_LABEL):
            return by_id[r.event_id]
    last: Event | None = None
    for e in traj.events:
        if e.event_id in by_id:
            last = e
        elif e.kind == EventKind.TOOL_CALL and e.outcome is not None and last is not None and (
                e.outcome.status != OutcomeStatus.OK or _is_error_text(e.outcome.output)):
            return last
    turn = first_turn(traj)
    return turn[-1] if turn else None


def _is_error_text(output: Any) -> bool:
    return isinstance(output, str) and output.lstrip().lower().startswith("error")


def _first_user_text(traj: Trajectory) -> str:
    for e in traj.events:
        if e.kind == EventKind.USER_MESSAGE and isinstance(getattr(e.action, "content", None), str):
            return e.action.content  # type: ignore[union-attr]
    for e in _model_calls(traj)[:1]:
        for m in e.observation.messages:  # type: ignore[union-attr]
            if m.role == "user":
                return text_content(m.content)
    return ""


def _agent(traj: Trajectory) -> str | None:
    return next((e.metadata.agent_id for e in traj.events if e.metadata is not None and e.metadata.agent_id), None)


def _task(traj: Trajectory) -> str | None:
    return next((e.metadata.task for e in traj.events if e.metadata is not None and e.metadata.task), None)


def _tool_content(outcome: Outcome) -> str:
    """A tool result as the agent hands it back to the model: the recorded text, else canonical JSON."""
    if outcome.status != OutcomeStatus.OK:
        err = outcome.error
        return f"Error: {err.type}: {err.message}" if err is not None else f"Error: {outcome.status.value}"
    out = outcome.output
    return out if isinstance(out, str) else orjson.dumps(out, option=orjson.OPT_SORT_KEYS).decode()


async def _drive(shape: LoopShape, policy: ReplayAgent, cassette: Cassette, trace: EpisodeTrace) -> list[str | None]:
    """Run the loop under ``policy`` from the first call's messages, user turn by user turn; each
    turn's answer. A later turn is opened by the candidate's own answer to the turn before and the
    user's recorded message(s)."""
    first = shape.calls[0]
    messages = model_request(first)
    tools = offered_tools(first)
    sampling: dict[str, Any] = dict(first.action.sampling or {})  # type: ignore[union-attr]
    budget = len(shape.calls) + EXTRA_CALLS * (1 + len(shape.later_turns))
    answers: list[str | None] = []
    made = 0
    for opened in ((), *shape.later_turns):
        if opened:
            messages.append({"role": "assistant", "content": answers[-1] or ""})
            messages.extend(dict(m) for m in opened)
        while True:
            if made == budget:
                raise _TooLong(f"the candidate made {budget} model calls without answering every user turn (the "
                               f"recording answered after {len(shape.calls)})")
            made += 1
            snapshot = [dict(m) for m in messages]
            d = await policy.decide(snapshot, tools, sampling)
            trace.steps.append(Step("model", messages=snapshot, tools=tools, decision=d))
            trace.prompt_tokens += d.prompt_tokens
            trace.completion_tokens += d.completion_tokens
            if not d.tool_calls:
                answers.append(d.text)
                break
            messages.append({"role": "assistant", "content": d.text, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": _canon(c["arguments"])}} for c in d.tool_calls]})
            for c in d.tool_calls:
                step = Step("tool", name=c["name"], request=c["arguments"])
                trace.steps.append(step)
                hit = cassette.lookup("tool", c["name"], c["arguments"])  # CassetteMiss: left the recording
                step.outcome, step.match = hit.outcome, hit.match
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": _tool_content(hit.outcome)})
    return answers


class _TooLong(Exception):
    pass


def _recorded_actions(traj: Trajectory, calls: tuple[Event, ...]) -> list[StepAction]:
    out: list[StepAction] = []
    ids = {e.event_id for e in calls}
    last = calls[-1].event_id if calls else None
    for e in traj.events:
        if e.event_id in ids:
            out.append(action_of(e.action))  # type: ignore[arg-type]
            if e.event_id == last:
                break
        elif e.kind == EventKind.TOOL_CALL and e.action is not None and e.action.type == "tool_call" and out:
            out.append(StepAction(None, ((f"tool:{e.action.tool_name}", _canon(e.action.arguments)),)))
    return out


async def replay_recording(traj: Trajectory, policy: ReplayAgent, *, verifier: Any = None, judge: Any = None,
                           live: LiveTools | None = None, normalization: Normalization | None = None,
                           tenant_id: str | None = None) -> EpisodeResult:
    """Re-drive ``traj``'s agent from its recording under ``policy`` and judge the new answer.

    ``verifier`` (instance or spec) overrides the task's; ``judge`` is the judge model's backend
    (default: ``policy.backend``, the served model); ``live`` answers tool calls that leave the
    recording; ``tenant_id`` refuses another tenant's trajectory. Raises :class:`ReplayError` for a
    trajectory that cannot be replayed at all; otherwise the result's ``status`` is ``ok``, ``unknown``
    (left the recording, ran past the recorded length, or nothing could judge the answer) or ``error``.
    """
    check_tenant(traj, tenant_id)
    shape = loop_shape(traj)
    if not shape.calls:
        raise ReplayError(f"Trajectory {traj.trajectory_id} cannot be replayed from its recording: "
                          f"{shape.why}. Record the agent through the gateway or an adapter that keeps the "
                          f"messages, or register it with @molt.replayable.", trajectory_id=traj.trajectory_id)
    task, agent = _task(traj), _agent(traj)
    ver = build_verifier(verifier) if verifier is not None else (
        TASK_VERIFIERS.get(task) if task and task in TASK_VERIFIERS else
        AGENT_VERIFIERS.get(agent) if agent and agent in AGENT_VERIFIERS else None)
    judge = judge if judge is not None else policy.backend
    cassette = Cassette.from_events(traj.events, normalization=normalization, live=live,
                                    trajectory_id=traj.trajectory_id)
    recorded_actions = _recorded_actions(traj, shape.calls)
    rec_reward, _ = recorded_outcome(traj)
    rec_text = _joined(_answers(shape.calls)) if shape.faithful else shape.calls[-1].action.text  # type: ignore[union-attr]
    trace = EpisodeTrace()
    status: Literal["ok", "unknown", "error"] = "ok"
    answer: str | None = None
    error: str | None = None
    t0 = time.perf_counter()
    mode = "episode" if shape.faithful else "step"
    try:
        if shape.faithful:
            answer = _joined(await _drive(shape, policy, cassette, trace))
        else:
            answer, status, error = await _step(traj, policy, shape, trace)
    except CassetteMiss as exc:
        status, error = "unknown", exc.message
    except _TooLong as exc:
        status, error = "unknown", str(exc)
    except ReplayError:
        raise
    except Exception as exc:  # the backend failing is an outcome of this replay, not a crash of the caller
        status, error = "error", f"{type(exc).__name__}: {exc}"
    verdict = None
    if status == "ok":
        verdict = await judge_answer(answer, traj, verifier=ver, judge_backend=judge, recorded=rec_text)
        if verdict is None:
            status, error = "unknown", "no verifier, correction, accepted answer or judge could judge the answer"
    actions = [s.action() for s in trace.steps]
    same = status == "ok" and len(actions) == len(recorded_actions) and all(
        a.same(b) for a, b in zip(actions, recorded_actions, strict=True))
    return EpisodeResult(
        trajectory_id=traj.trajectory_id, candidate=policy.version, status=status, answer=answer,
        recorded_answer=rec_text, recorded_reward=rec_reward,
        replayed_reward=None if verdict is None else verdict.reward, verdict=verdict, same_actions=same,
        actions=actions, recorded=recorded_actions, misses=list(cassette.misses), error=error,
        prompt_tokens=trace.prompt_tokens, completion_tokens=trace.completion_tokens,
        latency_s=time.perf_counter() - t0, mode=mode if shape.faithful else f"step ({shape.why})")


async def _step(traj: Trajectory, policy: ReplayAgent, shape: LoopShape,
                trace: EpisodeTrace) -> tuple[str | None, Literal["ok", "unknown", "error"], str | None]:
    """Step replay of the first wrong call; a re-decided tool call's consequence is not recorded."""
    ev = first_wrong_call(traj)
    if ev is None:
        return None, "unknown", f"not a plain loop ({shape.why}) and no model call to re-decide"
    res = await replay_step(traj, ev.event_id, policy)
    trace.steps.append(Step("model", messages=model_request(ev), tools=offered_tools(ev), decision=res.decision))
    trace.prompt_tokens += res.decision.prompt_tokens
    trace.completion_tokens += res.decision.completion_tokens
    if res.replayed.tool_calls:
        return None, "unknown", (f"not a plain loop ({shape.why}); step replay of {ev.event_id} called a tool, "
                                 f"whose consequence the recording does not hold")
    return res.decision.text, "ok", None

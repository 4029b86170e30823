"""Claude Agent SDK hook inputs → ATDP events (runs on Molt's dispatcher thread, never the agent's).

One prompt is one trajectory, a tree rooted at the turn::

    agent_step "turn"            UserPromptSubmit … Stop (outcome: the last assistant message)
    ├── user_message             UserPromptSubmit (the prompt)
    ├── tool_call <tool_name>    PreToolUse … PostToolUse | PostToolUseFailure (errors as outcomes)
    └── agent_step <agent_type>  SubagentStart … SubagentStop
        └── tool_call …          tool hooks carrying that sub-agent's ``agent_id``

Spans are paired by the SDK's own ids — ``session_id``, ``tool_use_id``, ``agent_id`` — so
concurrent sessions never mix. A tool hook that arrives with no turn open (hooks attached mid-session)
opens one; a new prompt ends a turn that never saw its Stop (status ``interrupted``); Stop ends the
tools and sub-agents still open under the turn as ``cancelled``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from molt.atdp.models import (
    AgentStep,
    EventKind,
    Generation,
    Outcome,
    OutcomeStatus,
    ToolCall,
    UserMessage,
)
from molt.capture.adapt import CALL_ID_TAG, Capture, OpenSpan, SpanTable, error_outcome, text_of

__all__ = ["HookMapper"]


class HookMapper:
    """Pairs hook inputs into spans and records one event per finished operation.

    Args:
        capture: the adapter's :class:`~molt.capture.adapt.Capture` (provenance, payload bounds).
    """

    def __init__(self, capture: Capture):
        self.capture = capture
        self.spans = SpanTable(capture)
        self._turn: dict[str, tuple[str, str, int]] = {}  # session_id -> the latest turn's span key
        self._turns = itertools.count()

    def on_hook(self, data: Mapping[str, Any], tool_use_id: str | None, t_ns: int) -> None:
        """Map one hook input (``data`` is what the SDK passed the hook callback)."""
        name = data.get("hook_event_name")
        handler = _HANDLERS.get(name) if isinstance(name, str) else None
        if handler is not None:
            handler(self, data, tool_use_id, t_ns)

    # ------------------------------------------------------------------ turns

    def _turn_key(self, session: str, t_ns: int) -> tuple[str, str, int]:
        key = self._turn.get(session)
        if key is None or key not in self.spans:
            # No turn open: hooks attached mid-session, or the agent went on after Stop (a Stop hook
            # that blocked), which continues the stopped turn's trajectory.
            last = self.spans.resolve(key) if key is not None else None
            key = self._open_turn(session, t_ns, prompt=None, trajectory_id=last[1] if last else None)
        return key

    def _open_turn(
        self, session: str, t_ns: int, prompt: Any, trajectory_id: str | None = None
    ) -> tuple[str, str, int]:
        key = ("turn", session, next(self._turns))
        self.spans.open(key, None, t_ns, trajectory_id=trajectory_id, prompt=prompt)
        self._turn[session] = key
        return key

    def _end_turn(self, key: tuple[str, str, int], t_ns: int, outcome: Outcome) -> None:
        for child in self.spans.open_under(key):
            self._end_child(child, t_ns, Outcome(status=OutcomeStatus.CANCELLED))
        turn = self.spans.close(key)
        if turn is None:
            return
        prompt = turn.data.get("prompt")
        self._record(
            turn,
            t_ns,
            EventKind.AGENT_STEP,
            name="turn",
            action=AgentStep(name="turn", step_type="turn", inputs=self.capture.payload(prompt)),
            outcome=outcome,
        )

    def _end_child(self, sp: OpenSpan, t_ns: int, outcome: Outcome) -> None:
        self.spans.close(sp.key)
        if sp.key[0] == "tool":
            self._record_tool(sp, t_ns, outcome)
        else:
            self._record_agent(sp, t_ns, outcome)

    def prompt(self, data: Mapping[str, Any], _tid: str | None, t_ns: int) -> None:
        session = text_of(data.get("session_id") or "")
        old = self._turn.get(session)
        if old is not None and old in self.spans:
            self._end_turn(
                old,
                t_ns,
                error_outcome("a new prompt arrived before the turn stopped", status=OutcomeStatus.INTERRUPTED),
            )
        prompt = data.get("prompt")
        key = self._open_turn(session, t_ns, prompt)
        turn = self.spans.get(key)
        assert turn is not None
        content = prompt if isinstance(prompt, str) else text_of(prompt)
        self.capture.record(
            self.capture.event(
                EventKind.USER_MESSAGE,
                trajectory_id=turn.trajectory_id,
                parent_id=turn.event_id,
                start_ns=t_ns,
                end_ns=t_ns,
                session_id=session or None,
                name="prompt",
                action=UserMessage(content=self.capture.payload(content)),
                outcome=Outcome(status=OutcomeStatus.OK),
            )
        )

    def run_failed(self, session: str | None, reason: str, t_ns: int) -> None:
        """The run ended in an error no hook hears of (no login, an API error, the CLI crashing): end
        its open turn (of ``session``, or every open one) as an error — or, when its turn was already
        closed or never opened, record an errored turn in that trajectory — so it never looks healthy."""
        keys = [k for s, k in self._turn.items() if k in self.spans and (session is None or s == session)]
        for key in keys or [self._turn_key(session or "", t_ns)]:
            self._end_turn(key, t_ns, error_outcome(reason))

    def answered(self, session: str | None, call_id: str, model: str | None, t_ns: int) -> None:
        """Claude Code's model answered (an assistant message of the stream, ``call_id`` its ``msg_…``
        id). Hooks never see a model call, so nothing is recorded for it — except when the events go to
        the gateway that served the call (:class:`molt.capture.handover.GatewayRecorder`): then a model
        call naming it joins this turn's run to the gateway's trajectory (the gateway keeps its own
        record of the call, with what only it knows, and records this one no more)."""
        if not getattr(self.capture.recorder, "hands_to_gateway", False):
            return
        key = self._turn.get(session or "")
        turn = self.spans.get(key) if key is not None else None
        if turn is None:
            return
        self.capture.record(self.capture.event(
            EventKind.MODEL_CALL,
            trajectory_id=turn.trajectory_id,
            parent_id=turn.event_id,
            start_ns=t_ns,
            end_ns=t_ns,
            session_id=session or None,
            name="messages",
            model=model,
            action=Generation(model=model),
            outcome=Outcome(status=OutcomeStatus.OK),
            tags={CALL_ID_TAG: call_id[:200]},
        ))

    def stop(self, data: Mapping[str, Any], _tid: str | None, t_ns: int) -> None:
        session = text_of(data.get("session_id") or "")
        key = self._turn_key(session, t_ns)
        if key in self.spans:
            out = self.capture.payload(data.get("last_assistant_message"))
            self._end_turn(key, t_ns, Outcome(status=OutcomeStatus.OK, output=out))

    # ------------------------------------------------------------------ tools

    def _parent(self, data: Mapping[str, Any], session: str, t_ns: int) -> Any:
        agent = data.get("agent_id")
        if agent is not None and ("agent", session, agent) in self.spans:
            return ("agent", session, agent)
        return self._turn_key(session, t_ns)

    def pre_tool(self, data: Mapping[str, Any], tool_use_id: str | None, t_ns: int) -> None:
        session = text_of(data.get("session_id") or "")
        call_id = data.get("tool_use_id") or tool_use_id
        self.spans.open(
            ("tool", session, call_id),
            self._parent(data, session, t_ns),
            t_ns,
            tool=text_of(data.get("tool_name") or "unknown"),
            call_id=call_id,
            args=data.get("tool_input"),
        )

    def post_tool(self, data: Mapping[str, Any], tool_use_id: str | None, t_ns: int) -> None:
        sp = self._close_tool(data, tool_use_id, t_ns)
        self._record_tool(
            sp, t_ns, Outcome(status=OutcomeStatus.OK, output=self.capture.payload(data.get("tool_response")))
        )

    def tool_failure(self, data: Mapping[str, Any], tool_use_id: str | None, t_ns: int) -> None:
        sp = self._close_tool(data, tool_use_id, t_ns)
        status = OutcomeStatus.INTERRUPTED if data.get("is_interrupt") else OutcomeStatus.ERROR
        err = {"type": "ToolError", "message": text_of(data.get("error") or "the tool failed")}
        self._record_tool(sp, t_ns, error_outcome(err, status=status))

    def _close_tool(self, data: Mapping[str, Any], tool_use_id: str | None, t_ns: int) -> OpenSpan:
        session = text_of(data.get("session_id") or "")
        key = ("tool", session, data.get("tool_use_id") or tool_use_id)
        if key not in self.spans:  # no PreToolUse seen: the SDK's duration stands in for the start
            start = t_ns - _duration_ns(data.get("duration_ms"))
            self.pre_tool(data, tool_use_id, start)
        sp = self.spans.close(key)
        assert sp is not None
        return sp

    def _record_tool(self, sp: OpenSpan, t_ns: int, outcome: Outcome) -> None:
        d = sp.data
        self._record(
            sp,
            t_ns,
            EventKind.TOOL_CALL,
            name=d["tool"],
            outcome=outcome,
            action=ToolCall(
                tool_name=d["tool"],
                call_id=None if d["call_id"] is None else text_of(d["call_id"]),  # the CLI's JSON: any type
                arguments=self.capture.payload(d["args"]),
            ),
        )

    # ------------------------------------------------------------------ sub-agents

    def subagent_start(self, data: Mapping[str, Any], _tid: str | None, t_ns: int) -> None:
        session = text_of(data.get("session_id") or "")
        self.spans.open(
            ("agent", session, data.get("agent_id")),
            self._turn_key(session, t_ns),
            t_ns,
            agent_type=text_of(data.get("agent_type") or "subagent"),
        )

    def subagent_stop(self, data: Mapping[str, Any], _tid: str | None, t_ns: int) -> None:
        session = text_of(data.get("session_id") or "")
        key = ("agent", session, data.get("agent_id"))
        if key not in self.spans:
            self.subagent_start(data, None, t_ns)
        agent = self.spans.close(key)
        assert agent is not None
        for child in self.spans.open_under(agent.root_key):  # tools of this sub-agent still open
            if child.parent_event_id == agent.event_id:
                self._end_child(child, t_ns, Outcome(status=OutcomeStatus.CANCELLED))
        self._record_agent(
            agent,
            t_ns,
            Outcome(status=OutcomeStatus.OK, output=self.capture.payload(data.get("last_assistant_message"))),
        )

    def _record_agent(self, sp: OpenSpan, t_ns: int, outcome: Outcome) -> None:
        name = sp.data["agent_type"]
        self._record(
            sp,
            t_ns,
            EventKind.AGENT_STEP,
            name=name,
            outcome=outcome,
            action=AgentStep(name=name, step_type="subagent"),
        )

    # ------------------------------------------------------------------ recording

    def _record(self, sp: OpenSpan, t_ns: int, kind: EventKind, **fields: Any) -> None:
        session = sp.key[1] or None
        self.capture.record(
            self.capture.event(
                kind,
                trajectory_id=sp.trajectory_id,
                event_id=sp.event_id,
                parent_id=sp.parent_event_id,
                start_ns=sp.start_ns,
                end_ns=max(t_ns, sp.start_ns),
                session_id=session,
                **fields,
            )
        )


def _duration_ns(ms: Any) -> int:
    """The SDK's ``duration_ms`` in nanoseconds; 0 when it is not a sane duration (up to a day)."""
    try:
        v = float(ms or 0)
    except (TypeError, ValueError):
        return 0
    return int(v * 1e6) if 0 <= v <= 86_400_000 else 0


_HANDLERS = {
    "UserPromptSubmit": HookMapper.prompt,
    "PreToolUse": HookMapper.pre_tool,
    "PostToolUse": HookMapper.post_tool,
    "PostToolUseFailure": HookMapper.tool_failure,
    "SubagentStart": HookMapper.subagent_start,
    "SubagentStop": HookMapper.subagent_stop,
    "Stop": HookMapper.stop,
}

"""Property-based fuzzing of every main-venv adapter's event mapping (issue 10, item 5).

Each test drives one adapter's real entry points — the Agents SDK tracing processor, the MCP server
middleware, the Claude Agent SDK hook — with hypothesis-generated hostile payloads in the framework's
own types where it has them: arbitrary JSON, NaN and infinities, integers past 64 bits, bytes, lone
surrogates, deep nesting, cycles, objects that cannot be serialized or even printed, missing and
wrong-typed fields, and ids out of order (an end before its start, an end twice, a child of a parent
that never started). For each it asserts what Molt promises the agent and the store:

(a) the adapter never raises into the framework and hands back what the framework expects;
(b) every recorded trajectory's hash chain verifies and every stored record unseals to a valid Event;
(c) something was recorded.

The ``typed`` tests hold the framework's declared types and fuzz only content; for them a stronger
property holds: no event is lost (no capture error, no span left open). ``FUZZ_N=1000`` searches harder.
The LangChain adapter's fuzz test lives in ``test_hostile_input.py``; CrewAI's in
``tests/adapters/crewai/test_crewai_fuzz.py`` (its own venv).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molt.atdp.chain import unseal, verify_chain
from molt.capture import MemorySink, Recorder

EXAMPLES = settings(max_examples=int(os.environ.get("FUZZ_N", 100)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------------------------ hostile values


class Unprintable:
    """An object whose repr and str raise (a framework object half torn down)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        # how hypothesis prints a falsifying example that holds one (its printer asks for this first)
        p.text("Unprintable()")


def _deep(n: int) -> Any:
    v: Any = "bottom"
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


def _cycle() -> list[Any]:
    c: list[Any] = [1]
    c.append(c)
    return c


# text with lone surrogates (what json.loads makes of "\ud800"), NULs and control characters
_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
_scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True)
            | _text | st.binary(max_size=30))
_json = st.recursive(_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c, max_size=4),
                     max_leaves=20)
_any = (_json | st.builds(object) | st.builds(Unprintable) | st.just(float("nan")) | st.just(float("inf"))
        | st.integers(40, 200).map(_deep) | st.builds(_cycle) | st.sets(st.integers(), max_size=3))
#: one branch however it is combined (``s | hostile`` is then half well-formed, half hostile)
hostile = st.deferred(lambda: _any)


def _json_dumps(v: Any) -> str:
    try:
        return json.dumps(v, default=repr)
    except Exception:
        return "{"


def _check_store(sink: MemorySink, before: int | None = 0) -> None:
    """(b) and (c): every chain verifies, every record is a valid event, and (unless ``before`` is None)
    something was stored beyond the first ``before`` records."""
    if before is not None:
        assert len(sink.events) > before, "nothing was recorded"
    for tid in {r.x["trajectory_id"] for r in sink.events.values()}:
        sealed = sink.sealed_events(tid)
        assert verify_chain(tid, sealed).ok, tid
        for s in sealed:
            unseal(s.envelope, s.payload)


def _settle(adapter: Any, rec: Recorder, sink: MemorySink, before: int | None, typed: bool = False) -> None:
    """The end of one example: everything delivered, then (b), and for a typed test (c) and that no event
    was lost. Inside the ``@given`` function, so that hypothesis shrinks a failing example and prints it
    (checked once after the search, a failure named no example and did not reproduce). A hostile test
    passes ``before=None``: an example may hold nothing an adapter can map (a capture error each, the
    agent unaffected), so (c) is asserted over the whole search, after it."""
    assert adapter.flush(timeout=60, deliver=True)
    assert rec.flush(timeout=60, deliver=True)
    if typed:
        _assert_nothing_lost(adapter.stats)  # read now: a snapshot taken before the flush is stale
    _check_store(sink, before)


def _recorder(tmp_path: Path) -> tuple[MemorySink, Recorder]:
    sink = MemorySink()
    return sink, Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)


# ------------------------------------------------------------------------------------------ OpenAI Agents SDK


def _agents_span_data() -> st.SearchStrategy[Any]:
    from agents.tracing.span_data import (
        AgentSpanData,
        CustomSpanData,
        FunctionSpanData,
        GenerationSpanData,
        GuardrailSpanData,
        HandoffSpanData,
        MCPListToolsSpanData,
        ResponseSpanData,
        TaskSpanData,
        TurnSpanData,
    )
    from openai.types.responses import Response, ResponseFunctionToolCall, ResponseOutputMessage

    role = st.sampled_from(["system", "developer", "user", "assistant", "tool", "nope"]) | hostile
    tool_call = st.fixed_dictionaries({}, optional={
        "id": hostile, "type": st.just("function"),
        "function": st.fixed_dictionaries({}, optional={"name": hostile, "arguments": _text.map(str) | hostile})
        | hostile,
    })
    message = st.fixed_dictionaries({"role": role}, optional={
        "content": hostile, "tool_calls": st.lists(tool_call, max_size=2) | hostile, "tool_call_id": hostile,
        "name": hostile}) | hostile
    usage = st.fixed_dictionaries({}, optional={"input_tokens": hostile, "output_tokens": hostile,
                                                "total_tokens": hostile}) | hostile
    out_item = st.one_of(
        st.builds(lambda t, c: ResponseOutputMessage.model_construct(type=t, content=c, role="assistant"),
                  st.just("message") | hostile, st.lists(hostile, max_size=2) | hostile),
        st.builds(lambda i, n, a: ResponseFunctionToolCall.model_construct(
            type="function_call", call_id=i, name=n, arguments=a), hostile, hostile, hostile),
        hostile,
    )
    response = st.none() | hostile | st.builds(
        lambda m, o, u, s: Response.model_construct(model=m, output=o, usage=u, status=s),
        hostile, st.lists(out_item, max_size=3) | hostile, hostile, hostile)
    return st.one_of(
        st.builds(GenerationSpanData, input=st.lists(message, max_size=3) | hostile,
                  output=st.lists(message, max_size=3) | hostile, model=hostile,
                  model_config=st.dictionaries(st.sampled_from(["temperature", "seed", "stop"]) | _text, hostile,
                                               max_size=3) | hostile, usage=usage),
        st.builds(ResponseSpanData, response=response, input=hostile, usage=usage),
        st.builds(FunctionSpanData, name=hostile, input=_json.map(_json_dumps) | hostile, output=hostile,
                  mcp_data=hostile),
        st.builds(AgentSpanData, name=hostile, handoffs=hostile, tools=hostile, output_type=hostile),
        st.builds(HandoffSpanData, from_agent=hostile, to_agent=hostile),
        st.builds(GuardrailSpanData, name=hostile, triggered=hostile),
        st.builds(MCPListToolsSpanData, server=hostile, result=hostile),
        st.builds(CustomSpanData, name=hostile, data=hostile),
        st.builds(TaskSpanData, name=hostile, usage=hostile, metadata=hostile),
        st.builds(TurnSpanData, turn=hostile, agent_name=hostile, usage=hostile, metadata=hostile),
    )


@pytest.mark.slow
def test_openai_agents_mapping_of_hostile_spans_never_raises_and_records_valid_events(tmp_path: Path) -> None:
    pytest.importorskip("molt_openai_agents")
    from agents.tracing.spans import SpanImpl
    from agents.tracing.traces import TraceImpl

    from molt_openai_agents import MoltTracingProcessor

    sink, rec = _recorder(tmp_path)
    proc = MoltTracingProcessor(rec, tenant_id="acme")
    error = st.none() | st.fixed_dictionaries({"message": hostile}, optional={"data": hostile}) | hostile
    # (op, span index): start / end / error-then-end of span i, or the trace's end; ids may repeat
    op = st.tuples(st.sampled_from(["start", "end", "error", "trace_end"]), st.integers(0, 4))

    @EXAMPLES
    @given(spans=st.lists(st.tuples(_agents_span_data(), st.integers(-2, 4), error), min_size=1, max_size=5),
           ops=st.lists(op, max_size=14), name=hostile, group=hostile, meta=hostile, trace_known=st.booleans(),
           trace_first=st.booleans())
    def run(spans: list[Any], ops: list[Any], name: Any, group: Any, meta: Any, trace_known: bool,
            trace_first: bool) -> None:
        trace = TraceImpl(name=name, trace_id=None, group_id=group, metadata=meta, processor=proc)
        tid = trace.trace_id if trace_known else "trace_never_started"
        objs = []
        for i, (data, parent, err) in enumerate(spans):
            # parent: none, another span of this trace (maybe not started, maybe itself), or unknown
            pid = None if parent == -1 else "span_unknown" if parent == -2 else f"span_{parent}_{id(trace)}"
            s = SpanImpl(trace_id=tid, span_id=f"span_{i}_{id(trace)}", parent_id=pid, processor=proc,
                         span_data=data, tracing_api_key=None)
            if err is not None:
                s.set_error(err)
            objs.append(s)
        if trace_first:
            assert proc.on_trace_start(trace) is None
        for action, i in ops:
            s = objs[i % len(objs)]
            if action == "start":
                assert proc.on_span_start(s) is None
            elif action == "trace_end":
                assert proc.on_trace_end(trace) is None
            else:
                assert proc.on_span_end(s) is None
        for s in objs:  # the usual order too, so every example records something
            proc.on_span_start(s)
            proc.on_span_end(s)
        if not trace_first:
            proc.on_trace_start(trace)
        proc.on_trace_end(trace)
        proc.on_trace_end(trace)  # twice
        proc.force_flush()
        _settle(proc, rec, sink, None)

    run()
    assert sink.events, "nothing was recorded"
    rec.close()


# ------------------------------------------------------------------------------------------ MCP middleware


def _mcp_result() -> st.SearchStrategy[Any]:
    import mcp.types as t

    content = st.one_of(
        st.builds(lambda x: t.TextContent.model_construct(type="text", text=x), hostile),
        st.builds(lambda d, m: t.ImageContent.model_construct(type="image", data=d, mime_type=m), hostile, hostile),
        st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "resource"]) | hostile},
                              optional={"text": hostile, "data": hostile, "blob": hostile}),
        hostile,
    )
    contents = st.one_of(
        st.builds(lambda u, x: t.TextResourceContents.model_construct(uri=u, text=x), hostile, hostile),
        st.builds(lambda u, b, m: t.BlobResourceContents.model_construct(uri=u, blob=b, mime_type=m),
                  hostile, hostile, hostile),
        st.fixed_dictionaries({}, optional={"uri": hostile, "text": hostile, "blob": hostile, "mimeType": hostile}),
        hostile,
    )
    message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["user", "assistant"]) | hostile,
                                                  "content": content | hostile}) | hostile
    return st.one_of(
        st.builds(lambda c, s, e: t.CallToolResult.model_construct(content=c, structured_content=s, is_error=e),
                  st.lists(content, max_size=3) | hostile, hostile, hostile),
        st.builds(lambda c: t.ReadResourceResult.model_construct(contents=c), st.lists(contents, max_size=3) | hostile),
        st.builds(lambda d, m: t.GetPromptResult.model_construct(description=d, messages=m),
                  hostile, st.lists(message, max_size=3) | hostile),
        st.fixed_dictionaries({}, optional={"content": hostile, "isError": hostile, "structuredContent": hostile,
                                            "contents": st.lists(contents, max_size=3) | hostile,
                                            "messages": st.lists(message, max_size=3) | hostile,
                                            "description": hostile}),
        st.none(),
        hostile,
    )


def test_mcp_middleware_of_hostile_requests_never_interferes_and_records_valid_events(tmp_path: Path) -> None:
    pytest.importorskip("molt_mcp")
    from mcp.server.context import ServerRequestContext
    from mcp.shared.exceptions import MCPError
    from pydantic import BaseModel, ValidationError

    from molt_mcp import MoltMiddleware

    sink, rec = _recorder(tmp_path)
    mw = MoltMiddleware(rec, tenant_id="acme", methods={"tools/call", "resources/read", "prompts/get", "ping"})
    meta = st.fixed_dictionaries({}, optional={
        "io.molt/trajectory": hostile, "io.molt/parent": hostile,
        "traceparent": st.just("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01") | _text | hostile}) | hostile
    # raw wire params: the middleware runs before the SDK validates anything
    params = st.fixed_dictionaries({}, optional={"name": hostile, "arguments": hostile, "uri": hostile,
                                                 "_meta": meta, "cursor": hostile}) | hostile

    def raised() -> st.SearchStrategy[BaseException]:
        def validation_error() -> ValidationError:
            class M(BaseModel):
                x: int

            try:
                M(x="nope")  # type: ignore[arg-type]
            except ValidationError as e:
                return e
            raise AssertionError

        return st.one_of(
            st.builds(lambda c, m, d: MCPError(c, m, d), st.integers(-(2**40), 2**40), _text, hostile),
            st.builds(validation_error), st.builds(lambda m: RuntimeError(m), hostile),
            st.builds(lambda: asyncio.CancelledError()), st.builds(lambda: TimeoutError()),
        )

    session = st.sampled_from([None, object()])

    @EXAMPLES
    @given(calls=st.lists(st.tuples(
        st.sampled_from(["tools/call", "resources/read", "prompts/get", "ping", "tools/list", "initialize"]),
        params, st.none() | st.integers(-(2**70), 2**70) | _text | hostile, st.none() | meta,
        _mcp_result(), st.none() | raised(), session, st.sampled_from(["2025-06-18", "2026-07-28", "x"]) | hostile,
    ), min_size=1, max_size=4))
    def run(calls: list[Any]) -> None:
        async def go() -> None:
            for method, p, req_id, m, result, exc, sess, version in calls:
                ctx = ServerRequestContext(session=sess, lifespan_context={}, protocol_version=version,
                                           method=method, params=p, request_id=req_id, meta=m)

                async def call_next(c: Any, result: Any = result, exc: BaseException | None = exc,
                                    ctx: Any = ctx) -> Any:
                    assert c is ctx
                    if exc is not None:
                        raise exc
                    return result

                if exc is not None:
                    with pytest.raises(type(exc)) as caught:
                        await mw(ctx, call_next)
                    assert caught.value is exc  # the handler's own error, untouched
                else:
                    assert await mw(ctx, call_next) is result
            # and one well-formed call, so every example records something
            ctx = ServerRequestContext(session=None, lifespan_context={}, protocol_version="2026-07-28",
                                       method="tools/call", params={"name": "t", "arguments": {}}, request_id=1)

            async def ok(c: Any) -> Any:
                return {"content": []}

            await mw(ctx, ok)

        asyncio.run(go())
        _settle(mw, rec, sink, None)

    run()
    assert sink.events, "nothing was recorded"
    rec.close()


# ------------------------------------------------------------------------------------------ Claude Agent SDK


def test_claude_agent_hooks_of_hostile_inputs_never_raise_and_record_valid_events(tmp_path: Path) -> None:
    pytest.importorskip("molt_claude_agent")
    from molt_claude_agent import HOOK_EVENTS, MoltClaudeHooks

    sink, rec = _recorder(tmp_path)
    hooks = MoltClaudeHooks(rec, tenant_id="acme")
    # few ids, so starts and ends meet (and clash) often; hostile ones too (unhashable, non-strings)
    ids = st.sampled_from(["s1", "s2", "", None, 7, "t1", "t2"]) | hostile
    hook_input = st.fixed_dictionaries(
        {"hook_event_name": st.sampled_from([*HOOK_EVENTS, "Notification", "nope"]) | hostile},
        optional={
            "session_id": ids, "transcript_path": hostile, "cwd": hostile, "prompt": hostile,
            "tool_name": st.sampled_from(["Read", "Bash"]) | hostile, "tool_input": hostile,
            "tool_response": hostile, "tool_use_id": ids, "agent_id": ids, "agent_type": hostile,
            "error": hostile, "is_interrupt": hostile, "duration_ms": hostile | st.floats() | st.integers(),
            "last_assistant_message": hostile, "stop_hook_active": hostile, "junk": hostile,
        },
    ) | hostile  # the SDK hands the hook whatever JSON the CLI sent as "input"
    context = st.none() | st.just({"signal": None}) | hostile

    @EXAMPLES
    @given(calls=st.lists(st.tuples(hook_input, ids, context), min_size=1, max_size=8), prompt=_text)
    def run(calls: list[Any], prompt: str) -> None:
        async def go() -> None:
            for data, tool_use_id, ctx in calls:
                assert await hooks._on_hook(data, tool_use_id, ctx) == {}  # observe only: no decision
            # one well-formed turn, so every example records something
            for data in ({"hook_event_name": "UserPromptSubmit", "session_id": "ok", "prompt": prompt},
                         {"hook_event_name": "Stop", "session_id": "ok"}):
                assert await hooks._on_hook(data, None, None) == {}

        asyncio.run(go())
        _settle(hooks, rec, sink, None)

    run()
    assert sink.events, "nothing was recorded"
    rec.close()


# ------------------------------------------------------------------------------------------ typed but hostile
# The framework's declared types (strings where it says str, JSON where it says dict), hostile only in
# content: long strings, lone surrogates and NULs, NaN, integers past 64 bits, surrogate keys. Such input
# is what a real framework can hand over, so here the stronger property holds: no event is lost.

_long = st.integers(250, 1200).map(lambda n: "x" * n)
# No lone surrogates where a framework declares str: Python frameworks hand over valid text there (and
# pydantic refuses such a string in an Event field); they stay in JSON payloads, keys included.
_str = st.text(st.characters(codec="utf-8"), max_size=40) | _long
_jsonv = st.recursive(st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=True) | _str,
                      lambda c: st.lists(c, max_size=4) | st.dictionaries(_text, c, max_size=4), max_leaves=20)
_obj = st.dictionaries(_text, _jsonv, max_size=4)


def _assert_nothing_lost(stats: Any) -> None:
    assert stats.errors == 0, stats.last_error
    assert stats.dropped == 0 and stats.open_spans == 0, stats


@pytest.mark.slow
def test_openai_agents_typed_spans_with_hostile_content_lose_no_event(tmp_path: Path) -> None:
    pytest.importorskip("molt_openai_agents")
    from agents.tracing.span_data import (
        AgentSpanData,
        CustomSpanData,
        FunctionSpanData,
        GenerationSpanData,
        GuardrailSpanData,
        HandoffSpanData,
        MCPListToolsSpanData,
        ResponseSpanData,
        TaskSpanData,
        TurnSpanData,
    )
    from agents.tracing.spans import SpanImpl
    from agents.tracing.traces import TraceImpl
    from openai.types.responses import (
        Response,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseUsage,
    )

    from molt_openai_agents import MoltTracingProcessor

    sink, rec = _recorder(tmp_path)
    proc = MoltTracingProcessor(rec, tenant_id="acme")
    n = st.integers(0, 2**31)
    call = st.builds(lambda i, nm, a: {"id": i, "type": "function", "function": {"name": nm, "arguments": a}},
                     _str, _str, _str | _jsonv.map(_json_dumps))
    msg = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": _str},
                                optional={"tool_calls": st.lists(call, max_size=2), "tool_call_id": _str})
    usage = st.fixed_dictionaries({}, optional={"input_tokens": n, "output_tokens": n, "total_tokens": n})
    response = st.builds(
        lambda m, texts, calls, u: Response.model_construct(
            model=m, status="completed", usage=u,
            output=[ResponseOutputMessage.model_construct(
                type="message", role="assistant",
                content=[ResponseOutputText.model_construct(type="output_text", text=t) for t in texts])]
            + [ResponseFunctionToolCall.model_construct(type="function_call", call_id=i, name=nm, arguments=a)
               for i, nm, a in calls]),
        _str, st.lists(_str, max_size=2), st.lists(st.tuples(_str, _str, _str), max_size=2),
        st.none() | st.builds(lambda a, b: ResponseUsage.model_construct(input_tokens=a, output_tokens=b,
                                                                         total_tokens=a + b), n, n))
    data = st.one_of(
        st.builds(GenerationSpanData, input=st.lists(msg, max_size=3), output=st.lists(msg, max_size=2),
                  model=st.none() | _str, model_config=_obj, usage=st.none() | usage),
        st.builds(ResponseSpanData, response=response, input=_str | st.lists(msg, max_size=2), usage=usage),
        st.builds(FunctionSpanData, name=_str, input=_str | _jsonv.map(_json_dumps), output=_jsonv,
                  mcp_data=st.none() | _obj),
        st.builds(AgentSpanData, name=_str, handoffs=st.none() | st.lists(_str, max_size=2),
                  tools=st.none() | st.lists(_str, max_size=2), output_type=st.none() | _str),
        st.builds(HandoffSpanData, from_agent=st.none() | _str, to_agent=st.none() | _str),
        st.builds(GuardrailSpanData, name=_str, triggered=st.booleans()),
        st.builds(MCPListToolsSpanData, server=st.none() | _str, result=st.none() | st.lists(_str, max_size=3)),
        st.builds(CustomSpanData, name=_str, data=_obj),
        st.builds(TaskSpanData, name=_str, usage=st.none() | _obj),
        st.builds(TurnSpanData, turn=n, agent_name=_str, usage=st.none() | _obj),
    )
    error = st.none() | st.builds(lambda m, d: {"message": m, "data": d}, _str, st.none() | _obj)

    @EXAMPLES
    @given(spans=st.lists(st.tuples(data, error, st.booleans()), min_size=1, max_size=4), name=_str,
           group=st.none() | _str, meta=st.none() | _obj)
    def run(spans: list[Any], name: str, group: str | None, meta: dict[str, Any] | None) -> None:
        before = len(sink.events)
        trace = TraceImpl(name=name, trace_id=None, group_id=group, metadata=meta, processor=proc)
        proc.on_trace_start(trace)
        parent: Any = None
        objs = []
        for d, err, nest in spans:  # each span under the previous one, or under the trace
            s = SpanImpl(trace_id=trace.trace_id, span_id=None, parent_id=parent.span_id if nest and parent else None,
                         processor=proc, span_data=d, tracing_api_key=None)
            if err is not None:
                s.set_error(err)
            proc.on_span_start(s)
            objs.append(s)
            parent = s
        for s in reversed(objs):
            proc.on_span_end(s)
        proc.on_trace_end(trace)
        _settle(proc, rec, sink, before, typed=True)

    run()
    rec.close()


def test_mcp_typed_requests_with_hostile_content_lose_no_event(tmp_path: Path) -> None:
    pytest.importorskip("molt_mcp")
    import mcp.types as t
    from mcp.server.context import ServerRequestContext
    from mcp.shared.exceptions import MCPError

    from molt_mcp import MoltMiddleware

    sink, rec = _recorder(tmp_path)
    mw = MoltMiddleware(rec, tenant_id="acme")
    meta = st.fixed_dictionaries({}, optional={"io.molt/trajectory": _str, "io.molt/parent": _str,
                                               "traceparent": _str})
    text = st.builds(lambda x: t.TextContent(type="text", text=x), _str)
    image = st.builds(lambda d, m: t.ImageContent(type="image", data=d, mime_type=m), _str, _str)
    tool = st.tuples(st.just("tools/call"), st.fixed_dictionaries({"name": _str}, optional={"arguments": _obj}),
                     st.builds(lambda c, s, e: t.CallToolResult(content=c, structured_content=s, is_error=e),
                               st.lists(text | image, max_size=3), st.none() | _obj, st.booleans()))
    resource = st.tuples(
        st.just("resources/read"), st.fixed_dictionaries({"uri": _str}),
        st.builds(lambda c: t.ReadResourceResult(contents=c), st.lists(
            st.builds(lambda u, x: t.TextResourceContents(uri=u, text=x), _str, _str)
            | st.builds(lambda u, b, m: t.BlobResourceContents(uri=u, blob=b, mime_type=m), _str, _str, _str),
            max_size=3)))
    prompt = st.tuples(
        st.just("prompts/get"),
        st.fixed_dictionaries({"name": _str}, optional={"arguments": st.dictionaries(_text, _str, max_size=3)}),
        st.builds(lambda d, m: t.GetPromptResult(description=d, messages=m), st.none() | _str, st.lists(
            st.builds(lambda r, c: t.PromptMessage(role=r, content=c), st.sampled_from(["user", "assistant"]),
                      text | image), max_size=3)))

    @EXAMPLES
    @given(calls=st.lists(st.tuples(tool | resource | prompt, st.none() | meta, st.integers(0, 2**53) | _str,
                                    st.none() | st.builds(lambda c, m: MCPError(c, m), st.integers(-32768, 0), _str)),
                          min_size=1, max_size=4))
    def run(calls: list[Any]) -> None:
        before = len(sink.events)
        async def go() -> None:
            for (method, params, result), m, req_id, exc in calls:
                if m is not None:
                    params = {**params, "_meta": m}
                ctx = ServerRequestContext(session=None, lifespan_context={}, protocol_version="2026-07-28",
                                           method=method, params=params, request_id=req_id, meta=m)

                async def call_next(c: Any, result: Any = result, exc: BaseException | None = exc) -> Any:
                    if exc is not None:
                        raise exc
                    return result

                with contextlib.suppress(MCPError):
                    await mw(ctx, call_next)

        asyncio.run(go())
        _settle(mw, rec, sink, before, typed=True)

    run()
    rec.close()


@pytest.mark.slow
def test_claude_agent_typed_hooks_with_hostile_content_lose_no_event(tmp_path: Path) -> None:
    pytest.importorskip("molt_claude_agent")
    from molt_claude_agent import MoltClaudeHooks

    sink, rec = _recorder(tmp_path)
    hooks = MoltClaudeHooks(rec, tenant_id="acme")
    ids = st.sampled_from(["s1", "t1", "a1", ""]) | _str
    base = {"transcript_path": _str, "cwd": _str, "session_id": ids}
    tool = {**base, "tool_name": _str, "tool_input": _obj, "tool_use_id": ids, "agent_id": st.none() | ids}
    hook = st.one_of(
        st.fixed_dictionaries({**base, "hook_event_name": st.just("UserPromptSubmit"), "prompt": _str}),
        st.fixed_dictionaries({**tool, "hook_event_name": st.just("PreToolUse")}),
        st.fixed_dictionaries({**tool, "hook_event_name": st.just("PostToolUse"), "tool_response": _jsonv}),
        st.fixed_dictionaries({**tool, "hook_event_name": st.just("PostToolUseFailure"), "error": _str,
                               "is_interrupt": st.booleans()}, optional={"duration_ms": st.floats(0, 1e7)}),
        st.fixed_dictionaries({**base, "hook_event_name": st.just("SubagentStart"), "agent_id": ids,
                               "agent_type": _str}),
        st.fixed_dictionaries({**base, "hook_event_name": st.just("SubagentStop"), "agent_id": ids,
                               "agent_type": _str, "stop_hook_active": st.booleans(),
                               "last_assistant_message": _str}),
        st.fixed_dictionaries({**base, "hook_event_name": st.just("Stop"), "stop_hook_active": st.booleans()},
                              optional={"last_assistant_message": _str}),
    )

    @EXAMPLES
    @given(calls=st.lists(hook, min_size=1, max_size=8))
    def run(calls: list[dict[str, Any]]) -> None:
        before = len(sink.events)
        async def go() -> None:
            for data in calls:
                assert await hooks._on_hook(data, data.get("tool_use_id"), {"signal": None}) == {}
            for session in {str(d["session_id"]) for d in calls}:  # end every turn (and what is open in it)
                await hooks._on_hook({"hook_event_name": "Stop", "session_id": session}, None, {"signal": None})

        asyncio.run(go())
        _settle(hooks, rec, sink, before, typed=True)

    run()
    rec.close()


def test_claude_agent_work_after_a_blocked_stop_is_recorded(tmp_path: Path) -> None:
    """Found by the typed fuzz test: when a Stop hook blocks, the agent goes on, but the second Stop was
    dropped (no turn event, no final message) and a tool still running then was never recorded."""
    pytest.importorskip("molt_claude_agent")
    from molt_claude_agent import MoltClaudeHooks

    sink, rec = _recorder(tmp_path)
    hooks = MoltClaudeHooks(rec, strict=True)

    async def go() -> None:
        for data in (
            {"hook_event_name": "UserPromptSubmit", "prompt": "fix it"},
            {"hook_event_name": "Stop", "stop_hook_active": False},
            {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}, "tool_use_id": "t1"},
            {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}, "tool_use_id": "t1",
             "tool_response": "ok"},
            {"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}, "tool_use_id": "t2"},
            {"hook_event_name": "Stop", "stop_hook_active": True, "last_assistant_message": "done"},
        ):
            await hooks._on_hook({"session_id": "s1", **data}, data.get("tool_use_id"), {"signal": None})

    asyncio.run(go())
    assert hooks.flush(timeout=30, deliver=True)
    assert hooks.stats.open_spans == 0
    [tid] = {r.x["trajectory_id"] for r in sink.events.values()}  # the continuation stays in the trajectory
    evs = {e.name: e for e in sink.trajectory_events(tid)}
    assert sorted(e.name for e in sink.trajectory_events(tid)) == ["Bash", "Read", "prompt", "turn", "turn"]
    assert evs["Read"].outcome.status == "cancelled" and evs["turn"].outcome.output == "done"
    _check_store(sink)
    rec.close()

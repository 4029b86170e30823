"""Server middleware that records an MCP server's ``tools/call``, ``resources/read`` and ``prompts/get``.

The middleware runs on the server's event loop around every request; it reads the clock and the
request, calls the rest of the chain exactly once, queues what it saw for Molt's dispatcher thread and
returns the result untouched. Nothing it does can fail the request: capture errors are counted in
``middleware.stats``.

Which trajectory a request joins, first match wins:

1. ``_meta["io.molt/trajectory"]`` — a Molt-instrumented client names it (``_meta["io.molt/parent"]``
   then names the parent event, e.g. the agent's tool-call event);
2. the trace id of a W3C ``_meta["traceparent"]``;
3. the transport session (``Mcp-Session-Id`` over streamable HTTP);
4. the client connection (stdio, in-memory);
otherwise each request is a trajectory of its own.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from molt.atdp import (
    AgentStep,
    EventKind,
    Message,
    Observation,
    Outcome,
    Passage,
    RetrievalQuery,
    ToolCall,
    new_id,
)
from molt.capture.adapt import (
    Capture,
    bound_payload,
    error_outcome,
    text_of,
)
from molt.capture.instrumentor import Instrumentor

__all__ = ["RECORDED_METHODS", "MoltMiddleware"]

#: The MCP methods recorded by default.
RECORDED_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})

#: The oldest mcp this adapter supports (checked at import and when the middleware is built).
FRAMEWORK_MIN = "2.0"
_now = time.time_ns
_MAX_CONTENTS = 100
_TOKEN = "io.molt/connection"
_TOKEN_ATTR = "_molt_connection_token"


class MoltMiddleware(Instrumentor):
    """Record an MCP server's tool calls, resource reads and prompt fetches as ATDP events, and apply
    the live policy version's tool rewrites to what clients see.

    Register it on the server: ``MCPServer(..., middleware=[MoltMiddleware(recorder)])`` or
    ``server.middleware.append(MoltMiddleware(recorder))`` (low-level ``Server`` too).

    With ``versions=``, ``tools/list`` answers carry the live version's tool rewrites (description,
    parameters, name) of ``tenant_id``/``agent_id``, and a ``tools/call`` of a renamed tool reaches the
    server's own tool; the events carry the version in ``provenance.policy_version``. A version's
    system prompt, memories and skills have no place in MCP (the server never sees the prompt).

    Args:
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        server_name: names the server in events (retrieval ``index``, tags); default ``"mcp"``.
        methods: the MCP methods to record (default :data:`RECORDED_METHODS`).
        **options: the :class:`~molt.capture.instrumentor.Instrumentor` options (``tenant_id``,
            ``agent_id``, ``task``, ``tags``, ``max_field_bytes``, ``blob_store``, ``strict``, ``versions``,
            ``harness``, ``version_poll_s``, ``capture``).
    """

    integration = "molt-mcp"
    framework = "mcp"
    framework_dist = "mcp"
    framework_min = FRAMEWORK_MIN
    framework_below = "3"
    install = 'pip install "mcp>=2.0,<3"'
    version_hook = "tools/list (tool descriptions, parameters and names rewritten; renamed calls mapped back)"

    def __init__(self, recorder: Any = None, *, server_name: str | None = None,
                 methods: frozenset[str] | set[str] = RECORDED_METHODS, **options: Any):
        self.server_name = server_name or "mcp"
        self.methods = frozenset(methods)
        options["tags"] = {"mcp_server": self.server_name, **(options.get("tags") or {})}
        super().__init__(recorder, **options)
        self._mapper = _Mapper(self.capture, self.server_name)

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        """The middleware hook: ``(ctx, call_next) -> result``."""
        if self.live is not None and ctx.request_id is not None:
            if ctx.method == "tools/list":
                return self._rewritten_list(await call_next(ctx))
            if ctx.method == "tools/call":
                ctx = self._mapped_call(ctx)
        if ctx.request_id is None or ctx.method not in self.methods:
            return await call_next(ctx)
        t0 = _now()
        try:
            key, parent = _trajectory_key(ctx)
        except Exception as exc:
            self.capture.fail(exc)
            key, parent = None, None
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            self._queue(key, parent, ctx, t0, None, exc)
            raise
        self._queue(key, parent, ctx, t0, result, None)
        return result

    # ------------------------------------------------------------------ the live version (event loop)

    def _rewritten_list(self, result: Any) -> Any:
        """A ``tools/list`` result with the live version's tool rewrites, by the gateway's harness code
        (MCP tools go through it as OpenAI function tools); the result untouched if anything fails."""
        try:
            listed = _plain(result)
            tools = listed.get("tools") if isinstance(listed, dict) else None
            if not isinstance(tools, list):
                return result
            as_functions = [{"type": "function", "function": {
                "name": t.get("name"), "description": t.get("description"), "parameters": t.get("inputSchema")}}
                for t in tools]
            applied = self.apply_version([], as_functions)
            if applied.fingerprint is None or applied.tools is None:
                return result
            out = []
            for mcp_tool, fn_tool in zip(tools, applied.tools, strict=True):
                fn = fn_tool["function"]
                out.append({**mcp_tool, "name": fn["name"], "description": fn.get("description"),
                            "inputSchema": fn.get("parameters")})
            return {**listed, "tools": out}
        except Exception as exc:
            self.capture.fail(exc)
            return result

    def _mapped_call(self, ctx: Any) -> Any:
        """``ctx`` with a renamed tool's name mapped back to the server's own (and the version stamped)."""
        try:
            self.apply_version([], None)  # stamps the version into the events of this call
            params = ctx.params if isinstance(ctx.params, dict) else None
            current = self.live.current if self.live is not None else None
            spec = getattr(current, "harness", None)
            if params is None or spec is None or not spec.tool_rewrites:
                return ctx
            back = {rw.rename: name for name, rw in spec.tool_rewrites.items() if rw.rename}
            name = params.get("name")
            if name not in back:
                return ctx
            return dataclasses.replace(ctx, params={**params, "name": back[name]})
        except Exception as exc:
            self.capture.fail(exc)
            return ctx

    def _queue(self, key: Any, parent: Any, ctx: Any, t0: int, result: Any, exc: BaseException | None) -> None:
        self.queue(
            self._mapper.request,
            key,
            parent,
            ctx.method,
            ctx.params,
            ctx.request_id,
            t0,
            _now(),
            result,
            exc,
        )


def _trajectory_key(ctx: Any) -> tuple[Any, str | None]:
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = ctx.meta if isinstance(ctx.meta, dict) else params.get("_meta")
    meta = meta if isinstance(meta, Mapping) else {}
    tid = meta.get("io.molt/trajectory")
    if _is_id(tid):  # a client's malformed id is ignored, not allowed to cost the event
        parent = meta.get("io.molt/parent")
        return ("molt", tid), parent if _is_id(parent) else None
    tp = meta.get("traceparent")
    if isinstance(tp, str) and tp.count("-") >= 3:
        return ("trace", tp.split("-")[1]), None
    conn = getattr(ctx.session, "_connection", None)  # the SDK's per-connection state (private)
    sid = getattr(conn, "session_id", None)
    if sid:
        return ("session", text_of(sid)), None
    if getattr(ctx, "request", None) is not None:
        return None, None  # HTTP without a session: nothing ties two requests to one client
    if conn is not None and getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return ("conn", _token(conn)), None  # handshake-era: one Connection per client
    # 2026-07-28+ over stdio or in memory: a Connection per request, but one lifespan per client
    return ("conn", _token(ctx.lifespan_context)), None


def _is_id(v: Any) -> bool:
    """Whether ``v`` can be an ATDP id (a trajectory or event id)."""
    return isinstance(v, str) and 0 < len(v) <= 128 and "\x00" not in v and v.isprintable()


def _token(obj: Any) -> Any:
    """A stable id stamped on ``obj`` (``id()`` alone could be reused once it is collected)."""
    if isinstance(obj, dict):
        return obj.setdefault(_TOKEN, new_id())
    token = getattr(obj, _TOKEN_ATTR, None)
    if token is None:
        try:
            token = new_id()
            setattr(obj, _TOKEN_ATTR, token)
        except (AttributeError, TypeError):
            return id(obj)
    return token


class _Mapper:
    """Dispatcher-thread side: requests → events."""

    def __init__(self, capture: Capture, server_name: str):
        self.capture = capture
        self.server_name = server_name
        self._trajectories: OrderedDict[Any, str] = OrderedDict()

    def _trajectory(self, key: Any) -> str:
        if key is None:
            return self.capture.new_trajectory()
        if key[0] == "molt":
            return text_of(key[1])
        tid = self._trajectories.get(key)
        if tid is None:
            tid = self._trajectories[key] = self.capture.new_trajectory()
            if len(self._trajectories) > 100_000:
                self._trajectories.popitem(last=False)
        else:
            self._trajectories.move_to_end(key)
        return tid

    def request(
        self,
        key: Any,
        parent: str | None,
        method: str,
        params: Any,
        request_id: Any,
        t0: int,
        t1: int,
        result: Any,
        exc: BaseException | None,
    ) -> None:
        c = self.capture
        p = dict(params) if isinstance(params, Mapping) else {}
        res = _plain(result)
        common: dict[str, Any] = dict(
            trajectory_id=self._trajectory(key),
            parent_id=parent,
            start_ns=t0,
            end_ns=t1,
            tags={"mcp_request_id": text_of(request_id)},
        )
        if exc is not None:
            outcome: Outcome | None = error_outcome(exc)
        elif isinstance(res, dict) and res.get("isError"):
            outcome = error_outcome(
                {"type": "ToolError", "message": _text(res.get("content")) or "tool error"},
                output=c.payload(res.get("content")),
            )
        else:
            outcome = None
        if method == "tools/call":
            name = text_of(p.get("name") or "tool")
            output = None
            if outcome is None and isinstance(res, dict):
                output = res.get("structuredContent", res.get("content"))
            ev = c.event(
                EventKind.TOOL_CALL,
                name=name,
                action=ToolCall(tool_name=name, arguments=c.payload(p.get("arguments"))),
                outcome=outcome or Outcome(output=c.payload(output)),
                **common,
            )
        elif method == "resources/read":
            uri = text_of(p.get("uri") or "")
            contents = (res or {}).get("contents") if isinstance(res, dict) else None
            ev = c.event(
                EventKind.RETRIEVAL,
                name=uri[:512],
                action=RetrievalQuery(query=uri, index=f"mcp:{self.server_name}:resources"),
                observation=_passages(c, contents) if contents else None,
                outcome=outcome or Outcome(output={"contents": len(contents or [])}),
                **common,
            )
        elif method == "prompts/get":
            name = text_of(p.get("name") or "prompt")
            msgs = (res or {}).get("messages") if isinstance(res, dict) else None
            ev = c.event(
                EventKind.AGENT_STEP,
                name=name,
                action=AgentStep(name=name, step_type="mcp.prompt", inputs=c.payload(p.get("arguments"))),
                observation=_prompt(c, msgs) if msgs else None,
                outcome=outcome
                or Outcome(
                    output=c.payload({"description": (res or {}).get("description")} if isinstance(res, dict) else None)
                ),
                **common,
            )
        else:  # a method the user asked for besides the three
            ev = c.event(
                EventKind.AGENT_STEP,
                name=method,
                action=AgentStep(name=method, step_type="mcp.request", inputs=c.payload(p)),
                outcome=outcome or Outcome(output=c.payload(res)),
                **common,
            )
        c.record(ev)


def _plain(result: Any) -> Any:
    if result is None or isinstance(result, dict):
        return result
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        try:
            return dump(by_alias=True, mode="json", exclude_none=True)
        except Exception:  # not JSON-safe (lone surrogates, odd objects): bound_payload cleans it later
            return dump(by_alias=True, exclude_none=True)
    return result


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(text_of(c["text"]) for c in content if isinstance(c, dict) and c.get("text"))[:4000]
    return text_of(content or "")[:4000]


def _passages(c: Capture, contents: list[Any]) -> Observation:
    contents = contents[:_MAX_CONTENTS]
    budget = max(1024, c.max_field_bytes // max(1, len(contents)))
    out = []
    for item in contents:
        if not isinstance(item, dict):
            continue
        if "text" in item:
            text = bound_payload(text_of(item["text"]), max_bytes=budget)
        else:  # a blob: never inline, a note with its size and digest instead
            text = bound_payload(item.get("blob", ""), max_bytes=budget, blob_store=c.blob_store)
        out.append(
            Passage(
                text=text if isinstance(text, str) else _note(text),
                doc_id=item.get("uri"),
                source=item.get("mimeType"),
            )
        )
    return Observation(passages=out)


def _note(v: Any) -> str:
    import orjson

    return orjson.dumps(v).decode()


def _prompt(c: Capture, msgs: list[Any]) -> Observation:
    budget = max(1024, c.max_field_bytes // max(1, len(msgs)))
    out = []
    for m in msgs[:100]:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, dict) and content.get("type") == "text":
            content = content.get("text")
        content = bound_payload(content, max_bytes=budget, blob_store=c.blob_store)
        role = m.get("role") if m.get("role") in ("user", "assistant") else "user"
        out.append(Message(role=role, content=content if isinstance(content, str | list) else [content]))
    return Observation(messages=out)

"""Inference routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (one shared path: auth, parse,
route, run or stream, record after the response) and the model list."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from molt.backends import openai_wire as wire
from molt.errors import ModelNotFound
from molt.gateway.error_responses import JSON_MEDIA_TYPE
from molt.gateway.routes.context import RouteContext, json_response, read_json
from molt.governance.access import Permission

__all__ = ["install"]


def install(ctx: RouteContext) -> None:
    gw = ctx.gateway

    async def record_later(call: Any) -> None:  # async: runs on the loop after the response, no thread hop
        gw.record(call)

    async def infer(request: Request, path: str, parse: Callable[[Any], Any], begin: Callable[..., Any],
                    render: Callable[[Any, Any, Any], Any]) -> Response:
        """The shared path of both inference endpoints: auth, parse, route, run or stream, record after
        the response."""
        t0 = time.perf_counter()
        p = ctx.auth(request, Permission.WRITE)
        body = await read_json(request, gw.config.max_body_bytes)
        req, stream = parse(body)
        call = begin(p, req, body, request.headers)
        if stream:
            first, it = await gw.open_stream(call, req)
            gw.metrics.observe(path, 200, time.perf_counter() - t0)
            return StreamingResponse(gw.sse(call, first, it), media_type="text/event-stream",
                                     headers={**call.headers, "cache-control": "no-cache"})
        result = await gw.run(call, req)
        payload = render(result, call, req)
        gw.finish(call, result)
        if gw.acks is not None:  # --ack-after-durable: the answer waits for its record's durability
            await gw.record_durably(call)
            resp = Response(orjson.dumps(payload), media_type=JSON_MEDIA_TYPE, headers=call.headers)
        else:
            resp = Response(orjson.dumps(payload), media_type=JSON_MEDIA_TYPE, headers=call.headers,
                            background=BackgroundTask(record_later, call))
        gw.metrics.observe(path, 200, time.perf_counter() - t0)
        return resp

    @ctx.route("/v1/chat/completions", "POST")
    async def chat_completions(request: Request) -> Response:
        return await infer(
            request, "/v1/chat/completions", wire.parse_chat_request, gw.begin_chat,
            lambda result, call, req: wire.chat_response(
                result, id="chatcmpl-" + call.record.event_ids[0], created=int(call.record.started),
                model=req.model, logprobs=req.logprobs))

    @ctx.route("/v1/completions", "POST")
    async def completions(request: Request) -> Response:
        return await infer(
            request, "/v1/completions", wire.parse_completion_request, gw.begin_completion,
            lambda result, call, req: wire.completion_response(
                result, id="cmpl-" + call.record.event_ids[0], created=int(call.record.started),
                model=req.model, logprobs=req.logprobs is not None))

    @ctx.route("/v1/models", "GET")
    async def models(request: Request) -> Response:
        p = ctx.auth(request)
        data = [{"id": m, "object": "model", "created": int(gw.started_at), "owned_by": "molt"}
                for m in gw.router.models(p.tenant_id)]
        return json_response({"object": "list", "data": data})

    @ctx.route("/v1/models/{model_id:path}", "GET")
    async def model(request: Request) -> Response:
        model_id = request.path_params["model_id"]
        p = ctx.auth(request)
        if model_id not in gw.router.models(p.tenant_id):
            raise ModelNotFound(f"The model {model_id!r} does not exist here.", param="model")
        return json_response({"id": model_id, "object": "model", "created": int(gw.started_at), "owned_by": "molt"})

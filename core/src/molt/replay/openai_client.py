"""An OpenAI SDK client whose chat completions a replay's candidate policy answers, in process.

For agents written against ``openai.AsyncOpenAI``: ``model.openai()`` returns such a client over an
``httpx.ASGITransport``, so no port, no gateway and no network are involved, and every call goes
through the same :class:`~molt.replay.episode.ModelClient` (recorded in the run's trace).
"""

from __future__ import annotations

from typing import Any

import orjson

from molt.errors import ReplayError

__all__ = ["openai_client"]

_SAMPLING = ("temperature", "top_p", "max_tokens", "seed")


def openai_client(model_client: Any) -> Any:
    """``openai.AsyncOpenAI`` answering ``/v1/chat/completions`` with ``model_client.achat``."""
    try:
        import openai
    except ImportError as exc:
        err = ReplayError("ModelClient.openai() needs the openai package.")
        err.add_note("Install it with: pip install openai (or use model.chat / model.achat)")
        raise err from exc

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if not scope["path"].endswith("/chat/completions"):
            return await _json(send, 404, {"error": {"message": "Only chat completions are replayed.",
                                                     "type": "not_found"}})
        payload = orjson.loads(body)
        sampling = {k: payload[k] for k in _SAMPLING if payload.get(k) is not None}
        reply = await model_client.achat(payload["messages"], payload.get("tools"), **sampling)
        d = model_client.policy
        await _json(send, 200, {
            "id": "chatcmpl-replay", "object": "chat.completion", "created": 0, "model": payload.get("model", ""),
            "choices": [{"index": 0, "message": reply.message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            "system_fingerprint": d.version})

    # The OpenAI SDK 3.x ships its own httpx fork (httpx2); use whichever its client expects.
    import importlib

    try:
        hx: Any = importlib.import_module("httpx2")
    except ImportError:
        hx = importlib.import_module("httpx")
    http: Any = hx.AsyncClient(transport=hx.ASGITransport(app=app), base_url="http://replay")
    return openai.AsyncOpenAI(base_url="http://replay/v1", api_key="replay", http_client=http, max_retries=0)


async def _json(send: Any, status: int, obj: Any) -> None:
    body = orjson.dumps(obj)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

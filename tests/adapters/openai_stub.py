"""A scripted OpenAI-compatible chat-completions server on loopback (stdlib only).

Its answers depend only on the request, so concurrent runs share it: for a conversation that starts
"help <marker>" it first asks for ``lookup(query=<marker>)`` and ``explode(reason=<marker>)``; once it
has seen tool results it answers ``done: <marker>``. An agent whose instructions say "triage" first
hands off (calls the ``transfer_to_<agent>`` tool it was given). ``"stream": true`` gets SSE chunks.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "stub-model"


def _marker(messages: list[dict[str, Any]]) -> str:
    return _request(messages).split(" ")[0]


def _request(messages: list[dict[str, Any]]) -> str:
    """What the user asked help with ("alpha", or "alpha huge"): the words after "help" in the first
    user message that has them."""
    for m in messages:
        if m.get("role") == "user":
            content = m.get("content")
            text = (
                content
                if isinstance(content, str)
                else " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
            )
            found = re.search(r"\bhelp ([\w-]+)( huge)?", text)
            if found:
                return found.group(1) + (found.group(2) or "")
    return "unknown"


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message (OpenAI format) for a chat-completions request body."""
    messages = body.get("messages") or []
    marker = _marker(messages)
    system = " ".join(str(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    tools = [t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"]
    asked = [
        tc["function"]["name"] for m in messages if m.get("role") == "assistant" for tc in m.get("tool_calls") or []
    ]
    handoff = next((t for t in tools if t.startswith("transfer_to_")), None)
    if "triage" in system and handoff and not asked:
        calls = [(handoff, {})]
    elif "lookup" not in asked and "lookup" in tools:
        calls = [("lookup", {"query": _request(messages)}), ("explode", {"reason": marker})]
    else:
        return {"role": "assistant", "content": f"done: {marker}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call-{marker}-{len(asked) + i + 1}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for i, (n, a) in enumerate(calls)
        ],
    }


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        self.server.requests.append(body)  # type: ignore[attr-defined]
        msg = respond(body)
        finish = "tool_calls" if msg.get("tool_calls") else "stop"
        base = {
            "id": f"chatcmpl-{time.time_ns()}",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
        }
        if not body.get("stream"):
            data = json.dumps(
                {
                    **base,
                    "object": "chat.completion",
                    "usage": _usage(),
                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        chunk = {**base, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if msg.get("tool_calls"):
            deltas += [{"tool_calls": [{**tc, "index": i}]} for i, tc in enumerate(msg["tool_calls"])]
        else:
            words = str(msg["content"]).split(" ")
            deltas += [{"content": w + ("" if i == len(words) - 1 else " ")} for i, w in enumerate(words)]
        try:
            for d in deltas:
                self._sse({**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
            self._sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            self._sse({**chunk, "choices": [], "usage": _usage()})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _sse(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


@contextmanager
def stub_server() -> Iterator[Any]:
    """Serve on 127.0.0.1 (a free port); yields the server (``.url``, ``.requests``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, name="openai-stub", daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

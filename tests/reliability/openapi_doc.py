"""An OpenAPI 3.1 document of the gateway, and a schemathesis fuzz run against the in-process app.

The gateway serves no OpenAPI document (``openapi_url=None``; its handlers are plain Starlette routes
that read the body themselves), so this one is written here from the same sources: the OpenAI wire
format the gateway accepts, and the pydantic models of the feedback and admin bodies. It is deliberately
permissive where the gateway is strict (numbers without ranges, free strings), so that schemathesis's
positive *and* negative generation both reach the gateway's own validation.

:func:`fuzz_gateway` runs every operation with ``max_examples`` generated cases per generation mode and
counts the server errors (any 5xx) and the rejections that are not OpenAI-style error objects.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any

from pydantic.json_schema import models_json_schema

_NUM = {"type": "number"}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_STOP = {"oneOf": [_STR, {"type": "array", "items": _STR}, {"type": "null"}]}

_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool", "function"]},
        "content": {"oneOf": [_STR, {"type": "null"}, {"type": "array", "items": {
            "type": "object", "properties": {"type": {"enum": ["text", "image_url"]}, "text": _STR}}}]},
        "name": _STR,
        "tool_call_id": _STR,
        "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
            "id": _STR, "type": {"enum": ["function"]},
            "function": {"type": "object", "properties": {"name": _STR, "arguments": _STR}}}}},
    },
    "required": ["role"],
}
_TOOL = {"type": "object", "properties": {
    "type": {"enum": ["function"]},
    "function": {"type": "object", "properties": {"name": _STR, "description": _STR, "parameters": {"type": "object"}},
                 "required": ["name"]}}, "required": ["type", "function"]}

CHAT = {
    "type": "object",
    "properties": {
        "model": {"type": "string", "enum": ["stub", "nope"]},
        "messages": {"type": "array", "items": _MESSAGE, "maxItems": 6},
        "temperature": _NUM, "top_p": _NUM, "n": _INT, "max_tokens": _INT, "max_completion_tokens": _INT,
        "stream": _BOOL, "stop": _STOP, "seed": _INT, "user": _STR, "logprobs": _BOOL, "top_logprobs": _INT,
        "presence_penalty": _NUM, "frequency_penalty": _NUM,
        "tools": {"type": "array", "items": _TOOL, "maxItems": 3},
        "tool_choice": {"oneOf": [{"enum": ["none", "auto", "required"]}, {"type": "object"}]},
        "metadata": {"type": "object", "additionalProperties": _STR},
        "stream_options": {"type": "object", "properties": {"include_usage": _BOOL}},
    },
    "required": ["model", "messages"],
}
COMPLETION = {
    "type": "object",
    "properties": {
        "model": {"type": "string", "enum": ["stub", "nope"]},
        "prompt": {"oneOf": [_STR, {"type": "array", "items": _STR, "maxItems": 3},
                             {"type": "array", "items": _INT, "maxItems": 16},
                             {"type": "array", "items": {"type": "array", "items": _INT, "maxItems": 8},
                              "maxItems": 3}]},
        "max_tokens": _INT, "temperature": _NUM, "top_p": _NUM, "n": _INT, "stream": _BOOL, "logprobs": _INT,
        "echo": _BOOL, "stop": _STOP, "seed": _INT, "suffix": _STR, "user": _STR,
    },
    "required": ["model", "prompt"],
}

_ERROR = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "message": _STR, "type": _STR, "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}},
    "required": ["message", "type", "param", "code"]}}, "required": ["error"]}


def _body_schemas() -> dict[str, Any]:
    from molt.gateway.app import AdapterBody, VersionBody, WeightsBody
    from molt.gateway.feedback import CallReward, EndTrajectory, LastCallReward, TrajectoryReward

    models = [CallReward, TrajectoryReward, LastCallReward, EndTrajectory, AdapterBody, VersionBody, WeightsBody]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template="#/components/schemas/{model}")
    return dict(top.get("$defs", {}))


def _op(summary: str, body: dict[str, Any] | None = None, params: list[str] = (), body_required: bool = True
        ) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {
        "200": {"description": "OK"},
        "default": {"description": "An OpenAI-style error", "content": {"application/json": {"schema": _ERROR}}}}}
    if body is not None:
        op["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = [{"name": p, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
                            for p in params]
    return op


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def gateway_openapi() -> dict[str, Any]:
    """The OpenAPI document of every gateway endpoint (see :mod:`molt.gateway.app`)."""
    paths = {
        "/v1/chat/completions": {"post": _op("Chat completion", CHAT)},
        "/v1/completions": {"post": _op("Text completion", COMPLETION)},
        "/v1/models": {"get": _op("List models")},
        "/v1/models/{model_id}": {"get": _op("One model", params=["model_id"])},
        "/health": {"get": _op("Health")},
        "/metrics": {"get": _op("Prometheus metrics")},
        "/v1/molt/rewards/call": {"post": _op("Reward a call", _ref("CallReward"))},
        "/v1/molt/rewards/trajectory": {"post": _op("Reward a trajectory", _ref("TrajectoryReward"))},
        "/v1/molt/rewards/last-call": {"post": _op("Reward a session's last call", _ref("LastCallReward"))},
        "/v1/molt/trajectories/{trajectory_id}/end": {"post": _op("End a trajectory", _ref("EndTrajectory"),
                                                                   ["trajectory_id"], body_required=False)},
        "/v1/molt/sessions/{session_id}/end": {"post": _op("End a session", _ref("EndTrajectory"), ["session_id"],
                                                            body_required=False)},
        "/v1/molt/admin/routes": {"get": _op("Routing table")},
        "/v1/molt/admin/models/{model_name}/weights": {"put": _op("Canary weights", _ref("WeightsBody"),
                                                                  ["model_name"])},
        "/v1/molt/admin/versions": {"post": _op("Register a version", _ref("VersionBody"))},
        "/v1/molt/admin/versions/{version}": {"delete": _op("Remove a version", params=["version"])},
        "/v1/molt/admin/adapters": {"post": _op("Hot-load a LoRA adapter", _ref("AdapterBody"))},
        "/v1/molt/admin/health": {"post": _op("Check backends now")},
        "/v1/traces": {"post": _op("OTLP/HTTP trace export (JSON)", {"type": "object", "properties": {
            "resourceSpans": {"type": "array", "items": {"type": "object"}}}})},
    }
    return {"openapi": "3.1.0", "info": {"title": "Molt gateway", "version": "0.1.0"}, "paths": paths,
            "components": {"schemas": _body_schemas()}}


#: Keys of two tenants and every role (and the platform operator's), used by the auth matrix and the
#: gateway fixtures.
KEYS = {
    "sk-acme-admin": ("acme", "admin"),
    "sk-acme-trainer": ("acme", "trainer"),
    "sk-acme-reader": ("acme", "reader"),
    "sk-acme-writer": ("acme", "agent_writer"),
    "sk-globex-admin": ("globex", "admin"),
    "sk-globex-writer": ("globex", "agent_writer"),
    "sk-globex-reader": ("globex", "reader"),
    "sk-platform-operator": ("platform", "operator"),
}


#: The endpoint → permission table of :mod:`molt.gateway.app` (None: any valid key). The shared
#: serving configuration (the public model ``stub``, its base version, adapters) needs ``operate``.
ENDPOINTS: list[tuple[str, str, str | None]] = [
    ("POST", "/v1/chat/completions", "write"),
    ("POST", "/v1/completions", "write"),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/stub", None),
    ("GET", "/health", None),
    ("GET", "/metrics", "read"),
    ("POST", "/v1/molt/rewards/call", "write"),
    ("POST", "/v1/molt/rewards/trajectory", "write"),
    ("POST", "/v1/molt/rewards/last-call", "write"),
    ("POST", "/v1/molt/trajectories/{tid}/end", "write"),
    ("POST", "/v1/molt/sessions/s1/end", "write"),
    ("GET", "/v1/molt/admin/routes", "admin"),
    ("PUT", "/v1/molt/admin/models/stub/weights", "operate"),
    ("POST", "/v1/molt/admin/versions", "admin"),
    ("DELETE", "/v1/molt/admin/versions/stub@base", "operate"),
    ("POST", "/v1/molt/admin/adapters", "operate"),
    ("POST", "/v1/molt/admin/health", "admin"),
    ("POST", "/v1/traces", "write"),
]


@dataclass
class FuzzStats:
    """What a fuzz run saw."""

    cases: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)
    bad_errors: list[str] = field(default_factory=list)  # a 4xx that is not an OpenAI-style error object

    def add(self, other: FuzzStats) -> None:
        self.cases += other.cases
        for k, v in other.by_status.items():
            self.by_status[k] = self.by_status.get(k, 0) + v
        self.server_errors += other.server_errors
        self.bad_errors += other.bad_errors


def is_openai_error(body: Any) -> bool:
    """``{"error": {"message": str, "type": str, "param": str|None, "code": str|None}}``."""
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return False
    e = body["error"]
    return (isinstance(e.get("message"), str) and bool(e["message"]) and isinstance(e.get("type"), str)
            and "param" in e and "code" in e)


def is_otlp_status(body: Any) -> bool:
    """An OTLP/HTTP error: a ``google.rpc.Status`` as JSON, ``{"code": int, "message": str}`` — what the
    OTLP specification prescribes for ``/v1/traces``, and what OTLP exporters parse."""
    return isinstance(body, dict) and isinstance(body.get("code"), int) and isinstance(body.get("message"), str)


def is_clear_rejection(path: str, body: Any) -> bool:
    """An OpenAI-style error object (or, for the OTLP ingest route's body errors, an OTLP Status)."""
    return is_openai_error(body) or (path == "/v1/traces" and is_otlp_status(body))


#: Keys the fuzzer authenticates with (mostly the tenant admin, so requests reach validation).
FUZZ_KEYS = ["sk-acme-admin"] * 6 + ["sk-acme-writer", "sk-acme-reader", "sk-globex-writer", "sk-wrong", ""]


def fuzz_gateway(app: Any, max_examples: int = 20, seed: int = 0, modes: tuple[str, ...] = ("positive", "negative"),
                 deadline_s: float | None = None) -> FuzzStats:
    """Fuzz every operation of :func:`gateway_openapi` against ``app`` (ASGI, in process)."""
    import time

    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(gateway_openapi())
    schema.app = app
    rng = random.Random(seed)
    total = FuzzStats()
    start = time.monotonic()
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in modes:
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                return total
            stats = FuzzStats()  # the closure below reads this op's stats; run() is called before the next
            strategy = op.as_strategy(generation_mode=GenerationMode(mode))

            @hseed(rng.randrange(1 << 30))
            @settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def run(case: Any) -> None:
                key = rng.choice(FUZZ_KEYS)
                headers = {"authorization": f"Bearer {key}"} if key else {}
                with contextlib.suppress(Exception):
                    if case.headers:
                        headers = {**{k: str(v) for k, v in case.headers.items()}, **headers}
                resp = case.call(headers=headers)
                stats.cases += 1  # noqa: B023
                stats.by_status[resp.status_code] = stats.by_status.get(resp.status_code, 0) + 1  # noqa: B023
                label = f"{case.method} {case.formatted_path} -> {resp.status_code}"
                if resp.status_code >= 500:
                    stats.server_errors.append(  # noqa: B023
                        f"{label}: {resp.text[:300]} body={str(case.body)[:300]}")
                elif resp.status_code >= 400:
                    try:
                        body = resp.json()
                    except Exception:
                        body = None
                    if not is_clear_rejection(case.path, body):
                        stats.bad_errors.append(  # noqa: B023
                            f"{label}: {resp.text[:300]}")

            with contextlib.suppress(Unsatisfiable):  # nothing to negate (no parameters or body)
                run()
            total.add(stats)
    return total

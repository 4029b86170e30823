"""The gateway's published OpenAPI 3.1 document (``GET /openapi.json``): the feedback API's bodies from
the same pydantic models the handlers validate with, the model-call routes by reference to the OpenAI /
Anthropic wire formats they accept, and a curl example per feedback endpoint.

The handlers read their bodies themselves (FastAPI's generated document would show no bodies), so the
document is assembled here; ``tests/core/gateway/test_openapi.py`` checks that every feedback route is in
it and that each example, sent as written, is accepted.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from molt.gateway.feedback import CallReward, EndTrajectory, LastCallReward, TrajectoryReward

__all__ = ["CURL_EXAMPLES", "openapi_document"]

#: One curl example per feedback endpoint ($MOLT_URL, $MOLT_KEY and the ids come from your traffic: the
#: chat response's ``id`` or its ``X-Molt-Event-Id`` header, ``X-Molt-Trajectory``, ``X-Molt-Session``).
CURL_EXAMPLES: dict[str, str] = {
    "/v1/molt/rewards/call": (
        "curl -s $MOLT_URL/v1/molt/rewards/call -H \"Authorization: Bearer $MOLT_KEY\" "
        "-H 'content-type: application/json' -d '{\"call_id\": \"chatcmpl-…\", \"value\": 0, "
        "\"source\": \"user_correction\", \"reason\": \"The refund window is 45 days from delivery.\"}'"),
    "/v1/molt/rewards/trajectory": (
        "curl -s $MOLT_URL/v1/molt/rewards/trajectory -H \"Authorization: Bearer $MOLT_KEY\" "
        "-H 'content-type: application/json' -d '{\"trajectory_id\": \"…\", \"value\": 1, \"source\": \"verifier\"}'"),
    "/v1/molt/rewards/last-call": (
        "curl -s $MOLT_URL/v1/molt/rewards/last-call -H \"Authorization: Bearer $MOLT_KEY\" "
        "-H 'content-type: application/json' -d '{\"session_id\": \"…\", \"value\": 1, \"discount\": 0.9}'"),
    "/v1/molt/trajectories/{trajectory_id}/end": (
        "curl -s -X POST $MOLT_URL/v1/molt/trajectories/TRAJECTORY_ID/end -H \"Authorization: Bearer $MOLT_KEY\" "
        "-H 'content-type: application/json' -d '{\"status\": \"ok\", \"reward\": 1, \"source\": \"environment\"}'"),
    "/v1/molt/sessions/{session_id}/end": (
        "curl -s -X POST $MOLT_URL/v1/molt/sessions/SESSION_ID/end -H \"Authorization: Bearer $MOLT_KEY\""),
}

_FEEDBACK: list[tuple[str, str, type[Any] | None, str]] = [
    ("/v1/molt/rewards/call", "rewardCall", CallReward,
     "Reward one model call, named by the id the gateway returned (the response id or X-Molt-Event-Id)."),
    ("/v1/molt/rewards/trajectory", "rewardTrajectory", TrajectoryReward, "Reward a whole trajectory."),
    ("/v1/molt/rewards/last-call", "rewardLastCall", LastCallReward,
     "Reward the last model call of a session or trajectory; with discount γ each earlier call gets value·γ^k."),
    ("/v1/molt/trajectories/{trajectory_id}/end", "endTrajectory", EndTrajectory,
     "Close a trajectory (its outcome status, optionally a final reward); the session starts a new one."),
    ("/v1/molt/sessions/{session_id}/end", "endSession", EndTrajectory,
     "Close a session's current trajectory (same body as ending a trajectory; the body may be empty)."),
]

_ERROR = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "message": {"type": "string"}, "type": {"type": "string"}, "param": {"type": ["string", "null"]},
    "code": {"type": ["string", "null"]}}}}}
_ACCEPTED = {"type": "object", "properties": {
    "annotation_ids": {"type": "array", "items": {"type": "string"}}, "trajectory_id": {"type": "string"},
    "event_ids": {"type": "array", "items": {"type": ["string", "null"]}},
    "source": {"type": "string", "description": "The reward source recorded (the default applied when left out)."}}}


def openapi_document(*, title: str = "Molt gateway", version: str = "0.1.0") -> dict[str, Any]:
    """The OpenAPI 3.1 document ``GET /openapi.json`` serves."""
    models = sorted({m for _, _, m, _ in _FEEDBACK if m is not None}, key=lambda m: m.__name__)
    _, defs = models_json_schema([(m, "validation") for m in models], ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    auth = [{"bearer": []}]
    errors = {str(code): {"description": what, "content": {"application/json": {"schema": _ERROR}}}
              for code, what in ((400, "bad input (the message names the field)"), (401, "no or unknown API key"),
                                 (403, "the key's role may not write"), (404, "no such call / trajectory / session "
                                                                            "in the key's tenant"),
                                 (413, "body too large"), (429, "rate limited"))}
    paths: dict[str, Any] = {}
    for path, op_id, model, summary in _FEEDBACK:
        params = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                  for p in ("trajectory_id", "session_id") if "{" + p + "}" in path]
        op: dict[str, Any] = {
            "operationId": op_id, "summary": summary, "tags": ["feedback"], "security": auth,
            "responses": {"200": {"description": "recorded", "content": {"application/json": {"schema": _ACCEPTED}}},
                          **errors},
            "x-codeSamples": [{"lang": "curl", "source": CURL_EXAMPLES[path]}],
        }
        if params:
            op["parameters"] = params
        if model is not None:
            op["requestBody"] = {"required": not path.endswith("/end"), "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
        paths[path] = {"post": op}
    wire = {"type": "object", "description": "The OpenAI / Anthropic request body, as their APIs define it."}
    for path, op_id, what in (
            ("/v1/chat/completions", "chatCompletions", "OpenAI Chat Completions (X-Molt-Agent names the agent)"),
            ("/v1/responses", "responses", "OpenAI Responses"),
            ("/v1/messages", "messages", "Anthropic Messages")):
        paths[path] = {"post": {"operationId": op_id, "summary": what, "tags": ["models"], "security": auth,
                                "requestBody": {"required": True, "content": {"application/json": {"schema": wire}}},
                                "responses": {"200": {"description": "the model's answer, in the same API's format; "
                                                                     "X-Molt-Trajectory, X-Molt-Event-Id, "
                                                                     "X-Molt-Session and X-Molt-Policy-Version "
                                                                     "headers name the recorded call"},
                                              **errors}}}
    paths["/v1/models"] = {"get": {"operationId": "models", "summary": "The public model names", "tags": ["models"],
                                   "security": auth, "responses": {"200": {"description": "OpenAI model list"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": (
            "Molt's gateway: OpenAI- and Anthropic-compatible model calls, recorded and governed, and late "
            "feedback on them. Authenticate with 'Authorization: Bearer <tenant API key>' (an open loopback "
            "gateway needs none). Feedback: 'source' says who gives a reward — user_correction (the right "
            "answer in 'reason'; what the control plane learns from), user_feedback (a rating: the call's "
            "outcome), verifier, test_result, judge, human_label, environment; left out, a failing reward "
            "(value ≤ 0.5) with a reason is a user_correction and any other a user_feedback.")},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }

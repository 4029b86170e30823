"""Feedback routes: rewards for a call, a trajectory or a session's last call, and the end of a trajectory
or of a session's current trajectory (:mod:`molt.gateway.feedback` does the work); and ``/openapi.json``,
the published document of these bodies (:mod:`molt.gateway.openapi`)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from molt.gateway.feedback import CallReward, EndTrajectory, Feedback, LastCallReward, TrajectoryReward
from molt.gateway.routes.context import RouteContext, json_response
from molt.governance.access import Permission

__all__ = ["install"]


def install(ctx: RouteContext) -> None:
    feedback = Feedback(ctx.gateway)

    document: dict[str, Any] = {}

    @ctx.route("/openapi.json", "GET")
    async def openapi(request: Request) -> Response:
        # Documentation only: no key needed (it names no tenant and no data).
        if not document:
            from molt.gateway.openapi import openapi_document

            document.update(openapi_document())
        return json_response(document)

    @ctx.route("/v1/molt/rewards/call", "POST")
    async def reward_call(request: Request) -> Response:
        p = ctx.auth(request, Permission.WRITE)
        return json_response(feedback.reward_call(p, await ctx.read_model(request, CallReward)))

    @ctx.route("/v1/molt/rewards/trajectory", "POST")
    async def reward_trajectory(request: Request) -> Response:
        p = ctx.auth(request, Permission.WRITE)
        return json_response(feedback.reward_trajectory(p, await ctx.read_model(request, TrajectoryReward)))

    @ctx.route("/v1/molt/rewards/last-call", "POST")
    async def reward_last_call(request: Request) -> Response:
        p = ctx.auth(request, Permission.WRITE)
        return json_response(feedback.reward_last_call(p, await ctx.read_model(request, LastCallReward)))

    @ctx.route("/v1/molt/trajectories/{trajectory_id}/end", "POST")
    async def end_trajectory(request: Request) -> Response:
        trajectory_id = request.path_params["trajectory_id"]
        p = ctx.auth(request, Permission.WRITE)
        body = await ctx.read_model(request, EndTrajectory) if await request.body() else EndTrajectory()
        return json_response(feedback.end_trajectory(p, trajectory_id, body))

    @ctx.route("/v1/molt/sessions/{session_id}/end", "POST")
    async def end_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        p = ctx.auth(request, Permission.WRITE)
        body = await ctx.read_model(request, EndTrajectory) if await request.body() else EndTrajectory()
        return json_response(feedback.end_session(p, session_id, body))

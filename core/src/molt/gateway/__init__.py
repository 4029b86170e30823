"""The OpenAI-compatible gateway: token-level capture of every model call, session-affine routing
over backends and policy versions, the harness application point, feedback and admin endpoints."""

from molt.gateway.app import create_app, error_body
from molt.gateway.capture import CallRecord, CallRecorder, StreamAssembler
from molt.gateway.feedback import CallReward, EndTrajectory, Feedback, LastCallReward, TrajectoryReward
from molt.gateway.router import Decision, Generation, Router, RoutingTable, VersionSpec, choose, session_start
from molt.gateway.service import Call, Gateway, GatewayConfig
from molt.gateway.sessions import Sessions, TrajectoryState

__all__ = [
    "Call",
    "CallRecord",
    "CallRecorder",
    "CallReward",
    "Decision",
    "EndTrajectory",
    "Feedback",
    "Gateway",
    "GatewayConfig",
    "Generation",
    "LastCallReward",
    "Router",
    "RoutingTable",
    "Sessions",
    "StreamAssembler",
    "TrajectoryReward",
    "TrajectoryState",
    "VersionSpec",
    "choose",
    "create_app",
    "error_body",
    "session_start",
]

"""The OpenAI-compatible gateway: token-level capture of every model call, session-affine routing
over backends and policy versions, the harness application point, feedback and admin endpoints."""

from molt.gateway.app import create_app, error_body
from molt.gateway.call_record import CallRecord, CallRecorder, StreamAssembler
from molt.gateway.feedback import CallReward, EndTrajectory, Feedback, LastCallReward, TrajectoryReward
from molt.gateway.router import Route, Router, RoutingTable, TrafficSplit, VersionSpec, choose, session_start
from molt.gateway.service import Call, Gateway, GatewayConfig
from molt.gateway.sessions import Sessions, TrajectoryState

__all__ = [
    "Call",
    "CallRecord",
    "CallRecorder",
    "CallReward",
    "EndTrajectory",
    "Feedback",
    "Gateway",
    "GatewayConfig",
    "LastCallReward",
    "Route",
    "Router",
    "RoutingTable",
    "Sessions",
    "StreamAssembler",
    "TrafficSplit",
    "TrajectoryReward",
    "TrajectoryState",
    "VersionSpec",
    "choose",
    "create_app",
    "error_body",
    "session_start",
]

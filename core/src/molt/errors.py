"""Errors raised by molt-core.

Every error Molt raises derives from one root, so callers can catch ``MoltError`` and nothing else::

    MoltError
    ├── ProtocolError (ValueError)         an ATDP record is malformed
    │   ├── SchemaVersionError             a record names a schema version this build cannot read
    │   ├── EventValidationError           fields missing, of the wrong type, or inconsistent
    │   └── PayloadTooLarge                a serialized record exceeds the stated size cap
    ├── ChainError                         a trajectory's hash chain does not verify
    ├── StoreError                         the LanceDB store cannot be opened, read or written
    │   └── NotFound (KeyError)            an id that is not in the store
    ├── CaptureError                       the Recorder or its spool is unusable (never raised into
    │   │                                  agent code unless the Recorder runs in strict mode)
    │   └── SpoolInUse                     another Recorder holds the spool directory's lock
    ├── GovernanceError                    a governance stage failed
    │   ├── PolicyViolation                a record breaks a tenant's policy
    │   ├── AuthenticationError            no API key, or one that is not known (HTTP 401)
    │   ├── PermissionDenied (PermissionError)  the key's tenant or role may not do this (HTTP 403)
    │   └── LineageError                   an artifact's lineage does not hold: an adapter whose files
    │                                      differ from its manifest, or trained on another tenant's data
    ├── ReplayError                        a trajectory cannot be replayed
    ├── InterventionError                  a control-plane intervention cannot be applied
    ├── RegistryError (LookupError)        registry misuse: unknown or conflicting names
    └── AdapterError                       a framework adapter cannot be used

Errors that carry context (``trajectory_id``, ``event_id``) keep it as attributes and stay picklable,
so they survive being sent across processes.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdapterError",
    "AuthenticationError",
    "CaptureError",
    "ChainError",
    "EventValidationError",
    "GovernanceError",
    "InterventionError",
    "LineageError",
    "MoltError",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "PolicyViolation",
    "ProtocolError",
    "RegistryError",
    "ReplayError",
    "SchemaVersionError",
    "SpoolInUse",
    "StoreError",
]


class MoltError(Exception):
    """Root of every error raised by Molt.

    ``trajectory_id`` and ``event_id`` name the record the error is about, when there is one.
    """

    def __init__(self, message: str, *, trajectory_id: str | None = None, event_id: str | None = None):
        super().__init__(message)
        self.message = message
        self.trajectory_id = trajectory_id
        self.event_id = event_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.trajectory_id, self.event_id, self.__dict__))

    def __str__(self) -> str:
        where = []
        if self.trajectory_id:
            where.append(f"trajectory {self.trajectory_id}")
        if self.event_id:
            where.append(f"event {self.event_id}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


def _rebuild(cls: type[MoltError], message: str, tid: str | None, eid: str | None, state: dict[str, Any]) -> MoltError:
    err = cls.__new__(cls)
    MoltError.__init__(err, message, trajectory_id=tid, event_id=eid)
    err.__dict__.update(state)
    return err


class ProtocolError(MoltError, ValueError):
    """An ATDP record is malformed."""


class SchemaVersionError(ProtocolError):
    """A record names an ATDP schema version this build cannot read."""


class EventValidationError(ProtocolError):
    """A record's fields are missing, of the wrong type, or inconsistent with each other.

    ``errors`` holds pydantic's structured error list (``loc``, ``msg``, ``type``) when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        trajectory_id: str | None = None,
        event_id: str | None = None,
    ):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.errors = errors or []


class PayloadTooLarge(ProtocolError):
    """A serialized record is larger than the cap (``size`` and ``limit`` in bytes)."""

    def __init__(
        self,
        message: str,
        *,
        size: int = 0,
        limit: int = 0,
        trajectory_id: str | None = None,
        event_id: str | None = None,
    ):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.size = size
        self.limit = limit


class ChainError(MoltError):
    """A trajectory's hash chain does not verify (an edit, a deletion or a reordering)."""


class StoreError(MoltError):
    """The store cannot be opened, read or written."""


class NotFound(StoreError, KeyError):
    """An id that is not in the store."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return MoltError.__str__(self)


class CaptureError(MoltError):
    """The Recorder or its spool is unusable."""


class SpoolInUse(CaptureError):
    """Another Recorder (in this process or another) holds the spool directory's lock."""


class GovernanceError(MoltError):
    """A governance stage failed."""


class PolicyViolation(GovernanceError):
    """A record breaks a tenant's policy."""


class AuthenticationError(GovernanceError):
    """No API key was given, or the key is not known."""


class PermissionDenied(GovernanceError, PermissionError):
    """The caller's tenant or role may not perform the action."""


class LineageError(GovernanceError):
    """An artifact's lineage does not hold, so it is refused: an adapter directory whose files differ
    from its manifest, a manifest that was edited, or one that names trajectories of a tenant the
    adapter may not learn from. ``reason`` says which: ``"missing"``, ``"files"``, ``"tampered"``,
    ``"tenant"``."""

    def __init__(self, message: str, *, reason: str = "", trajectory_id: str | None = None,
                 event_id: str | None = None):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.reason = reason


class ReplayError(MoltError):
    """A trajectory cannot be replayed."""


class InterventionError(MoltError):
    """A control-plane intervention cannot be applied."""


class RegistryError(MoltError, LookupError):
    """Registry misuse: an unknown name, or one name registered twice for different objects."""


class AdapterError(MoltError):
    """A framework adapter cannot be used (missing framework, wrong version)."""


# ------------------------------------------------------------------------- backends and the gateway
#
#   MoltError
#   ├── BackendError                       a model backend failed (the gateway answers 502)
#   │   ├── BackendUnavailable             the backend is down or refused the connection (502)
#   │   ├── BackendTimeout (TimeoutError)  the backend did not answer in time (504)
#   │   └── BackendStreamError             the backend died in the middle of a streamed answer
#   └── GatewayError                       a request the gateway cannot serve (status in ``status``)
#       ├── InvalidRequest (ValueError)    malformed JSON, bad fields, invalid tool schemas (400)
#       │   └── UpstreamRejected           an upstream model API refused the request (its own 4xx and body)
#       ├── ModelNotFound (LookupError)    no model or policy version of that name (404)
#       └── RequestTooLarge                the body is over the gateway's size cap (413)


class BackendError(MoltError):
    """A model backend failed. ``backend`` names it; ``status`` is the HTTP status the gateway returns."""

    status = 502
    code = "backend_error"

    def __init__(self, message: str, *, backend: str | None = None, trajectory_id: str | None = None,
                 event_id: str | None = None):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.backend = backend


class BackendUnavailable(BackendError):
    """The backend is down, refused the connection, or answered with a server error."""

    code = "backend_unavailable"


class BackendTimeout(BackendError, TimeoutError):
    """The backend did not answer within the configured timeout."""

    status = 504
    code = "backend_timeout"


class BackendStreamError(BackendError):
    """The backend died in the middle of a streamed answer (the client gets an error chunk)."""

    code = "backend_stream_error"


class GatewayError(MoltError):
    """A request the gateway cannot serve; ``status`` is the HTTP status, ``param`` the offending field."""

    status = 400
    code = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, trajectory_id: str | None = None,
                 event_id: str | None = None):
        super().__init__(message, trajectory_id=trajectory_id, event_id=event_id)
        self.param = param


class InvalidRequest(GatewayError, ValueError):
    """Malformed JSON, a missing or mistyped field, or an invalid tool schema (HTTP 400)."""


class UpstreamRejected(InvalidRequest):
    """An upstream model API refused the request with a 4xx: ``status`` is its status, ``body`` its JSON
    error as it sent it, and ``api`` the wire format that body is in (``"openai"`` or ``"anthropic"``).
    A route speaking that same API relays the body as it is; any other route words it in its own shape."""

    code = "upstream_rejected"

    def __init__(self, message: str, *, status: int, body: Any = None, api: str = "openai"):
        super().__init__(message)
        self.status = status
        self.body = body
        self.api = api


class ModelNotFound(GatewayError, LookupError):
    """No model or policy version of that name is served here (HTTP 404)."""

    status = 404
    code = "model_not_found"


class RequestTooLarge(GatewayError):
    """The request body is larger than the gateway's cap (HTTP 413)."""

    status = 413
    code = "request_too_large"


class RateLimited(GatewayError):
    """A key sent more requests of a kind than the gateway takes per minute (HTTP 429)."""

    status = 429
    code = "rate_limit_exceeded"


__all__ += [
    "RateLimited",
    "BackendError",
    "BackendStreamError",
    "BackendTimeout",
    "BackendUnavailable",
    "GatewayError",
    "InvalidRequest",
    "ModelNotFound",
    "RequestTooLarge",
    "UpstreamRejected",
]

"""Parsing untrusted ATDP input with typed, readable errors and a size cap.

>>> from molt.atdp.validate import parse_event
>>> parse_event(b'{"trajectory_id": "t1", "kind": "user_message"}').kind.value
'user_message'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from molt.atdp.models import Event, RewardAnnotation, check_schema_version
from molt.errors import EventValidationError, PayloadTooLarge

__all__ = [
    "MAX_RECORD_BYTES",
    "check_size",
    "parse_event",
    "parse_reward",
]

#: The largest serialized event or annotation Molt accepts (1 MiB). Larger payloads belong in an
#: object store with a reference in the event; the capture adapters truncate before this.
MAX_RECORD_BYTES = 1 << 20

M = TypeVar("M", bound=BaseModel)


def check_size(encoded: bytes | str, *, limit: int = MAX_RECORD_BYTES, what: str = "record",
               trajectory_id: str | None = None, event_id: str | None = None) -> None:
    """Raise :class:`PayloadTooLarge` if ``encoded`` is longer than ``limit`` bytes."""
    size = len(encoded.encode() if isinstance(encoded, str) else encoded)
    if size > limit:
        raise PayloadTooLarge(
            f"The serialized {what} is {size:,} bytes, over the {limit:,}-byte cap; store large blobs "
            f"elsewhere and reference them, or truncate the payload.",
            size=size, limit=limit, trajectory_id=trajectory_id, event_id=event_id,
        )


def _load(data: bytes | str | Mapping[str, Any], what: str, limit: int) -> dict[str, Any]:
    if isinstance(data, bytes | bytearray | memoryview | str):
        check_size(bytes(data) if not isinstance(data, str) else data, limit=limit, what=what)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise EventValidationError(f"The {what} is not valid JSON: {exc}.") from None
    else:
        obj = data
    if not isinstance(obj, Mapping):
        raise EventValidationError(f"An ATDP {what} must be a JSON object, got {type(obj).__name__}.")
    return dict(obj)


def _validate(model: type[M], obj: dict[str, Any], what: str) -> M:
    check_schema_version(obj.get("schema_version", "1.0"))
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        first = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:3]
        )
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        tid = obj.get("trajectory_id") if isinstance(obj.get("trajectory_id"), str) else None
        eid = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
        raise EventValidationError(
            f"Invalid ATDP {what}: {first}{more}.", errors=[dict(e) for e in errors],
            trajectory_id=tid, event_id=eid,
        ) from None


def parse_event(data: bytes | str | Mapping[str, Any], *, limit: int = MAX_RECORD_BYTES) -> Event:
    """Parse and validate one event from JSON bytes/str or a mapping.

    Raises :class:`PayloadTooLarge`, :class:`SchemaVersionError` or :class:`EventValidationError`.
    """
    return _validate(Event, _load(data, "event", limit), "event")


def parse_reward(data: bytes | str | Mapping[str, Any], *, limit: int = MAX_RECORD_BYTES) -> RewardAnnotation:
    """Parse and validate one :class:`RewardAnnotation` (same errors as :func:`parse_event`)."""
    return _validate(RewardAnnotation, _load(data, "reward annotation", limit), "reward annotation")

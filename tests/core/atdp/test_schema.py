"""The published JSON Schema matches the models and validates real records."""

from __future__ import annotations

import jsonschema
import orjson

from molt.atdp import ATDP_VERSION, Event, EventKind, RewardAnnotation, ToolCall
from molt.atdp.schema import json_schema, published_schema, schema_bytes


def test_published_schema_is_current() -> None:
    """Troubleshooting: a model changed; run `molt schema -o core/src/molt/atdp/schema/atdp-1.0.json`
    (and bump ATDP_VERSION if the change is not backwards compatible)."""
    assert published_schema() == schema_bytes()


def test_schema_is_versioned_and_validates_records(event_factory) -> None:  # type: ignore[no-untyped-def]
    schema = json_schema()
    assert schema["version"] == ATDP_VERSION and ATDP_VERSION in schema["$id"]
    validator = jsonschema.Draft202012Validator(schema)
    for i in range(3):
        validator.validate(orjson.loads(event_factory("t", i).model_dump_json()))
    validator.validate(orjson.loads(RewardAnnotation(trajectory_id="t", value=1, source="judge").model_dump_json()))
    bad = orjson.loads(Event(trajectory_id="t", kind=EventKind.TOOL_CALL, action=ToolCall(tool_name="x"))
                       .model_dump_json())
    bad["kind"] = "teleport"
    assert not validator.is_valid(bad)

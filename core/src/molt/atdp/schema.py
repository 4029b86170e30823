"""The published, versioned JSON Schema of ATDP (events and reward annotations).

``molt schema`` writes it; ``schema/atdp-<version>.json`` in this package is the released copy, and a
test fails if the models drift from it without the file being regenerated.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import orjson
from pydantic.json_schema import models_json_schema

from molt.atdp.models import ATDP_VERSION, Event, RewardAnnotation

__all__ = ["json_schema", "published_schema", "schema_bytes"]

SCHEMA_ID = f"https://schemas.molt.dev/atdp/{ATDP_VERSION}/atdp.schema.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for ATDP records, generated from the pydantic models."""
    _, defs = models_json_schema(
        [(Event, "validation"), (RewardAnnotation, "validation")], ref_template="#/$defs/{model}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "ATDP — Agent Trajectory Data Protocol",
        "description": (
            "An ATDP record is either an Event ⟨observation, hidden, action, outcome, reward, metadata⟩ "
            "or a late RewardAnnotation that points at an event or a trajectory."
        ),
        "version": ATDP_VERSION,
        "oneOf": [{"$ref": "#/$defs/Event"}, {"$ref": "#/$defs/RewardAnnotation"}],
        "$defs": defs["$defs"],
    }


def schema_bytes() -> bytes:
    """The schema as stable, pretty-printed JSON bytes (what ``molt schema`` writes)."""
    return orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def published_schema() -> bytes:
    """The schema file shipped with this package for the current version."""
    return resources.files("molt.atdp").joinpath(f"schema/atdp-{ATDP_VERSION}.json").read_bytes()

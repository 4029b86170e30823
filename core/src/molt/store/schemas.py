"""Arrow schemas of the store's LanceDB tables.

Events keep the sealed record exactly as the Recorder hashed it (``envelope`` and ``payload`` bytes,
``payload_salt``, and ``chain`` = payload digest, previous hash and hash) plus denormalized columns to filter on
(tenant, time, kind, status, …); the denormalized columns are never trusted for verification.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "EVENTS",
    "MEMORIES",
    "POLICY_VERSIONS",
    "QUARANTINE",
    "REWARDS",
    "SKILLS",
    "TABLES",
]

_TS = pa.timestamp("us", tz="UTC")

EVENTS = pa.schema([
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("session_id", pa.string()),
    pa.field("parent_id", pa.string()),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("ts", _TS, nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("agent_id", pa.string()),
    pa.field("task", pa.string()),
    pa.field("status", pa.string()),
    pa.field("reward", pa.float64()),
    pa.field("policy_version", pa.string()),
    pa.field("classification", pa.string()),
    pa.field("subject_id", pa.string()),
    pa.field("envelope", pa.binary(), nullable=False),
    pa.field("payload", pa.binary()),
    pa.field("payload_salt", pa.binary()),
    # "<payload digest>:<prev hash>:<hash>" (3 × 64 hex): one column instead of three, because a read
    # by id pays per column taken from scattered rows.
    pa.field("chain", pa.string(), nullable=False),
    pa.field("ingested_at", _TS, nullable=False),
])

#: The columns of EVENTS that come from ``molt.capture.index_fields``.
INDEX_COLUMNS = (
    "event_id", "trajectory_id", "session_id", "parent_id", "seq", "kind", "name", "tenant_id",
    "agent_id", "task", "status", "reward", "policy_version", "classification", "subject_id",
)

REWARDS = pa.schema([
    pa.field("annotation_id", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("event_id", pa.string()),
    pa.field("value", pa.float64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("created_at", _TS, nullable=False),
    pa.field("record", pa.binary(), nullable=False),  # the annotation's canonical JSON
    pa.field("ingested_at", _TS, nullable=False),
])

QUARANTINE = pa.schema([
    pa.field("quarantine_id", pa.string(), nullable=False),
    pa.field("event_id", pa.string()),
    pa.field("trajectory_id", pa.string()),
    pa.field("tenant_id", pa.string()),
    pa.field("kind", pa.string()),
    pa.field("stage", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("ts", _TS, nullable=False),
    pa.field("record", pa.binary()),
])

# Memories and skill patches (molt.control.memory). Columns past the first placeholder set are
# nullable and at the end, so a store created before them gains them by schema evolution. The
# ``vector`` column (fixed-size float32 list of the embedder's dimension) is added by the memory
# store on first use, so the store does not fix an embedding model.
MEMORIES = pa.schema([
    pa.field("memory_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("scope", pa.string()),  # "agent" | "tenant"
    pa.field("text", pa.string(), nullable=False),  # redacted before it is stored
    pa.field("source_trajectory_id", pa.string()),
    pa.field("created_at", _TS, nullable=False),
    pa.field("expires_at", _TS),
    pa.field("agent_id", pa.string()),
    pa.field("embed_model", pa.string()),
])

SKILLS = pa.schema([
    pa.field("skill_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("trigger", pa.string(), nullable=False),  # when to use the skill
    pa.field("instructions", pa.string(), nullable=False),
    pa.field("created_at", _TS, nullable=False),
    pa.field("agent_id", pa.string()),
    pa.field("name", pa.string()),
    pa.field("source_trajectory_id", pa.string()),
    pa.field("match_text", pa.string()),  # name + trigger: what search matches (full-text and vector)
    pa.field("embed_model", pa.string()),
])

# Placeholder: molt.control.versions keeps policy versions in its own tables.
POLICY_VERSIONS = pa.schema([
    pa.field("version_id", pa.string(), nullable=False),
    pa.field("tenant_id", pa.string()),
    pa.field("agent_id", pa.string()),
    pa.field("parts", pa.binary(), nullable=False),  # canonical JSON of the part versions
    pa.field("created_at", _TS, nullable=False),
])

TABLES: dict[str, pa.Schema] = {
    "events": EVENTS,
    "rewards": REWARDS,
    "quarantine": QUARANTINE,
    "memories": MEMORIES,
    "skills": SKILLS,
    "policy_versions": POLICY_VERSIONS,
}

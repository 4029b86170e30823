"""Package ``__init__`` modules only re-export, with a sorted ``__all__`` that this test pins."""

from __future__ import annotations

import importlib

import pytest

PINNED = {
    "molt": ["MoltError", "__version__", "replayable"],
    "molt.capture": ["CaptureHook", "HookResult", "MemorySink", "Recorder", "RecorderStats", "SealedRow",
                     "Sink", "SinkBatch", "Spool", "SpoolPosition", "index_fields"],
    "molt.store": ["FOLLOWER_CACHES", "FOLLOWER_INDEX_CACHE_BYTES", "FOLLOWER_METADATA_CACHE_BYTES", "Store",
                    "Trajectory", "TrajectorySummary", "sql_str"],
    "molt.atdp": sorted([
        "ATDP_VERSION", "AgentStep", "ApprovalRequest", "BrowserAction", "ChainReport", "Classification",
        "Consent", "ErrorInfo", "Event", "EventKind", "FeedbackAction", "FileAction",
        "GENESIS", "Generation", "HiddenState", "MAX_RECORD_BYTES", "MemoryRead", "MemoryWrite",
        "Message", "Metadata", "Observation", "OtelSpan", "Outcome", "OutcomeStatus",
        "Passage", "Provenance", "RetrievalQuery", "RewardAnnotation", "RewardSource", "SealedEvent",
        "TokenTrace", "ToolCall", "ToolCallRequest", "Usage", "UserMessage", "event_to_span",
        "json_schema", "new_id", "parse_event", "parse_reward", "seal", "span_to_event", "unseal",
        "verify_chain",
    ]),
}


@pytest.mark.parametrize("module", sorted(PINNED))
def test_all_is_sorted_pinned_and_importable(module: str) -> None:
    """Troubleshooting: a public name was added or removed; update PINNED deliberately."""
    mod = importlib.import_module(module)
    assert list(mod.__all__) == sorted(mod.__all__)
    assert list(mod.__all__) == PINNED[module]
    for name in mod.__all__:
        assert hasattr(mod, name)


def test_errors_are_picklable_and_carry_context() -> None:
    import pickle

    from molt.errors import EventValidationError, NotFound, PayloadTooLarge

    for err in (PayloadTooLarge("big", size=10, limit=5, trajectory_id="t", event_id="e"),
                EventValidationError("bad", errors=[{"loc": ("kind",)}], trajectory_id="t"),
                NotFound("gone", trajectory_id="t")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.__dict__ == err.__dict__
    assert "trajectory t" in str(NotFound("gone", trajectory_id="t"))


def test_registry_rejects_conflicts_and_lists_known_names() -> None:
    from molt.errors import RegistryError
    from molt.registry import Registry

    r: Registry[object] = Registry("widget")
    a, b = object(), object()
    r.register("a", a)
    r.register("a", a)  # same object again is fine
    with pytest.raises(RegistryError, match="already registered"):
        r.register("a", b)
    with pytest.raises(RegistryError, match="registered widgets: a"):
        r.get("zzz")
    assert "a" in r and r.names() == ["a"] and len(r) == 1

"""Package ``__init__`` modules only re-export, with a sorted ``__all__`` that this test pins."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

PINNED = {
    "molt": ["MoltError", "__version__", "replayable"],
    "molt.capture": ["CaptureHook", "HookResult", "MemorySink", "Recorder", "RecorderStats", "SealedRow",
                     "Sink", "SinkBatch", "Spool", "SpoolPosition", "index_fields"],
    "molt.store": ["FOLLOWER_CACHES", "FOLLOWER_INDEX_CACHE_BYTES", "FOLLOWER_METADATA_CACHE_BYTES", "Filter",
                    "Store", "Trajectory", "TrajectorySummary"],
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


def test_recorder_takes_its_capture_hook_as_hook_and_the_old_name_with_a_deprecation(tmp_path: Path,
                                                                                     event_factory: Any) -> None:
    """Deliberate change: ``Recorder(pipeline=...)`` is ``Recorder(hook=...)`` (the parameter takes any
    CaptureHook, not only the governance pipeline); the old keyword and attribute still work, with a
    DeprecationWarning, and both names at once are refused."""
    from molt.capture import HookResult, MemorySink, Recorder

    class Tag:
        def __init__(self) -> None:
            self.seen = 0

        def process(self, event: Any) -> HookResult:
            self.seen += 1
            return HookResult.accept(event)

    hook = Tag()
    with Recorder(MemorySink(), spool_dir=tmp_path / "a", hook=hook) as rec:
        assert rec.hook is hook
        rec.record(event_factory("t1", 0))
        assert rec.flush(30, deliver=True)
    assert hook.seen == 1   # the hook ran on the writer thread before sealing
    with pytest.warns(DeprecationWarning, match="hook="):
        rec = Recorder(MemorySink(), spool_dir=tmp_path / "b", pipeline=hook)
    with rec:
        assert rec.hook is hook
        with pytest.warns(DeprecationWarning, match="Recorder.hook"):
            assert rec.pipeline is hook
    with pytest.raises(TypeError, match="not both"):
        Recorder(MemorySink(), spool_dir=tmp_path / "c", hook=hook, pipeline=None)


@pytest.mark.parametrize(("module", "old", "new"), [
    ("molt.gateway", "Decision", "Route"), ("molt.gateway.router", "Decision", "Route"),
    ("molt.gateway", "Generation", "TrafficSplit"), ("molt.gateway.router", "Generation", "TrafficSplit"),
    ("molt.backends", "Usage", "TokenCounts"), ("molt.backends.base", "Usage", "TokenCounts"),
    ("molt.replay", "Decision", "ReplayedCall"), ("molt.replay.policy", "Decision", "ReplayedCall"),
])
def test_former_names_are_gone_with_no_shim(module: str, old: str, new: str) -> None:
    """One name per idea: these names meant other ideas elsewhere (molt.governance.Decision, molt.atdp's
    Generation and Usage). With no external users yet, the old spellings are not kept as aliases."""
    mod = importlib.import_module(module)
    assert new in getattr(mod, "__all__", [new]) and hasattr(mod, new)
    with pytest.raises(AttributeError):
        getattr(mod, old)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("molt.renamed")

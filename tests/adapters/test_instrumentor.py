"""The adapter base class and the live-version applier, against a real version registry in a real store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from molt.atdp import EventKind, ToolCall
from molt.capture import MemorySink, Recorder
from molt.capture.instrumentor import Instrumentor
from molt.control.versions import AgentConfig, ModelPart, VersionRegistry
from molt.errors import AdapterError
from molt.harness import HarnessSpec, LiveVersion, ToolRewrite
from molt.store import Store

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look it up.",
                                           "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "user", "content": "When does the ferry leave?"}]



def _evolved(reg: VersionRegistry, memory: str = "The ferry leaves at 7:40.") -> Any:
    base = reg.ensure_base("acme", "ferry", AgentConfig(model=ModelPart(base="smollm2")))
    parts = base.parts.model_copy(update={"harness": HarnessSpec(memories=(memory,))})
    parts = parts.with_tools({"lookup": ToolRewrite(description="Look up timetables by port.", rename="timetable")})
    return base, reg.create("acme", "ferry", parts, parent=base.version_id, note="memory + tool")


class _Thing(Instrumentor):
    integration = "molt-thing"
    framework = "thing"
    framework_dist = "pytest"
    framework_min = "7.0"
    install = 'pip install "pytest>=7"'
    version_hook = "the test's request hook"


class _NoHook(_Thing):
    version_hook = None
    no_version_hook = "its framework only reports, it never lets a callback edit a request"


def test_live_version_follows_promote_and_rollback_without_restart(registry: VersionRegistry) -> None:
    base, v2 = _evolved(registry)
    live = LiveVersion(registry, "acme", "ferry", poll_s=30)  # a long poll: only the push can be this quick
    try:
        assert live.version_id == base.version_id
        assert live.apply(ASK, TOOLS).messages == ASK  # the base version carries no harness
        registry.promote(v2.version_id, actor="test")
        deadline = time.monotonic() + 10
        while live.version_id != v2.version_id and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live.version_id == v2.version_id
        applied = live.apply(ASK, TOOLS)
        assert "The ferry leaves at 7:40." in applied.messages[0]["content"]
        assert applied.tools[0]["function"]["name"] == "timetable" and applied.client_tool_name("timetable") == "lookup"
        assert ASK == [{"role": "user", "content": "When does the ferry leave?"}]  # the agent's request untouched
        registry.rollback("acme", "ferry", actor="test")
        deadline = time.monotonic() + 10
        while live.version_id != base.version_id and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live.version_id == base.version_id
    finally:
        live.close()


def test_poll_picks_up_a_change_made_by_another_process(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store") as store_a, Store.open(tmp_path / "store") as store_b:
        writer, reader = VersionRegistry(store_a), VersionRegistry(store_b)  # two handles: no shared listeners
        _, v2 = _evolved(writer)
        live = LiveVersion(reader, "acme", "ferry", poll_s=0.2)
        try:
            writer.promote(v2.version_id, actor="test")
            deadline = time.monotonic() + 15  # poll_s plus the store's read-consistency interval (1 s)
            while live.version_id != v2.version_id and time.monotonic() < deadline:
                time.sleep(0.1)
            assert live.version_id == v2.version_id
        finally:
            live.close()


class _Flaky:
    """A registry that stops answering (the store went away) after it has been read once."""

    def __init__(self, reg: VersionRegistry):
        self.reg, self.down = reg, False

    def live(self, tenant_id: str, agent_id: str) -> Any:
        if self.down:
            raise ConnectionError("store unreachable")
        return self.reg.live(tenant_id, agent_id)


def test_unreachable_registry_keeps_the_last_version(registry: VersionRegistry) -> None:
    _, v2 = _evolved(registry)
    registry.promote(v2.version_id, actor="test")
    source = _Flaky(registry)
    live = LiveVersion(source, "acme", "ferry", start=False)
    source.down = True
    assert live.refresh() is False and live.errors == 1 and "unreachable" in (live.last_error or "")
    assert live.version_id == v2.version_id
    assert "7:40" in live.apply(ASK, TOOLS).messages[0]["content"]


def test_unreachable_from_the_start_serves_the_agent_untouched() -> None:
    class Down:
        def live(self, tenant_id: str, agent_id: str) -> Any:
            raise OSError("no route to the store")

    live = LiveVersion(Down(), "acme", "ferry", start=False)
    applied = live.apply(ASK, TOOLS)
    assert live.version_id is None and applied.messages is ASK and applied.tools is TOOLS


def test_a_failing_applier_sends_the_request_untouched(registry: VersionRegistry) -> None:
    class Broken:
        def apply(self, messages: Any, tools: Any, version: Any) -> Any:
            raise RuntimeError("retrieval down")

    _evolved(registry)
    live = LiveVersion(registry, "acme", "ferry", applier=Broken(), start=False)
    applied = live.apply(ASK, TOOLS)
    assert applied.messages is ASK and applied.fingerprint is None and live.apply_errors == 1


def _recorded(tmp_path: Path, name: str = "spool") -> tuple[Recorder, MemorySink]:
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    return Recorder(sink, spool_dir=tmp_path / name, fsync="never", flush_interval_s=0.0, pipeline=None), sink


def test_instrumentor_stamps_the_applied_version_into_provenance(registry: VersionRegistry, tmp_path: Path) -> None:
    base, v2 = _evolved(registry)
    rec, sink = _recorded(tmp_path)
    thing = _Thing(rec, tenant_id="acme", agent_id="ferry", versions=registry, version_poll_s=30, strict=True)
    try:
        tid = thing.capture.new_trajectory()

        def tool_event(name: str) -> None:
            thing.capture.record(thing.capture.event(EventKind.TOOL_CALL, trajectory_id=tid, name=name,
                                                     action=ToolCall(tool_name=name)))

        thing.apply_version(ASK, TOOLS)
        thing.queue(tool_event, "first")
        registry.promote(v2.version_id, actor="test")
        deadline = time.monotonic() + 10
        while thing.version_id != v2.version_id and time.monotonic() < deadline:
            time.sleep(0.05)
        applied = thing.apply_version(ASK, TOOLS)
        thing.queue(tool_event, "second")
        assert thing.flush(deliver=True)
        events = {e.name: e for e in sink.trajectory_events(tid)}
        assert events["first"].provenance.policy_version == base.version_id
        assert events["second"].provenance.policy_version == v2.version_id
        assert events["second"].provenance.harness_fingerprint == applied.fingerprint is not None
        assert events["second"].provenance.integration == "molt-thing"
    finally:
        thing.close()
        rec.close(timeout=5)


def test_framework_range_is_checked_at_attach_with_an_install_hint(tmp_path: Path) -> None:
    class TooNew(_Thing):
        framework_below = "1.0"
        install = 'pip install "pytest<1"'

    with pytest.raises(AdapterError, match=r"molt-thing needs pytest>=7.0,<1.0, but found") as err:
        TooNew(_recorded(tmp_path)[0])
    assert any('pip install "pytest<1"' in n for n in err.value.__notes__)


def test_an_adapter_without_a_hook_refuses_versions_and_says_why(registry: VersionRegistry, tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="only reports, it never lets a callback edit a request"):
        _NoHook(_recorded(tmp_path)[0], tenant_id="acme", agent_id="ferry", versions=registry)
    with pytest.raises(AdapterError, match="needs tenant_id= and agent_id="):
        _Thing(_recorded(tmp_path, "other")[0], versions=registry)

"""The adapter conformance suite: one set of checks every Molt framework adapter passes.

An adapter's test module subclasses :class:`AdapterConformanceSuite` in about thirty lines: it names
the adapter and its framework, declares :class:`AdapterCapabilities`, and implements
:meth:`~AdapterConformanceSuite.make_capture` and
:meth:`~AdapterConformanceSuite.run_scripted_agent` (plus the async and streaming variants its
capabilities promise). Every ``test_*`` method below then runs against it::

    class TestMyFrameworkConformance(AdapterConformanceSuite):
        adapter = "molt-myfw"
        framework = "myfw"
        framework_dist = "myfw"
        capabilities = AdapterCapabilities(streaming=True, async_=True, approvals=False, retrieval=True)

        def make_capture(self, recorder, *, strict):
            return MoltHandler(recorder, strict=strict)

        def run_scripted_agent(self, handle, script):
            ...  # run the framework for real; attach ``handle`` unless it is None

**The scripted agent.** Every adapter drives the same story through its framework, with ``script.marker``
in the user's request and in every tool argument (so concurrent runs can be told apart):

1. a model call answers the request with two tool calls: ``lookup(query=<marker>)`` and
   ``explode(reason=<marker>)``;
2. ``lookup`` returns a text that contains the marker (about 2.5 MB of text and a base64 image when
   ``script.huge_output``); ``explode`` raises ``ValueError(<marker>)`` — the agent must go on,
   handing the error to the model as the tool's result;
3. when the adapter declares ``retrieval``, a retriever is queried with the marker and returns two
   passages;
4. when it declares ``approvals``, the run pauses for human approval and is resumed with ``"approve"``;
5. a last model call answers ``"done: <marker>"``, which ``run_scripted_agent`` returns.

``handle`` is what :meth:`make_capture` returned (the object a user attaches: a callback handler, a
tracing processor, a middleware), or ``None`` for a run without Molt. It must expose ``capture``, the
adapter's :class:`molt.capture.adapt.Capture`.

**Opting out.** A capability flag set to False skips the checks that need it. Skipping any other check
needs an explicit ``xfail`` with a reason — override the test and mark it::

    @pytest.mark.xfail(reason="the SDK does not report retries", strict=True)
    def test_ordering(self, standard_run):
        super().test_ordering(standard_run)

Each check's docstring ends with a "Troubleshooting:" line saying what usually breaks it.

One module at ~800 lines because it is one idea: the checks of one base class an adapter subclasses.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import pytest

from molt.atdp import (
    MAX_RECORD_BYTES,
    Event,
    EventKind,
    Generation,
    OutcomeStatus,
    RetrievalQuery,
    SealedEvent,
    ToolCall,
    parse_event,
    verify_chain,
)
from molt.capture import MemorySink, Recorder
from molt.capture.adapt import Capture, CaptureStats
from molt.capture.instrumentor import Instrumentor
from molt.harness import HarnessSpec
from molt.testing.network import block_network

__all__ = [
    "AdapterCapabilities",
    "AdapterConformanceSuite",
    "CapturedRun",
    "FAIL_TOOL",
    "HUGE_TEXT_CHARS",
    "OK_TOOL",
    "Script",
    "capture_run",
    "huge_blob",
]

#: The tool that succeeds and the tool that raises, in every scripted run.
OK_TOOL = "lookup"
FAIL_TOOL = "explode"
#: Size of the ``lookup`` output in a ``huge_output`` run (over the Recorder's 1 MiB record cap).
HUGE_TEXT_CHARS = 2_500_000

_TERMINAL = {
    OutcomeStatus.OK,
    OutcomeStatus.ERROR,
    OutcomeStatus.DENIED,
    OutcomeStatus.TIMEOUT,
    OutcomeStatus.CANCELLED,
    OutcomeStatus.INTERRUPTED,
}


def huge_blob() -> str:
    """A deterministic ~4 KB base64 data URI (a fake PNG) for ``huge_output`` runs."""
    import base64
    import hashlib

    raw = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(96))
    return "data:image/png;base64," + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class AdapterCapabilities:
    """What the adapter's framework lets it capture; a False flag skips the checks that need it.

    ``single_root``: each run is one causal tree (one root event); MCP sessions, say, have many roots.
    ``interventions``: the adapter applies the live policy version (``versions=``) at a framework hook.
    ``usage``: model calls report token usage. ``tool_call_ids``: tool events carry the id the
    model gave the call.
    """

    model_calls: bool = True
    tool_calls: bool = True
    streaming: bool = False
    async_: bool = False
    approvals: bool = False
    retrieval: bool = False
    usage: bool = True
    single_root: bool = True
    tool_call_ids: bool = True
    #: the adapter applies a live policy version at a framework hook (its ``Instrumentor.version_hook``);
    #: False when the framework offers none (its ``no_version_hook`` says why)
    interventions: bool = False


@dataclass(frozen=True)
class Script:
    """Parameters of one scripted run (see the module docstring for the story)."""

    marker: str = "alpha"
    huge_output: bool = False
    #: streaming runs: the consumer stops after this many chunks (None: it reads to the end)
    stop_after: int | None = None


@dataclass
class CapturedRun:
    """What one scripted run left in the sink."""

    result: Any
    events: dict[str, list[Event]]
    sealed: dict[str, list[SealedEvent]]
    quarantine: list[dict[str, Any]]
    stats: CaptureStats
    recorder_quarantined: int
    network: list[str] = field(default_factory=list)

    @property
    def all_events(self) -> list[Event]:
        """Every event of every trajectory."""
        return [e for evs in self.events.values() for e in evs]

    def of_kind(self, kind: EventKind) -> list[Event]:
        """The events of one kind, in trajectory then seq order."""
        return [e for e in self.all_events if e.kind == kind]

    def tool_events(self, name: str) -> list[Event]:
        """Tool-call events of the tool ``name``."""
        return [
            e
            for e in self.of_kind(EventKind.TOOL_CALL)
            if isinstance(e.action, ToolCall) and e.action.tool_name == name
        ]


def _dump(ev: Event) -> str:
    return ev.model_dump_json()


def capture_run(
    suite: AdapterConformanceSuite,
    tmp: Path,
    script: Script,
    *,
    mode: str = "sync",
    strict: bool = True,
    versions: Any = None,
) -> CapturedRun:
    """Run the scripted agent once with a fresh Recorder and MemorySink, and collect what it captured.

    ``mode`` is ``sync``, ``async`` or ``stream``. With ``versions`` (a version source) the handle is
    :meth:`~AdapterConformanceSuite.make_versioned_capture`'s. The run happens inside :func:`block_network`.
    """
    sink = MemorySink()
    # raw capture: what the adapter maps, value by value (governance would redact some of it)
    rec = Recorder(sink, spool_dir=tmp / "spool", fsync="never", flush_interval_s=0.0, hook=None)
    if versions is not None:
        handle = suite.make_versioned_capture(rec, versions=versions)
    else:
        handle = suite.make_capture(rec, strict=strict)
    try:
        with block_network() as attempts:
            if mode == "async":
                result = asyncio.run(suite.arun_scripted_agent(handle, script))
            elif mode == "stream":
                result = suite.run_scripted_stream(handle, script)
            else:
                result = suite.run_scripted_agent(handle, script)
            capture: Capture = handle.capture
            assert _flush(handle), "flush() timed out"
        return _collect(sink, rec, capture, result, attempts)
    finally:
        suite.detach(handle)
        if isinstance(_instrumentor(handle), Instrumentor):
            Instrumentor.close(_instrumentor(handle))  # stop following the live version
        rec.close(timeout=5)


def _instrumentor(handle: Any) -> Any:
    """The adapter object behind ``handle`` (a handle may wrap it as ``handle.instrumentor``)."""
    return getattr(handle, "instrumentor", handle)


def _flush(handle: Any) -> bool:
    """The handle's own ``flush`` when it has one (it may first drain the framework's own queue),
    else its capture's."""
    flush = getattr(handle, "flush", None) or handle.capture.flush
    return bool(flush(timeout=30, deliver=True))


def _collect(sink: MemorySink, rec: Recorder, capture: Capture, result: Any, attempts: list[str]) -> CapturedRun:
    rows = list(sink.events.values())
    tids = sorted({_index(r)["trajectory_id"] for r in rows})
    sealed: dict[str, list[SealedEvent]] = {}
    for r in rows:
        sealed.setdefault(_index(r)["trajectory_id"], []).append(_sealed(r))
    return CapturedRun(
        result=result,
        events={t: sink.trajectory_events(t) for t in tids},
        sealed=sealed,
        quarantine=list(sink.quarantine),
        stats=capture.stats,
        recorder_quarantined=rec.stats.quarantined,
        network=list(attempts),
    )


def _index(row: Any) -> dict[str, Any]:
    """The index columns of a sink row (a SealedRow, or the older dict form)."""
    return row.x if hasattr(row, "x") else row["x"]  # type: ignore[no-any-return]


def _sealed(row: Any) -> SealedEvent:
    if hasattr(row, "sealed"):
        return row.sealed()  # type: ignore[no-any-return]
    x = row["x"]
    return SealedEvent(
        event_id=x["event_id"],
        trajectory_id=x["trajectory_id"],
        seq=x["seq"],
        envelope=row["e"].encode(),
        payload=row["p"].encode() if row.get("p") else None,
        salt=bytes.fromhex(row["s"]) if row.get("s") else None,
        digest=row["d"],
        prev_hash=row["ph"],
        hash=row["h"],
    )


def _end(ev: Event) -> Any:
    return ev.timestamp + timedelta(milliseconds=ev.metadata.latency_ms or 0.0)


@dataclass(frozen=True)
class _Version:
    """What an adapter's applier reads of a policy version (a ``HarnessTarget``)."""

    version: str
    harness: HarnessSpec


_CONFORMANCE_VERSION = _Version("conformance@suite:v2", HarnessSpec(system_prompt="Answer as the suite asks."))


class _FixedVersions:
    """A version source that always answers ``version`` — or, given None, is unreachable."""

    def __init__(self, version: _Version | None):
        self.version, self.reads, self.failures = version, 0, 0

    def live(self, tenant_id: str, agent_id: str) -> _Version:
        if self.version is None:
            self.failures += 1
            raise ConnectionError("the version registry is unreachable (injected by the conformance suite)")
        self.reads += 1
        return self.version


class AdapterConformanceSuite:
    """Base class of every adapter's conformance tests (see the module docstring)."""

    #: the adapter's distribution (``provenance.integration``), e.g. ``molt-langchain``
    adapter: ClassVar[str]
    #: ``provenance.framework``, e.g. ``langchain``
    framework: ClassVar[str]
    #: the distribution whose installed version is ``provenance.framework_version``
    framework_dist: ClassVar[str]
    capabilities: ClassVar[AdapterCapabilities] = AdapterCapabilities()

    # ------------------------------------------------------------------ what an adapter provides

    def make_capture(self, recorder: Recorder, *, strict: bool) -> Any:
        """Build the object a user attaches (handler, processor, middleware) around ``recorder``."""
        raise NotImplementedError

    def make_versioned_capture(self, recorder: Recorder, *, versions: Any) -> Any:
        """Like :meth:`make_capture` (not strict), with ``versions=versions`` and a tenant and agent id
        (capability ``interventions``). :meth:`run_scripted_agent` must then route the agent through
        the adapter's hook (wrap its model, say) when ``handle.live`` is set."""
        raise NotImplementedError

    def run_scripted_agent(self, handle: Any, script: Script) -> Any:
        """Run the scripted agent with ``handle`` attached (``None``: without Molt); return its answer."""
        raise NotImplementedError

    async def arun_scripted_agent(self, handle: Any, script: Script) -> Any:
        """The async variant (capability ``async_``)."""
        raise NotImplementedError

    def run_scripted_stream(self, handle: Any, script: Script) -> Any:
        """Stream the scripted agent; the consumer stops after ``script.stop_after`` chunks and closes
        the stream (capability ``streaming``). Returns what the consumer got."""
        raise NotImplementedError

    def detach(self, handle: Any) -> None:
        """Undo a global registration :meth:`make_capture` made (tracing processors, hooks)."""

    def normalize_result(self, result: Any) -> Any:
        """The part of a run's result that must not change when Molt is attached (default: all)."""
        return result

    # ------------------------------------------------------------------ shared runs

    @pytest.fixture(scope="class")
    def standard_run(self, tmp_path_factory: pytest.TempPathFactory) -> CapturedRun:
        """One scripted run, shared by the read-only checks."""
        return capture_run(self, tmp_path_factory.mktemp("standard"), Script(marker="alpha"))

    def _skip_unless(self, flag: str) -> None:
        if not getattr(self.capabilities, flag):
            pytest.skip(f"{self.adapter} declares {flag}=False")

    # ------------------------------------------------------------------ checks

    def test_events_are_valid(self, standard_run: CapturedRun) -> None:
        """Every captured event is a valid ATDP event that survives a JSON round trip, under the record
        size cap, with nothing quarantined and no capture error or drop.

        Troubleshooting: a non-JSON value in a payload (pass it through ``capture.payload()``), an
        action whose type does not match the event kind, or an exception in the mapper (see
        ``capture.stats.last_error``).
        """
        run = standard_run
        assert run.all_events, "the scripted run captured no events"
        assert not run.quarantine and run.recorder_quarantined == 0, f"quarantined: {run.quarantine}"
        assert run.stats.errors == 0, f"capture errors: {run.stats.last_error}"
        assert run.stats.dropped == 0
        ids = [e.event_id for e in run.all_events]
        assert len(ids) == len(set(ids)), "event ids repeat"
        for ev in run.all_events:
            raw = _dump(ev)
            assert len(raw.encode()) <= MAX_RECORD_BYTES
            assert parse_event(raw) == ev
            if ev.kind != EventKind.HUMAN_APPROVAL:
                assert ev.action is not None, f"{ev.kind} event without an action"

    def test_expected_kinds(self, standard_run: CapturedRun) -> None:
        """The run yields the kinds its story implies: model calls (two, the first asking for both tools),
        tool calls, and, per capabilities, a retrieval and a human approval.

        Troubleshooting: a callback the adapter does not subscribe to, or a framework run type mapped to
        ``agent_step`` instead of its own kind.
        """
        run = standard_run
        caps = self.capabilities
        if caps.model_calls:
            gens = run.of_kind(EventKind.MODEL_CALL)
            assert len(gens) >= 2, f"expected at least two model calls, got {len(gens)}"
            asked = {tc.name for g in gens if isinstance(g.action, Generation) for tc in g.action.tool_calls or []}
            assert {OK_TOOL, FAIL_TOOL} <= asked, f"tool calls in generations: {asked}"
            assert any(isinstance(g.action, Generation) and g.action.text and "done" in g.action.text for g in gens), (
                "no generation carries the final answer text"
            )
            assert all(g.metadata.model for g in gens), "model calls must name their model"
        if caps.tool_calls:
            assert run.tool_events(OK_TOOL) and run.tool_events(FAIL_TOOL)
        if caps.retrieval:
            rets = run.of_kind(EventKind.RETRIEVAL)
            assert rets, "no retrieval event"
            assert any(isinstance(r.action, RetrievalQuery) and "alpha" in r.action.query for r in rets)
            assert any(r.observation and r.observation.passages for r in rets), "retrieval without passages"
        if caps.approvals:
            assert run.of_kind(EventKind.HUMAN_APPROVAL), "no human-approval event"

    def test_causal_tree(self, standard_run: CapturedRun) -> None:
        """Every ``parent_id`` names an event of the same trajectory, the parent links form a tree, and a
        run is one tree when the framework has a root (``single_root``).

        Troubleshooting: parents taken from "current span" state instead of the framework's run or span
        ids, or a child recorded under a parent that the adapter filtered out (hidden spans must pass
        their parent on).
        """
        for tid, evs in standard_run.events.items():
            by_id = {e.event_id: e for e in evs}
            roots = [e for e in evs if e.parent_id is None]
            assert roots, f"trajectory {tid} has no root"
            for e in evs:
                assert e.parent_id is None or e.parent_id in by_id, (
                    f"{e.kind} {e.name!r} names parent {e.parent_id}, not in trajectory {tid}"
                )
                seen, cur = set(), e
                while cur.parent_id is not None:
                    assert cur.event_id not in seen, "parent links form a cycle"
                    seen.add(cur.event_id)
                    cur = by_id[cur.parent_id]
            if self.capabilities.single_root:
                assert len(roots) == 1, f"{len(roots)} roots: {[(r.kind, r.name) for r in roots]}"
        if self.capabilities.model_calls and self.capabilities.tool_calls:
            for tool in standard_run.of_kind(EventKind.TOOL_CALL):
                parent = next((e for e in standard_run.all_events if e.event_id == tool.parent_id), None)
                assert parent is None or parent.kind != EventKind.TOOL_CALL or parent is tool, (
                    "a tool call's parent is another tool call: parents come from span state"
                )

    def test_one_run_one_trajectory(self, standard_run: CapturedRun) -> None:
        """One scripted run is one trajectory, even across a pause for approval and its resumption.

        Troubleshooting: a resumed run that starts a new trajectory (key pending approvals by the
        framework's thread or session id), or children whose parent was unknown when they started.
        """
        assert len(standard_run.events) == 1, f"{len(standard_run.events)} trajectories"

    def test_start_end_pairing(self, standard_run: CapturedRun) -> None:
        """Every started operation ends exactly once: each event has a terminal outcome and a latency,
        and no span is left open. Only an approval request may stay ``pending``.

        Troubleshooting: an end callback that is not handled (e.g. ``*_error``), a start recorded as its
        own event, or end callbacks matched by name instead of run id.
        """
        run = standard_run
        assert run.stats.open_spans == 0, f"{run.stats.open_spans} spans still open after the run"
        for ev in run.all_events:
            assert ev.outcome is not None, f"{ev.kind} {ev.name!r} has no outcome"
            if ev.kind == EventKind.HUMAN_APPROVAL and ev.outcome.status == OutcomeStatus.PENDING:
                continue
            assert ev.outcome.status in _TERMINAL, f"{ev.kind} {ev.name!r}: {ev.outcome.status}"
            assert ev.metadata.latency_ms is not None and ev.metadata.latency_ms >= 0

    def test_ordering(self, standard_run: CapturedRun) -> None:
        """``seq`` is gap-free and follows time: an operation that ended before another started has the
        lower ``seq``; a child starts no earlier than its parent; tools run after the generation that
        asked for them.

        Troubleshooting: events recorded at start and at end out of order, timestamps taken on the
        mapper thread instead of the agent thread, or a clock mix (use ``time.time_ns()`` for both).
        """
        slack = timedelta(microseconds=5)
        for evs in standard_run.events.values():
            by_id = {e.event_id: e for e in evs}
            assert [e.seq for e in evs] == list(range(len(evs)))
            for a in evs:
                for b in evs:
                    if _end(a) + slack < b.timestamp:
                        assert a.seq < b.seq, (  # type: ignore[operator]
                            f"{a.kind} {a.name!r} ended before {b.kind} {b.name!r} started, yet comes later"
                        )
                if a.parent_id is not None:
                    assert by_id[a.parent_id].timestamp <= a.timestamp + slack
        if self.capabilities.model_calls and self.capabilities.tool_calls:
            first_ask = min(
                e.seq
                for e in standard_run.of_kind(EventKind.MODEL_CALL)  # type: ignore[type-var]
                if isinstance(e.action, Generation) and e.action.tool_calls
            )
            for t in standard_run.of_kind(EventKind.TOOL_CALL):
                assert t.seq > first_ask  # type: ignore[operator]

    def test_errors_are_outcomes(self, standard_run: CapturedRun) -> None:
        """The failing tool is an event with ``outcome.status == "error"`` and the exception as data; the
        agent itself finished and returned its answer.

        Troubleshooting: the tool's error callback not handled, or the error mapped to the parent step
        only; the scripted agent must hand the tool error to the model, not raise.
        """
        self._skip_unless("tool_calls")
        run = standard_run
        assert "done" in str(run.result), f"the agent did not finish: {run.result!r}"
        [bad] = run.tool_events(FAIL_TOOL)
        assert bad.outcome is not None and bad.outcome.status == OutcomeStatus.ERROR
        assert bad.outcome.error is not None and "alpha" in bad.outcome.error.message
        for ok in run.tool_events(OK_TOOL):
            assert ok.outcome is not None and ok.outcome.status == OutcomeStatus.OK
            assert "alpha" in json.dumps(ok.outcome.output)

    def test_tool_calls_link_to_generation(self, standard_run: CapturedRun) -> None:
        """Tool events carry the arguments the model gave and, where the framework exposes it, the id of
        the model's tool call.

        Troubleshooting: arguments taken from a stringified input instead of the structured one, or
        the call id dropped.
        """
        self._skip_unless("tool_calls")
        run = standard_run
        asked = {
            tc.id
            for g in run.of_kind(EventKind.MODEL_CALL)
            if isinstance(g.action, Generation)
            for tc in g.action.tool_calls or []
        }
        for t in run.tool_events(OK_TOOL) + run.tool_events(FAIL_TOOL):
            assert isinstance(t.action, ToolCall)
            assert "alpha" in json.dumps(t.action.arguments), f"arguments: {t.action.arguments!r}"
            if self.capabilities.tool_call_ids and self.capabilities.model_calls:
                assert t.action.call_id and t.action.call_id in asked, (t.action.call_id, asked)

    def test_usage_and_model(self, standard_run: CapturedRun) -> None:
        """Model calls carry token usage and the model name.

        Troubleshooting: usage read from the wrong place (chunk vs. final message), or only reported
        when streaming.
        """
        self._skip_unless("model_calls")
        self._skip_unless("usage")
        gens = standard_run.of_kind(EventKind.MODEL_CALL)
        assert any(g.metadata.usage and g.metadata.usage.total_tokens for g in gens), "no usage"

    def test_provenance(self, standard_run: CapturedRun) -> None:
        """Every event names the framework and its installed version, and the adapter and its version.

        Troubleshooting: a hard-coded version string; read both from ``importlib.metadata``.
        """
        fw_version = metadata.version(self.framework_dist)
        ad_version = metadata.version(self.adapter)
        for ev in standard_run.all_events:
            p = ev.provenance
            assert (p.framework, p.framework_version) == (self.framework, fw_version)
            assert (p.integration, p.integration_version) == (self.adapter, ad_version)

    def test_hash_chain_verifies(self, standard_run: CapturedRun) -> None:
        """The stored records of each trajectory verify as one unbroken hash chain.

        Troubleshooting: events recorded with ``seq`` set by the adapter (let the Recorder assign it),
        or one trajectory id reused across runs.
        """
        assert standard_run.sealed
        for tid, recs in standard_run.sealed.items():
            report = verify_chain(tid, recs)
            assert report.ok, report.problems
            assert report.events == len(standard_run.events[tid])

    def test_no_network(self, standard_run: CapturedRun) -> None:
        """The run reached nothing but loopback (the suite blocks other connections and records them).

        Troubleshooting: the framework's own telemetry or tracing exporter still on (turn it off in the
        test), or a tokenizer or model download.
        """
        assert not standard_run.network, f"non-loopback network attempts: {standard_run.network}"

    def test_concurrent_runs_never_mix(self, tmp_path: Path) -> None:
        """Two runs on two threads through one handle give two trajectories, each with only its own
        run's content.

        Troubleshooting: per-handler "current run" state, or trajectory ids kept in a global instead of
        keyed by the root run id.
        """
        results: dict[str, Any] = {}
        errors: list[BaseException] = []
        sink = MemorySink()
        # raw capture: what the adapter maps, value by value (governance would redact some of it)
        rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, hook=None)
        handle = self.make_capture(rec, strict=True)
        barrier = threading.Barrier(2)

        def worker(marker: str) -> None:
            try:
                barrier.wait(5)
                results[marker] = self.run_scripted_agent(handle, Script(marker=marker))
            except BaseException as exc:
                errors.append(exc)

        try:
            threads = [threading.Thread(target=worker, args=(m,)) for m in ("alpha", "beta")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not errors, errors
            assert _flush(handle)
            run = _collect(sink, rec, handle.capture, results, [])
        finally:
            self.detach(handle)
            rec.close(timeout=5)
        self._assert_separate(run, ("alpha", "beta"))

    def test_async_concurrent_runs_never_mix(self, tmp_path: Path) -> None:
        """Two runs interleaved on one event loop give two separate trajectories, and the async path
        captures the same kinds as the sync one.

        Troubleshooting: state keyed by thread (both runs share one), or an async callback variant
        the adapter does not implement.
        """
        self._skip_unless("async_")
        sink = MemorySink()
        # raw capture: what the adapter maps, value by value (governance would redact some of it)
        rec = Recorder(sink, spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0, hook=None)
        handle = self.make_capture(rec, strict=True)

        async def both() -> list[Any]:
            return list(
                await asyncio.gather(
                    self.arun_scripted_agent(handle, Script(marker="alpha")),
                    self.arun_scripted_agent(handle, Script(marker="beta")),
                )
            )

        try:
            results = asyncio.run(both())
            assert _flush(handle)
            run = _collect(sink, rec, handle.capture, results, [])
        finally:
            self.detach(handle)
            rec.close(timeout=5)
        self._assert_separate(run, ("alpha", "beta"))
        if self.capabilities.tool_calls:
            assert len(run.tool_events(FAIL_TOOL)) == 2

    def _assert_separate(self, run: CapturedRun, markers: tuple[str, ...]) -> None:
        assert run.stats.errors == 0, run.stats.last_error
        assert len(run.events) == len(markers), f"{len(run.events)} trajectories for {len(markers)} runs"
        seen = []
        for tid, evs in run.events.items():
            text = " ".join(_dump(e) for e in evs)
            mine = [m for m in markers if m in text]
            assert len(mine) == 1, f"trajectory {tid} holds content of runs {mine}"
            seen.extend(mine)
            ids = {e.event_id for e in evs}
            assert all(e.parent_id is None or e.parent_id in ids for e in evs)
        assert sorted(seen) == sorted(markers)

    def test_raising_capture_never_breaks_agent(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the hand-off, the mapper and the Recorder all raising, the agent's result is what it is
        without Molt, and the errors are counted, not raised.

        Troubleshooting: a callback entry point without ``try/except`` around ``capture.submit`` (route
        the exception to ``capture.fail``), or a framework option that re-raises handler errors
        (LangChain's ``raise_error``).
        """
        script = Script(marker="alpha")
        baseline = self.normalize_result(self.run_scripted_agent(None, script))

        def boom(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError("molt capture failure injected by the conformance suite")

        for patch in (("submit",), ("event", "record")):
            sink = MemorySink()
            # raw capture: what the adapter maps, value by value (governance would redact some of it)
            rec = Recorder(sink, spool_dir=tmp_path / f"spool-{patch[0]}", fsync="never", hook=None)
            handle = self.make_capture(rec, strict=False)
            try:
                with monkeypatch.context() as m:
                    if "submit" in patch:
                        m.setattr(Capture, "submit", boom)
                    if "event" in patch:
                        m.setattr(Capture, "event", boom)
                        m.setattr(Recorder, "record", boom)
                    result = self.run_scripted_agent(handle, script)
                    _flush(handle)
                assert self.normalize_result(result) == baseline
                assert handle.capture.stats.errors > 0, f"errors with {patch} patched were not counted"
            finally:
                self.detach(handle)
                rec.close(timeout=5)

    def test_version_hook_is_declared(self, tmp_path: Path) -> None:
        """The handle is an :class:`~molt.capture.instrumentor.Instrumentor` (the base owns capture,
        queue, framework range and version applier); it names its version hook exactly when the
        adapter declares ``interventions``, and says why there is none otherwise.

        Troubleshooting: an adapter that builds its own ``Capture`` instead of subclassing
        ``Instrumentor``, or a capability table that disagrees with ``version_hook``.
        """
        rec = Recorder(MemorySink(), spool_dir=tmp_path / "spool", fsync="never", flush_interval_s=0.0)
        handle = self.make_capture(rec, strict=False)
        try:
            adapter = _instrumentor(handle)
            assert isinstance(adapter, Instrumentor), f"{type(adapter).__name__} does not subclass Instrumentor"
            hook = type(adapter).version_hook
            assert (hook is not None) == self.capabilities.interventions, (hook, self.capabilities.interventions)
            if hook is None:
                assert type(adapter).no_version_hook != Instrumentor.no_version_hook, "say why there is no hook"
            assert type(adapter).check_framework() == metadata.version(self.framework_dist)
        finally:
            self.detach(handle)
            rec.close(timeout=5)

    def test_live_version_is_stamped(self, tmp_path: Path) -> None:
        """With a live version, the agent's answer is what the scripted story gives, the adapter follows
        the version, and the events carry its id in ``provenance.policy_version``.

        Troubleshooting: ``apply_version`` not called at the hook (nothing is stamped), or the scripted
        run not routed through the hook when ``handle.live`` is set.
        """
        self._skip_unless("interventions")
        source = _FixedVersions(_CONFORMANCE_VERSION)
        script = Script(marker="alpha")
        baseline = self.normalize_result(self.run_scripted_agent(None, script))
        run = capture_run(self, tmp_path, script, versions=source)
        assert self.normalize_result(run.result) == baseline
        stamped = {e.provenance.policy_version for e in run.all_events}
        assert _CONFORMANCE_VERSION.version in stamped, f"no event carries the version; saw {stamped}"
        assert source.reads >= 1

    def test_unreachable_registry_never_breaks_agent(self, tmp_path: Path) -> None:
        """With a version registry that cannot be reached, the agent's answer is what it is without
        Molt, the failed reads are counted, and capture goes on.

        Troubleshooting: an exception from ``LiveVersion``'s source reaching the hook (apply must fail
        open), or ``versions=`` requiring a first successful read.
        """
        self._skip_unless("interventions")
        source = _FixedVersions(None)
        script = Script(marker="alpha")
        baseline = self.normalize_result(self.run_scripted_agent(None, script))
        run = capture_run(self, tmp_path, script, versions=source)
        assert self.normalize_result(run.result) == baseline
        assert source.failures >= 1 and run.all_events

    def test_streaming_stops_early_ends_events(self, tmp_path: Path) -> None:
        """A streamed run whose consumer stops after the first chunk still ends every operation it began
        (status ``cancelled`` or what the framework reports), leaving no open span.

        Troubleshooting: the adapter waits for an end callback the framework never sends when a
        generator is closed; close the subtree's open spans when its root ends or errors.
        """
        self._skip_unless("streaming")
        run = capture_run(self, tmp_path, Script(marker="alpha", stop_after=1), mode="stream")
        assert run.all_events, "the stopped stream captured nothing"
        assert run.stats.open_spans == 0, f"{run.stats.open_spans} spans left open"
        assert run.stats.errors == 0, run.stats.last_error
        for ev in run.all_events:
            assert ev.outcome is not None
            assert ev.outcome.status in _TERMINAL | {OutcomeStatus.PENDING}

    def test_huge_payloads_are_bounded(self, tmp_path: Path) -> None:
        """A tool output over the record cap is truncated structurally: the event is recorded (not
        quarantined), stays valid JSON under the cap, and says where it was cut; the base64 image is
        not stored inline.

        Troubleshooting: payloads put into events without ``capture.payload()``.
        """
        self._skip_unless("tool_calls")
        run = capture_run(self, tmp_path, Script(marker="alpha", huge_output=True))
        assert not run.quarantine and run.recorder_quarantined == 0, run.quarantine
        [ok] = run.tool_events(OK_TOOL)
        raw = _dump(ok)
        assert len(raw.encode()) < MAX_RECORD_BYTES
        assert "[molt: truncated" in raw or '"$molt"' in raw
        blob = huge_blob().split(",", 1)[1]
        assert blob[:200] not in "".join(_dump(e) for e in run.all_events), "base64 stored inline"

    def test_xfails_have_reasons(self) -> None:
        """Every check this adapter opts out of is marked ``xfail`` with a reason.

        Troubleshooting: use ``@pytest.mark.xfail(reason="…")`` on the overriding test, never a bare
        ``skip`` or an empty reason.
        """
        for name in dir(type(self)):
            if not name.startswith("test_"):
                continue
            for mark in getattr(getattr(type(self), name), "pytestmark", []):
                assert mark.name != "skip", f"{name} is skipped; mark it xfail(reason=...) instead"
                if mark.name == "xfail":
                    assert mark.kwargs.get("reason"), f"{name} is xfail without a reason"


def iter_checks() -> Iterator[str]:
    """Names of the standard checks (for documentation and the suite's own tests)."""
    return (n for n in dir(AdapterConformanceSuite) if n.startswith("test_"))

"""The base class of every framework adapter: what each adapter would otherwise repeat.

Like OpenTelemetry's ``BaseInstrumentor``, the base owns an integration's lifecycle and each adapter
declares only what differs — its names, the framework versions it supports, and where (if anywhere)
its framework lets it apply a policy version — and writes only its mapping:

- the common constructor arguments (``recorder``, ``tenant_id``, ``agent_id``, ``task``, ``tags``,
  ``max_field_bytes``, ``blob_store``, ``strict``) and the :class:`~molt.capture.adapt.Capture` built
  from them;
- the framework version range, checked when the adapter is attached, with a message that says how to
  install a supported version;
- :meth:`Instrumentor.queue`: hand a callback to the dispatcher thread, or count the failure — never
  raise into the agent;
- ``flush`` and ``stats``;
- the version applier: with ``versions=`` (a :class:`molt.control.versions.VersionRegistry` or any
  :class:`~molt.harness.VersionSource`), the adapter follows the live version of its tenant and agent
  (:class:`~molt.harness.LiveVersion`: polled every ``version_poll_s``, pushed at once by changes made
  in this process) and :meth:`Instrumentor.apply_version` applies it at the framework's hook with the
  gateway's harness code, stamping the version id and harness fingerprint into the provenance of the
  events that follow.

Version stamps go through the same queue as callbacks, so an event carries the version applied before
its callback was queued. A span open across a version change (a model call that started under v1 and
ended after v2 was applied to another request) carries the later one; changes are seconds apart.

Example (the shape of an adapter)::

    class MoltThing(Instrumentor):
        integration, framework = "molt-thing", "thing"
        framework_dist, framework_min, install = "thing", "2.0", 'pip install "thing>=2.0"'
        version_hook = "the request hook (system prompt, tools)"

        def __init__(self, recorder=None, **options):
            super().__init__(recorder, **options)
            self._mapper = ThingMapper(self.capture)

        def on_request(self, req):                       # agent thread
            applied = self.apply_version(req.messages, req.tools)
            self.queue(self._mapper.request, req, time.time_ns())
            return applied
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from molt.capture.adapt import BlobStore, Capture, CaptureStats, require_framework
from molt.errors import AdapterError
from molt.harness import DEFAULT_POLL_S, Applied, HarnessApplier, LiveVersion, VersionSource

__all__ = ["Instrumentor"]


class Instrumentor:
    """Base of the object a user attaches to a framework (handler, processor, middleware, hooks).

    Args:
        recorder: the :class:`molt.capture.Recorder` (default: the process default Recorder).
        tenant_id, agent_id, task, tags: metadata put on every event; ``tenant_id`` and ``agent_id``
            also name whose live version is applied.
        max_field_bytes: bound of each payload field (default 192 KiB).
        blob_store: where binary payloads are offloaded (default: dropped with a note).
        strict: raise capture errors from :meth:`flush` instead of only counting them (tests).
        versions: apply the live policy version of ``tenant_id``/``agent_id`` at the framework's hook:
            a :class:`molt.control.versions.VersionRegistry` (or any :class:`~molt.harness.VersionSource`),
            or a :class:`~molt.harness.LiveVersion` to share one follower between adapters.
        harness: how a version is applied (default :class:`~molt.harness.StaticHarness`; memories
            stored by id need :class:`molt.control.memory.RetrievalHarness`).
        version_poll_s: seconds between reads of the live version (default 5).
        capture: an existing :class:`Capture` to share (the other capture arguments are then unused).

    Raises :class:`~molt.errors.AdapterError` when the framework's installed version is outside the
    adapter's range, or ``versions`` is given to an adapter whose framework has no hook to apply it.
    """

    #: the adapter's distribution, recorded as ``provenance.integration`` (``molt-langchain``)
    integration: ClassVar[str]
    #: ``provenance.framework`` (``langchain``)
    framework: ClassVar[str]
    #: the framework's distribution, whose installed version is checked and recorded
    framework_dist: ClassVar[str]
    #: the oldest supported framework version
    framework_min: ClassVar[str]
    #: the first unsupported version (None: no upper bound known)
    framework_below: ClassVar[str | None] = None
    #: how to install a supported version (the hint of the error)
    install: ClassVar[str]
    #: where the adapter applies a live version (None: its framework offers no hook)
    version_hook: ClassVar[str | None] = None
    #: why there is no hook, when ``version_hook`` is None (said in the error and the capability table)
    no_version_hook: ClassVar[str] = "this adapter does not apply policy versions"

    def __init__(
        self,
        recorder: Any = None,
        *,
        tenant_id: str | None = None,
        agent_id: str | None = None,
        task: str | None = None,
        tags: dict[str, str] | None = None,
        max_field_bytes: int | None = None,
        blob_store: BlobStore | None = None,
        strict: bool = False,
        versions: VersionSource | LiveVersion | None = None,
        harness: HarnessApplier | None = None,
        version_poll_s: float = DEFAULT_POLL_S,
        capture: Capture | None = None,
    ):
        self.framework_version = self.check_framework()
        if capture is None:
            capture = Capture(
                recorder,
                integration=self.integration,
                framework=self.framework,
                framework_version=self.framework_version,
                tenant_id=tenant_id,
                agent_id=agent_id,
                task=task,
                tags=tags,
                max_field_bytes=max_field_bytes,
                blob_store=blob_store,
                strict=strict,
            )
        self.capture: Capture = capture
        self.live: LiveVersion | None = None
        self._owns_live = False
        self._stamped: tuple[str | None, str | None] = (None, None)
        self._stamp_lock = threading.Lock()
        if versions is not None:
            if self.version_hook is None:
                raise AdapterError(f"{self.integration} cannot apply policy versions: {self.no_version_hook}. "
                                   "Serve the agent's model through the Molt gateway (base URL) instead.")
            if isinstance(versions, LiveVersion):
                self.live = versions
            else:
                if not tenant_id or not agent_id:
                    raise AdapterError(f"{self.integration}: versions= needs tenant_id= and agent_id= (whose "
                                       "live version to apply).")
                self.live = LiveVersion(versions, tenant_id, agent_id, applier=harness, poll_s=version_poll_s)
                self._owns_live = True

    @classmethod
    def check_framework(cls) -> str:
        """The installed framework version; raises :class:`~molt.errors.AdapterError` (saying how to
        install a supported one) when it is missing or outside ``[framework_min, framework_below)``."""
        return require_framework(cls.integration, cls.framework_dist, cls.framework_min, cls.install,
                                 cls.framework_below)

    # ------------------------------------------------------------------ agent thread

    def queue(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the dispatcher thread; a failure to queue is counted, never raised."""
        try:
            self.capture.submit(fn, *args)
        except Exception as exc:
            self.capture.fail(exc)

    def apply_version(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Applied:
        """The live version applied to an OpenAI-style request (inputs untouched without ``versions=``,
        before the first version, or when applying fails). Events queued after this carry the
        version in ``provenance.policy_version`` and its ``harness_fingerprint``. Never raises."""
        if self.live is None:
            return Applied(messages, tools)
        applied = self.live.apply(messages, tools)
        stamp = (self.live.version_id, applied.fingerprint)
        if stamp != self._stamped:
            with self._stamp_lock:
                if stamp != self._stamped:
                    self._stamped = stamp
                    self.queue(self._stamp, stamp)
        return applied

    def _stamp(self, stamp: tuple[str | None, str | None]) -> None:  # dispatcher thread
        self.capture.stamp(policy_version=stamp[0], harness_fingerprint=stamp[1])

    def gateway_headers(self) -> dict[str, str]:
        """The headers a model client pointed at the Molt gateway sends so that the gateway's record of
        its calls and this adapter's events are one run of one tenant and one agent: ``X-Molt-Tenant``
        and ``X-Molt-Agent`` (``ChatOpenAI(..., default_headers=handler.gateway_headers())``). Record
        through :class:`molt.capture.handover.GatewayRecorder` to join the gateway's trajectory."""
        tenant, agent = self.capture.identity
        out = {}
        if tenant:
            out["X-Molt-Tenant"] = tenant
        if agent:
            out["X-Molt-Agent"] = agent
        return out

    @property
    def version_id(self) -> str | None:
        """The id of the version applied now (None without ``versions=`` or before the first)."""
        return self.live.version_id if self.live is not None else None

    # ------------------------------------------------------------------ both

    def flush(self, timeout: float | None = 10.0, *, deliver: bool = False) -> bool:
        """Wait until the events of every callback so far are durable (see :meth:`Capture.flush`)."""
        return self.capture.flush(timeout, deliver=deliver)

    @property
    def stats(self) -> CaptureStats:
        """Counters: events recorded, capture errors, spans still open."""
        return self.capture.stats

    def close(self) -> None:
        """Stop following the live version (a follower passed in as ``versions=`` is left running)."""
        if self.live is not None and self._owns_live:
            self.live.close()

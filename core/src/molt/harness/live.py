"""The live policy version of one agent, followed without a restart and applied where the agent runs.

The gateway applies a version to the requests that pass through it. An agent that calls its model
directly gets the same treatment from its framework adapter: the adapter holds a :class:`LiveVersion`
for its tenant and agent and calls :meth:`LiveVersion.apply` at the framework's hook (around the
model call, on ``tools/list``, …). ``apply`` runs the same :class:`~molt.harness.HarnessApplier` code
the gateway runs, on the cached version: no I/O on the agent's thread.

How a new version reaches the process (bounded staleness):

- **poll**: a daemon thread re-reads ``source.live(tenant, agent)`` every ``poll_s`` seconds (default
  5 s). A version promoted or rolled back by another process (``molt serve``'s control plane, the
  console, the CLI) is applied within ``poll_s`` plus the store's read-consistency interval (1 s by
  default for :class:`molt.store.Store`).
- **push**: when the source has a ``listeners`` list (as :class:`molt.control.versions.VersionRegistry`
  has), a change made through it in this process wakes the poller at once.

Fail open: when the source cannot be read (the store is unreachable, the registry raises) the last
version read keeps being applied, the failure is counted in :attr:`LiveVersion.errors` and logged at
most once a minute; when the applier raises, the request goes to the model untouched. Nothing here
raises into the agent after construction.

Example::

    live = LiveVersion(VersionRegistry(store), "acme", "support",
                       applier=RetrievalHarness(MemoryStore(store)))   # memories by id
    applied = live.apply(messages, tools)       # what to send to the model
    applied.client_tool_name("renamed_tool")    # the agent's own name for a renamed tool
    live.version_id                             # what to stamp into provenance
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol, runtime_checkable

from molt.harness.apply import Applied, HarnessApplier, HarnessTarget, StaticHarness

__all__ = ["DEFAULT_POLL_S", "LiveVersion", "VersionSource"]

log = logging.getLogger("molt.harness")

#: Seconds between two reads of the live version (the staleness bound, besides the store's own).
DEFAULT_POLL_S = 5.0


@runtime_checkable
class VersionSource(Protocol):
    """Where the live version is read: :class:`molt.control.versions.VersionRegistry`, or any object
    whose ``live(tenant_id, agent_id)`` returns a :class:`~molt.harness.HarnessTarget` (or None)."""

    def live(self, tenant_id: str, agent_id: str) -> Any: ...


class LiveVersion:
    """Follows the live version of ``tenant_id``/``agent_id`` in ``source`` and applies it.

    Args:
        source: a :class:`VersionSource`.
        tenant_id, agent_id: whose live version to follow.
        applier: how a version is applied (default :class:`~molt.harness.StaticHarness`: system
            prompt, the spec's own memories and skills, tool rewrites). Memories and skills stored by
            id (what the control plane inserts) need :class:`molt.control.memory.RetrievalHarness`.
        poll_s: seconds between reads (default :data:`DEFAULT_POLL_S`; > 0).
        start: start the polling thread (default True; False: call :meth:`refresh` yourself).

    The first read happens in the constructor, so the first request already gets the live version.
    """

    def __init__(self, source: VersionSource, tenant_id: str, agent_id: str, *,
                 applier: HarnessApplier | None = None, poll_s: float = DEFAULT_POLL_S, start: bool = True):
        if not callable(getattr(source, "live", None)):
            raise TypeError(f"A version source needs a live(tenant_id, agent_id) method; got {type(source).__name__}. "
                            "Pass a molt.control.versions.VersionRegistry.")
        if not tenant_id or not agent_id:
            raise ValueError("Applying the live version needs both tenant_id and agent_id (whose version to apply).")
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0 seconds; got {poll_s}.")
        self.source = source
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.applier: HarnessApplier = applier or StaticHarness()
        self.poll_s = poll_s
        self._current: HarnessTarget | None = None
        self._read_at: float | None = None
        #: Reads of the source that failed (the last version read kept serving).
        self.errors = 0
        #: Requests the applier failed on (they went to the model untouched).
        self.apply_errors = 0
        self.last_error: str | None = None
        self._last_log = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned_ids = False
        listeners = getattr(source, "listeners", None)
        if isinstance(listeners, list):
            listeners.append(self._changed)
        self.refresh()
        if start:
            self._thread = threading.Thread(target=self._run, name=f"molt-live-version-{agent_id}", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ reading

    @property
    def current(self) -> HarnessTarget | None:
        """The version applied now (None: none read yet, requests go untouched)."""
        return self._current

    @property
    def version_id(self) -> str | None:
        """The id of :attr:`current` (what adapters stamp into ``provenance.policy_version``)."""
        return self._current.version if self._current is not None else None

    @property
    def age_s(self) -> float | None:
        """Seconds since the source was last read successfully (None: never)."""
        return None if self._read_at is None else time.monotonic() - self._read_at

    def refresh(self) -> bool:
        """Read the live version now; False (and the last version kept) when the source failed."""
        try:
            v = self.source.live(self.tenant_id, self.agent_id)
        except Exception as exc:
            self._failed("reading the live version", exc)
            self.errors += 1
            return False
        if v is not None and not isinstance(v, HarnessTarget):
            self._failed("reading the live version", TypeError(f"{type(v).__name__} has no version/harness"))
            self.errors += 1
            return False
        if v is not None and v.version != self.version_id:
            log.info("Applying policy version %s to %s/%s.", v.version, self.tenant_id, self.agent_id)
            if (getattr(v, "memory_ids", None) or getattr(v, "skill_ids", None)) and isinstance(
                    self.applier, StaticHarness) and not self._warned_ids:
                self._warned_ids = True
                log.warning("Version %s has memories or skills stored by id, which StaticHarness does not "
                            "retrieve; pass applier=RetrievalHarness(MemoryStore(store)) to apply them.", v.version)
        self._current = v
        self._read_at = time.monotonic()
        return True

    def _changed(self, tenant_id: str, agent_id: str, action: str) -> None:
        if (tenant_id, agent_id) == (self.tenant_id, self.agent_id):
            self._wake.set()  # read on the poller, never on the writer's thread (it holds the registry lock)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.refresh()

    def close(self) -> None:
        """Stop polling (the last version read stays applied)."""
        self._stop.set()
        self._wake.set()
        listeners = getattr(self.source, "listeners", None)
        if isinstance(listeners, list) and self._changed in listeners:
            listeners.remove(self._changed)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------ applying

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Applied:
        """The current version applied to an OpenAI-style request (``messages``, ``tools``), by the
        same :class:`~molt.harness.HarnessApplier` code the gateway runs. Never raises: with no
        version, or when the applier fails, the inputs come back untouched (``fingerprint`` None)."""
        v = self._current
        if v is None:
            return Applied(messages, tools)
        try:
            return self.applier.apply(messages, tools, v)
        except Exception as exc:
            self.apply_errors += 1
            self._failed(f"applying version {v.version}", exc)
            return Applied(messages, tools)

    def _failed(self, what: str, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]
        now = time.monotonic()
        if now - self._last_log > 60.0:
            self._last_log = now
            log.warning("Molt: %s for %s/%s failed (the agent is unaffected; serving version %s): %s", what,
                        self.tenant_id, self.agent_id, self.version_id, self.last_error)


"""The governance pipeline: the hook the Recorder runs on its writer thread, before sealing.

::

    agent ── record(ev) ──▶ Recorder queue ──▶ writer thread:
                              GovernancePipeline.process(ev)
                                validate → authenticate → redact → classify → eligibility → retention
                              ├─ accepted: seal the (redacted) event + its Decision ──▶ spool ──▶ store
                              └─ rejected or a stage raised: quarantine with stage, reason and record

The agent's ``record()`` costs the same with or without governance (a deque append): every stage
runs on the writer thread. Nothing a stage does reaches the agent (fail open), and a record that
fails any stage is quarantined, never stored as an event nor trained on (fail closed). Quarantined
records keep the (redacted if possible) record, so nothing is lost.

A Recorder runs this pipeline by default (the built-in policy); it asks the pipeline where its
decisions go (:meth:`GovernancePipeline.sink_for`), so that one argument attaches both: given a store,
events and decisions are written together (:class:`~molt.governance.GovernedSink`). Example::

    from molt.capture import Recorder
    from molt.governance import GovernancePipeline
    from molt.store import Store

    store = Store.open("~/.molt/store")
    with Recorder(store) as rec:                      # the default policy
        rec.record(event)
    with Recorder(store, hook=GovernancePipeline.from_file("governance.yaml")) as rec:
        rec.record(event)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from molt.atdp.models import Event, RewardAnnotation
from molt.capture.hooks import HookResult
from molt.errors import GovernanceError, MoltError
from molt.governance.access import KeyRing, Permission, Principal
from molt.governance.envelope import EnvelopeIds
from molt.governance.policy import (
    ANONYMOUS_TENANT,
    GovernancePolicy,
    LimitSettings,
    TenantPolicy,
    load_policy_file,
)
from molt.governance.stages import Context, Reject, Stage, stages

__all__ = ["GovernancePipeline", "PipelineStats"]

log = logging.getLogger("molt.governance")


@dataclass
class PipelineStats:
    """Counters since the pipeline was built; ``busy_s`` is the time spent in :meth:`process`."""

    processed: int = 0
    accepted: int = 0
    eligible: int = 0
    redacted: int = 0
    quarantined: Counter[str] = field(default_factory=Counter)
    busy_s: float = 0.0

    @property
    def events_per_s(self) -> float:
        """Throughput of the pipeline on its own thread."""
        return self.processed / self.busy_s if self.busy_s else 0.0


class GovernancePipeline:
    """Runs the policy's stages on each event (a :class:`~molt.capture.CaptureHook`).

    Args:
        policy: the :class:`GovernancePolicy` (``None``: built-in defaults).
        keyring, api_key: authenticate the writer: its events are bound to the key's tenant. An
            unknown key does not raise here; every event is quarantined with the reason instead, so
            the agent keeps running and nothing is lost.
        principal: an already authenticated writer (instead of ``keyring`` + ``api_key``).
        error: a configuration error to report for every event (see :meth:`from_file`).
    """

    def __init__(self, policy: GovernancePolicy | None = None, *, keyring: KeyRing | None = None,
                 api_key: str | None = None, principal: Principal | None = None, error: str | None = None):
        self.policy = policy or GovernancePolicy()
        self.principal = principal
        self.auth_error: str | None = error
        if api_key is not None:
            if keyring is None:
                raise GovernanceError("An api_key needs a keyring to check it against; pass keyring=KeyRing…")
            try:
                self.principal = keyring.authenticate(api_key)
            except MoltError as exc:
                self.auth_error = f"the capture API key was rejected: {exc.message}"
                log.error("Molt governance: %s; every event will be quarantined.", self.auth_error)
        if self.principal is not None and not self.principal.can(Permission.WRITE):
            self.auth_error = (f"the capture API key has role {self.principal.role.value!r}, which may not write "
                               f"events; use an agent_writer or admin key")
        self.stages: list[Stage] = [stages.get(name)(self) for name in self.policy.pipeline]
        self.label = self.policy.label
        self.stats = PipelineStats()
        self._lock = threading.Lock()
        self._tenants: dict[str | None, TenantPolicy] = {}
        self._ids = EnvelopeIds()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None, *, strict: bool = True, **kwargs: Any
                  ) -> GovernancePipeline:
        """A pipeline from a policy file. With ``strict=False`` a malformed file does not raise: the
        error is logged and every event is quarantined with it (fail open for the agent, closed for
        training) until the file is fixed."""
        try:
            policy = load_policy_file(path)
        except GovernanceError as exc:
            if strict:
                raise
            log.error("Molt governance: %s Every event will be quarantined until it is fixed.", exc)
            return cls(GovernancePolicy(), error=f"the governance policy could not be loaded: {exc}", **kwargs)
        return cls(policy, **kwargs)

    def sink_for(self, sink: Any) -> Any:
        """Where the Recorder delivers, so that each event's decision is stored with it: a store is
        wrapped in a :class:`~molt.governance.GovernedSink` (its ``governance`` table); a sink that
        already stores decisions, another sink (which gets them as ``SealedRow.x["annotations"]``) or
        ``None`` (spool only) is returned as it is."""
        lance = sys.modules.get("molt.store.lance")  # not loaded: the sink is no store (LanceDB costs seconds)
        if lance is None or not isinstance(sink, lance.Store):
            return sink
        from molt.governance.sink import GovernedSink

        return GovernedSink(sink)

    def warm(self) -> None:
        """Load now what redaction loads on first use (the default tenant's redactor, its lexicons), so
        that the first events do not wait seconds for it; the Recorder calls this on its writer thread."""
        for stage in self.stages:
            build = getattr(stage, "redactor", None)
            tenant = self.tenant(ANONYMOUS_TENANT)
            if build is not None and tenant.redaction.enabled:
                build(tenant).redact("Warm-up: Jane Doe wrote from Paris to jane@example.com.")

    def tenant(self, tenant_id: str | None) -> TenantPolicy:
        """The merged settings of ``tenant_id`` (the defaults for a tenant the policy does not name)."""
        got = self._tenants.get(tenant_id)
        if got is None:
            got = self.policy.for_tenant(tenant_id if self.policy.knows(tenant_id) else None)
            self._tenants[tenant_id] = got
        return got

    # ------------------------------------------------------------------ client-chosen ids

    def _id_redactor(self, tenant_id: str | None) -> tuple[str, Any]:
        """The tenant ids are digested for (the writer's key's, else the anonymous one) and its
        redactor; ``None`` as the redactor where this pipeline or the tenant does not redact."""
        tenant = tenant_id or (self.principal.tenant_id if self.principal is not None else None) or ANONYMOUS_TENANT
        redact = next((s for s in self.stages if s.name == "redact"), None)
        policy = self.tenant(tenant)
        if redact is None or not policy.redaction.enabled:
            return tenant, None
        return tenant, redact.redactor(policy)  # type: ignore[attr-defined]

    def governed_id(self, tenant_id: str | None, value: str) -> str:
        """The id stored for a client's id ``value`` (:class:`~molt.governance.envelope.EnvelopeIds`):
        ``value`` when it is an identifier with nothing personal in it, else its keyed digest."""
        tenant, redactor = self._id_redactor(tenant_id)
        return value if redactor is None or not value else self._ids.governed(tenant, value, redactor)

    def govern_ids(self, event: Event) -> Event:
        """``event`` with the ids its client chose governed (the Recorder asks before it dedupes,
        chains or quarantines, so all of those see the stored ids). Never raises: an event whose ids
        cannot be governed is returned as it is, and the redact stage refuses it."""
        try:
            tenant, redactor = self._id_redactor(event.metadata.tenant_id)
            return event if redactor is None else self._ids.event(event, tenant, redactor)
        except Exception as exc:
            log.warning("Molt governance could not govern the ids of an event: %r", exc)
            return event

    def govern_annotation(self, annotation: RewardAnnotation) -> RewardAnnotation:
        """A late reward's ids governed as its events' are and its dimension names redacted."""
        tenant, redactor = self._id_redactor(annotation.tenant_id)
        return annotation if redactor is None else self._ids.reward(annotation, tenant, redactor)

    def limits_for(self, tenant_id: str | None) -> LimitSettings:
        """The size limits of ``tenant_id`` (the defaults when the tenant is unknown)."""
        return self.tenant(tenant_id).limits

    # ------------------------------------------------------------------ the hook

    def process(self, event: Event) -> HookResult:
        """Run every stage on ``event``; never raises."""
        t0 = time.perf_counter()
        ctx = Context(event=event, original=event, principal=self.principal, auth_error=self.auth_error,
                      classification_in=event.metadata.classification)
        stage_name = "pipeline"
        try:
            for stage in self.stages:
                stage_name = stage.name
                stage.run(ctx)
                ctx.ran.append(stage.name)
            result = HookResult.accept(ctx.event, self._annotations(ctx))
        except Reject as r:
            result = self._quarantine(ctx, r.stage, r.reason)
        except Exception as exc:  # a stage bug: fail closed, keep the record
            log.warning("Molt governance stage %r failed: %r", stage_name, exc)
            result = self._quarantine(ctx, stage_name, f"the {stage_name} stage failed: {type(exc).__name__}: {exc}")
        with self._lock:
            s = self.stats
            s.processed += 1
            s.busy_s += time.perf_counter() - t0
            if result.event is not None:
                s.accepted += 1
                s.eligible += ctx.eligible is True
                s.redacted += bool(ctx.redaction and ctx.redaction.counts)
            else:
                s.quarantined[result.stage or "pipeline"] += 1
        return result

    __call__ = process

    def _annotations(self, ctx: Context) -> dict[str, Any]:
        """The :class:`Decision` in its JSON form, built directly (this runs once per event)."""
        md = ctx.event.metadata
        ann: dict[str, Any] = {
            "policy": self.label, "stages": list(ctx.ran), "classification": md.classification.value,
            "classification_in": ctx.classification_in.value, "escalated_by": ctx.escalated_by,
            "reasons": ctx.reasons, "excluded_fields": ctx.excluded_fields,
            "decided_at": datetime.now(UTC).isoformat(),
        }
        optional = {"tenant_id": md.tenant_id, "eligible": ctx.eligible, "retention_class": ctx.retention_class,
                    "retention_days": ctx.retention_days,
                    "expires_at": ctx.expires_at.isoformat() if ctx.expires_at is not None else None,
                    "redaction": ctx.redaction.model_dump(mode="json") if ctx.redaction is not None else None}
        ann.update((k, v) for k, v in optional.items() if v is not None)
        return ann

    def _quarantine(self, ctx: Context, stage: str, reason: str) -> HookResult:
        """Quarantine with the most redacted form of the record that exists (nothing is lost)."""
        note = ""
        cap = self.limits_for(ctx.original.metadata.tenant_id).quarantine_record_bytes
        try:
            if ctx.redaction is not None:  # redaction ran (or is off for this tenant): keep its output
                record = ctx.event.model_dump_json().encode()
            else:
                record, note = self._record_before_redaction(ctx, stage, cap)
        except Exception:  # an unserializable value: the reason says what happened
            record, note = None, " [record could not be serialized]"
        if record is not None and len(record) > cap:
            note = f" [record of {len(record):,} bytes not kept: over quarantine_record_bytes={cap:,}]"
            record = None
        return HookResult.quarantine(stage, reason + note, record)

    def _record_before_redaction(self, ctx: Context, stage: str, cap: int) -> tuple[bytes | None, str]:
        """What a quarantine keeps of a record that redaction has not processed: redacted now by the
        tenant's redactor when the record failed an earlier stage (too large, unknown tenant); nothing
        when redaction itself failed or fails again, since unredacted data is never stored where this
        pipeline redacts; the record as it is only where the pipeline or the tenant does not redact."""
        raw = ctx.raw or ctx.original.model_dump_json().encode()
        redact = next((s for s in self.stages if s.name == "redact"), None)
        tenant = ctx.tenant or self.tenant(ctx.original.metadata.tenant_id)
        if redact is None or not tenant.redaction.enabled:
            return raw, " [record kept unredacted: this policy does not redact]"
        if len(raw) > cap:
            return None, f" [record of {len(raw):,} bytes not kept: over quarantine_record_bytes={cap:,}]"
        if stage != "redact":
            try:
                from molt.governance.envelope import redact_envelope, redact_names
                from molt.governance.redaction import redact_event

                redactor = redact.redactor(tenant)  # type: ignore[attr-defined]
                original = self._ids.event(ctx.original, ctx.original.metadata.tenant_id, redactor)
                redacted, _ = redact_event(redact_names(original, redactor), redactor=redactor)
                redacted, _ = redact_envelope(redacted, redactor)  # client-chosen ids too, as when stored
                return redacted.model_dump_json().encode(), " [record kept redacted]"
            except Exception:  # the redaction failure is not this record's reason; keep nothing
                pass
        return None, " [record not kept: it could not be redacted, and unredacted data is never stored]"

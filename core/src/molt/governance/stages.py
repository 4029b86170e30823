"""The pipeline's stages: validate → authenticate → redact → classify → eligibility → retention.

Each stage is a small object with a ``name`` and ``run(ctx)``; it reads and updates the
:class:`Context` (the event, possibly replaced by a redacted copy, and the decision being built) or
raises :class:`Reject` to quarantine the record. Stages are registered by name in :data:`stages`, so
a policy file lists the ones it runs and a replay can rebuild exactly what ran::

    @stages.register("no_weekend_data")
    class NoWeekend:
        name = "no_weekend_data"
        def __init__(self, pipeline): ...
        def run(self, ctx): ...

Any other exception a stage raises also quarantines the record (fail closed), with the stage named.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from molt.atdp.models import Classification, Event
from molt.errors import GovernanceError
from molt.governance.decision import RedactionSummary
from molt.governance.eligibility import event_reasons
from molt.governance.policy import ANONYMOUS_TENANT, TenantPolicy, UnknownTenants, classification_rank
from molt.governance.stage_registry import stages

if TYPE_CHECKING:
    from molt.governance.access import Principal
    from molt.governance.pipeline import GovernancePipeline

__all__ = ["Context", "Reject", "Stage", "stages"]

log = logging.getLogger("molt.governance")


class Reject(Exception):
    """Raised by a stage: quarantine the record at ``stage`` with ``reason``."""

    def __init__(self, stage: str, reason: str):
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


@dataclass
class Context:
    """One event on its way through the pipeline, and the decision being built for it."""

    event: Event
    original: Event
    principal: Principal | None = None
    auth_error: str | None = None
    tenant: TenantPolicy | None = None
    raw: bytes | None = None
    redacted_raw: bytes | None = None
    redaction: RedactionSummary | None = None
    classification_in: Classification = Classification.INTERNAL
    escalated_by: list[str] = field(default_factory=list)
    eligible: bool | None = None
    reasons: list[str] = field(default_factory=list)
    excluded_fields: list[str] = field(default_factory=list)
    retention_class: str | None = None
    retention_days: int | None = None
    expires_at: datetime | None = None
    ran: list[str] = field(default_factory=list)


class Stage(Protocol):
    """A pipeline stage (see the module docstring)."""

    name: str

    def run(self, ctx: Context) -> None:
        """Update ``ctx`` or raise :class:`Reject`."""
        ...




@stages.register("validate")
class Validate:
    """Re-validate the event (adapters may build events without validation) and enforce the size cap."""

    name = "validate"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline

    def run(self, ctx: Context) -> None:
        if not isinstance(ctx.event, Event):
            raise Reject(self.name, f"not an ATDP event: {type(ctx.event).__name__}")
        raw = ctx.event.model_dump_json().encode()  # also proves the payload serializes
        ctx.raw = raw
        limits = self.pipeline.limits_for(ctx.event.metadata.tenant_id)
        if len(raw) > limits.max_event_bytes:
            raise Reject(self.name, f"the event is {len(raw):,} bytes, over max_event_bytes="
                                    f"{limits.max_event_bytes:,}; it was kept here, not stored or trained on")
        if limits.revalidate:
            try:
                Event.model_validate_json(raw)
            except ValueError as exc:
                raise Reject(self.name, f"the event does not validate: {exc}") from None


@stages.register("authenticate")
class Authenticate:
    """Bind the event to a tenant: the pipeline's API key, or a tenant the policy accepts."""

    name = "authenticate"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline

    def run(self, ctx: Context) -> None:
        if ctx.auth_error is not None:
            raise Reject(self.name, ctx.auth_error)
        tenant = ctx.event.metadata.tenant_id
        if ctx.principal is not None:
            own = ctx.principal.tenant_id
            if tenant is None:  # stamp the key's tenant on events that name none
                md = ctx.event.metadata.model_copy(update={"tenant_id": own})
                ctx.event = ctx.event.model_copy(update={"metadata": md})
                tenant = own
            elif tenant != own:
                raise Reject(self.name, f"the event names tenant {tenant!r} but the API key belongs to tenant "
                                        f"{own!r}; a key may only write its own tenant's events")
        policy = self.pipeline.policy
        if not tenant and policy.unknown_tenants == UnknownTenants.USE_DEFAULTS:
            # An adapter on one machine (``Recorder(Store.open())``) names no tenant: its events are the
            # open gateway's tenant, governed by the defaults, rather than quarantined unread.
            md = ctx.event.metadata.model_copy(update={"tenant_id": ANONYMOUS_TENANT})
            ctx.event = ctx.event.model_copy(update={"metadata": md})
            tenant = ANONYMOUS_TENANT
        if not tenant:
            raise Reject(self.name, "the event names no tenant (metadata.tenant_id), the pipeline has no "
                                    "API key to take one from, and unknown_tenants is 'quarantine'")
        if not policy.knows(tenant) and policy.unknown_tenants == UnknownTenants.QUARANTINE:
            raise Reject(self.name, f"tenant {tenant!r} has no section in the governance policy and "
                                    f"unknown_tenants is 'quarantine'; add the tenant to the policy file")
        ctx.tenant = self.pipeline.tenant(tenant)


def _tenant(ctx: Context, pipeline: GovernancePipeline) -> TenantPolicy:
    if ctx.tenant is None:  # a pipeline without the authenticate stage
        ctx.tenant = pipeline.tenant(ctx.event.metadata.tenant_id)
    return ctx.tenant


@stages.register("redact")
class Redact:
    """Replace PII and secrets in every text-bearing payload field (``molt.governance.redaction``)."""

    name = "redact"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline
        self._redactors: dict[int, Any] = {}
        self._vocabularies: dict[tuple[int, str | None], Any] = {}

    def redactor(self, tenant: TenantPolicy) -> Any:
        """The tenant's redactor, built once."""
        key = id(tenant)
        r = self._redactors.get(key)
        if r is None:
            from molt.governance.redaction import redactors

            r = redactors.get(tenant.redaction.redactor)(tenant.redaction_policy)
            self._redactors[key] = r
        return r

    def vocabulary(self, tenant: TenantPolicy, tenant_id: str | None) -> Any:
        """The operator vocabulary of ``tenant_id`` (each tenant its own, also where several share
        the default policy), or None when its policy turns it off."""
        key = (id(tenant), tenant_id)
        if key not in self._vocabularies:
            from molt.governance.redaction.vocabulary import OperatorVocabulary

            after = tenant.redaction_policy.operator_vocabulary_after
            self._vocabularies[key] = OperatorVocabulary(after) if after else None
        return self._vocabularies[key]

    def run(self, ctx: Context) -> None:
        from molt.governance.envelope import redact_envelope, redact_names
        from molt.governance.redaction import redact_event

        tenant = _tenant(ctx, self.pipeline)
        if not tenant.redaction.enabled:
            ctx.redaction = RedactionSummary(enabled=False)
            return
        try:
            redactor = self.redactor(tenant)
            vocabulary = self.vocabulary(tenant, ctx.event.metadata.tenant_id)
            keep = vocabulary.keeps if vocabulary else None  # nothing shared yet: nothing to look up
            # the ids a client chose (the Recorder governs them before it chains; a caller of process()
            # alone, an import, gets them governed here), then the names and URLs read as identifiers
            event = self.pipeline.govern_ids(ctx.event)
            event, report = redact_event(redact_names(event, redactor), redactor=redactor, keep=keep)
            if vocabulary is not None:
                _observe_prompts(vocabulary, redactor, ctx.event)
            # the identifiers a client chose that the envelope stores (user → session, agent, task, tags)
            event, envelope = redact_envelope(event, redactor)
        except GovernanceError as exc:
            raise Reject(self.name, f"redaction failed, so the record cannot be stored: {exc.message}") from None
        except Exception as exc:
            raise Reject(self.name, f"redaction failed, so the record cannot be stored: "
                                    f"{type(exc).__name__}: {exc}") from None
        ctx.event = event
        counts = dict(report.counts)
        for s in envelope:
            counts[s.entity_type] = counts.get(s.entity_type, 0) + 1
        ctx.redaction = RedactionSummary(
            policy=report.policy, fingerprint=report.policy_fingerprint, counts=counts,
            fields=sorted({s.field for s in [*report.spans, *envelope]}),
            token_trace_dropped=report.token_trace_dropped)


def _observe_prompts(vocabulary: Any, redactor: Any, event: Event) -> None:
    """Show ``vocabulary`` the system prompts of ``event`` (the original, before redaction). It asks
    for what the redactor finds in a prompt only while the prompt still counts (and detection is
    memoised by text: the walker has just detected on the same prompt)."""
    obs = event.observation
    if obs is None or not obs.messages:
        return
    conversation = event.session_id or event.trajectory_id
    for m in obs.messages:
        if m.role not in ("system", "developer"):
            continue
        if isinstance(m.content, str):
            texts = [m.content]
        elif isinstance(m.content, list):
            texts = [t for p in m.content if isinstance(p, dict) and isinstance(t := p.get("text"), str)]
        else:
            continue
        for text in texts:
            if text and not text.isspace():
                vocabulary.observe(conversation, text, lambda t=text: [
                    (sp.entity_type, t[sp.start : sp.end]) for sp in redactor.detect_many([t])[0]])


@stages.register("classify")
class Classify:
    """Raise the event's classification to the tenant's floor and to what redaction found."""

    name = "classify"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline

    def run(self, ctx: Context) -> None:
        settings = _tenant(ctx, self.pipeline).classification
        current = ctx.event.metadata.classification
        level = max(classification_rank(current), classification_rank(settings.floor))
        if classification_rank(settings.floor) > classification_rank(current):
            ctx.escalated_by.append(f"floor:{settings.floor.value}")
        for etype in sorted(ctx.redaction.counts if ctx.redaction else {}):
            target = settings.escalate.get(etype)
            if target is not None and classification_rank(target) > classification_rank(current):
                ctx.escalated_by.append(etype)
                level = max(level, classification_rank(target))
        new = _LEVELS[level]
        if new != current:
            md = ctx.event.metadata.model_copy(update={"classification": new})
            ctx.event = ctx.event.model_copy(update={"metadata": md})


_LEVELS = [Classification.PUBLIC, Classification.INTERNAL, Classification.CONFIDENTIAL, Classification.RESTRICTED]


@stages.register("eligibility")
class Eligibility:
    """Decide whether the event may be trained on, with the reasons; note the fields to strip."""

    name = "eligibility"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline

    def run(self, ctx: Context) -> None:
        training = _tenant(ctx, self.pipeline).training
        types = ctx.redaction.counts if ctx.redaction else {}
        ctx.reasons = event_reasons(ctx.event, training, redacted_types=types)
        ctx.eligible = not ctx.reasons
        ctx.excluded_fields = list(training.exclude_fields)


@stages.register("retention")
class Retention:
    """Tag the event with its retention class, window and expiry."""

    name = "retention"

    def __init__(self, pipeline: GovernancePipeline):
        self.pipeline = pipeline

    def run(self, ctx: Context) -> None:
        settings = _tenant(ctx, self.pipeline).retention
        cls = ctx.event.metadata.classification
        days = settings.days[cls]
        label = cls.value
        consent = ctx.event.metadata.consent
        if settings.honor_consent_days and consent is not None and consent.retention_days is not None \
                and consent.retention_days < days:
            days, label = consent.retention_days, f"{cls.value}+consent"
        ctx.retention_class = label
        ctx.retention_days = days
        ctx.expires_at = ctx.event.timestamp + timedelta(days=days)

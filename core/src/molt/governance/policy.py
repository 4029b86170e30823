"""The declarative governance policy: one file, defaults plus per-tenant overrides.

A policy file (YAML, or TOML when it ends in ``.toml``) configures every stage of the pipeline for
every tenant. ``defaults`` applies to all tenants; a tenant's section overrides it key by key (nested
sections merge, lists replace)::

    version: 1
    pipeline: [validate, authenticate, redact, classify, eligibility, retention]
    unknown_tenants: quarantine          # or use_defaults
    defaults:
      redaction: {policy: default}       # a registered redaction policy, a file, or inline fields
      classification:
        floor: internal
        escalate: {PASSWORD: restricted, API_KEY: restricted, US_SSN: confidential}
      training:
        opt_in: false
        require_consent: true
        classifications: [public, internal]
        exclude_tools: ["shell*", "payments.*"]
        exclude_fields: [hidden.reasoning]
        quality: {min_events: 2, max_error_fraction: 0.5}
      retention:
        days: {public: 730, internal: 365, confidential: 90, restricted: 30}
      limits: {max_event_bytes: 1048576}
    tenants:
      acme:
        training: {opt_in: true, share_with: [globex]}
      globex:
        training: {opt_in: true, share_with: [acme]}
        redaction:
          policy: {mode: pseudonym, pseudonym_key_env: MOLT_PSEUDONYM_KEY}

:func:`load_policy_file` validates the whole file up front, every tenant merged with the defaults,
and raises :class:`~molt.errors.GovernanceError` naming the file and the offending field
(``policy.yaml: tenants.acme.training.opt_in: Input should be a valid boolean``).
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import hashlib
import os
import re
import tomllib
from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from molt.atdp.models import PAYLOAD_FIELDS, Classification, EventKind
from molt.errors import GovernanceError
from molt.governance.stage_registry import stages

__all__ = [
    "ANONYMOUS_TENANT",
    "BUILTIN_POLICY",
    "DEFAULT_STAGES",
    "ClassificationSettings",
    "GovernancePolicy",
    "LimitSettings",
    "QualityRules",
    "RedactionSettings",
    "RetentionSettings",
    "TenantPolicy",
    "TrainingSettings",
    "UnknownTenants",
    "classification_rank",
    "load_policy_file",
]

#: The tenant of an event that names none when no API key binds one and ``unknown_tenants`` is
#: ``use_defaults`` (an adapter's ``Recorder(Store.open())``): the open gateway's tenant too.
ANONYMOUS_TENANT = "default"

#: The name that stands for the built-in policy where a policy file is expected (``--governance``).
BUILTIN_POLICY = "default"

#: The stages a pipeline runs when the policy does not list its own, in order.
DEFAULT_STAGES: tuple[str, ...] = ("validate", "authenticate", "redact", "classify", "eligibility", "retention")

_SECTION = ConfigDict(extra="forbid", frozen=True)
_ORDER = [Classification.PUBLIC, Classification.INTERNAL, Classification.CONFIDENTIAL, Classification.RESTRICTED]


_RANK: dict[str, int] = {c.value: i for i, c in enumerate(_ORDER)}


def classification_rank(c: Classification | str) -> int:
    """0 for public … 3 for restricted."""
    return _RANK[c.value if isinstance(c, Classification) else c]


class UnknownTenants(StrEnum):
    """What the pipeline does with an event whose tenant has no section in the policy file."""

    QUARANTINE = "quarantine"
    USE_DEFAULTS = "use_defaults"


class RedactionSettings(BaseModel):
    """Redaction stage.

    - ``enabled`` — run redaction [true]. Turning it off is recorded in every decision.
    - ``policy`` — a registered redaction policy name (``default``, ``mask``), a path to a redaction
      policy file, or the policy's fields inline (see ``molt.governance.redaction.RedactionPolicy``)
      ["default"]. Inline, ``pseudonym_key_env: VAR`` derives the tenant's HMAC key from the master
      secret in ``$VAR`` instead of writing a key into the file.
    - ``redactor`` — the redactor factory, by its name in ``molt.governance.redaction.redactors``
      ["default"].
    """

    model_config = _SECTION

    enabled: bool = True
    policy: str | dict[str, Any] = "default"
    redactor: str = "default"

    @field_validator("redactor")
    @classmethod
    def _registered(cls, v: str) -> str:
        from molt.governance.redaction import redactors

        if v not in redactors:
            raise ValueError(f"unknown redactor {v!r}; registered redactors: {redactors.names()}")
        return v


class ClassificationSettings(BaseModel):
    """Classify stage: the event's declared classification, raised by what redaction found.

    - ``floor`` — no event is classified below this [public].
    - ``escalate`` — entity type → the classification an event reaches when redaction finds that type
      (the value was replaced, but its presence says the conversation is sensitive)
      [secrets → restricted; SSN, card, IBAN → confidential].
    """

    model_config = _SECTION

    floor: Classification = Classification.PUBLIC
    escalate: dict[str, Classification] = Field(default_factory=lambda: {
        "PASSWORD": Classification.RESTRICTED, "API_KEY": Classification.RESTRICTED,
        "PRIVATE_KEY": Classification.RESTRICTED, "US_SSN": Classification.CONFIDENTIAL,
        "CREDIT_CARD": Classification.CONFIDENTIAL, "IBAN_CODE": Classification.CONFIDENTIAL,
    })

    @field_validator("escalate")
    @classmethod
    def _known_types(cls, v: dict[str, Classification]) -> dict[str, Classification]:
        from molt.governance.redaction import EntityType

        unknown = sorted(set(v) - {e.value for e in EntityType})
        if unknown:
            raise ValueError(f"unknown entity types {unknown}; known: {sorted(e.value for e in EntityType)}")
        return v


class QualityRules(BaseModel):
    """Minimum-quality rules a trajectory must meet to be trained on (checked at read time, when late
    rewards are in).

    - ``min_events`` — at least this many events, 1–10^6 [1].
    - ``max_events`` — at most this many, or none [None].
    - ``require_reward`` — an inline or late reward must exist [false].
    - ``min_total_reward`` — total reward at least this, or none [None].
    - ``max_error_fraction`` — at most this fraction of events ended in error, 0–1 [1.0].
    - ``require_chain_ok`` — the hash chain must verify (tampered data is never trained on) [true].
    """

    model_config = _SECTION

    min_events: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    max_events: Annotated[int, Field(ge=1)] | None = None
    require_reward: bool = False
    min_total_reward: float | None = None
    max_error_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    require_chain_ok: bool = True

    @model_validator(mode="after")
    def _bounds(self) -> QualityRules:
        if self.max_events is not None and self.max_events < self.min_events:
            raise ValueError(f"max_events ({self.max_events}) is below min_events ({self.min_events})")
        return self


class TrainingSettings(BaseModel):
    """Eligibility stage and the training queue.

    - ``opt_in`` — the tenant allows training on its data at all [false].
    - ``require_consent`` — an event needs ``metadata.consent.training = true``; when false, only an
      explicit ``false`` excludes it [true].
    - ``classifications`` — classifications that may be trained on [public, internal].
    - ``exclude_kinds`` — event kinds never trained on [[]].
    - ``exclude_tools`` — tool-name patterns (fnmatch) whose calls are never trained on [[]].
    - ``exclude_fields`` — payload paths stripped from what the trainer reads, e.g. ``hidden``,
      ``hidden.reasoning``, ``outcome.output`` (lists are mapped over) [[]].
    - ``exclude_if_redacted`` — entity types whose presence makes an event ineligible even after
      redaction [[]].
    - ``share_with`` — tenants whose trainers may use this tenant's data; cross-tenant training needs
      both tenants to list each other [[]].
    - ``quality`` — :class:`QualityRules`.
    """

    model_config = _SECTION

    opt_in: bool = False
    require_consent: bool = True
    classifications: frozenset[Classification] = frozenset({Classification.PUBLIC, Classification.INTERNAL})
    exclude_kinds: frozenset[EventKind] = frozenset()
    exclude_tools: tuple[str, ...] = ()
    exclude_fields: tuple[str, ...] = ()
    exclude_if_redacted: frozenset[str] = frozenset()
    share_with: frozenset[str] = frozenset()
    quality: QualityRules = QualityRules()

    @field_validator("exclude_fields")
    @classmethod
    def _payload_paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for path in v:
            head = path.split(".", 1)[0]
            if head not in PAYLOAD_FIELDS or not all(path.split(".")):
                raise ValueError(f"{path!r} is not a payload path; paths start with one of {list(PAYLOAD_FIELDS)}")
        return v

    def tool_excluded(self, name: str) -> bool:
        """Whether ``name`` matches an ``exclude_tools`` pattern."""
        return bool(self.exclude_tools) and _patterns(self.exclude_tools).match(name) is not None


@functools.lru_cache(maxsize=256)
def _patterns(globs: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in globs))


class RetentionSettings(BaseModel):
    """Retention stage and ``molt retention run``.

    - ``days`` — retention window per classification, in days (0 = drop the payload at the next run)
      [public 730, internal 365, confidential 90, restricted 30].
    - ``honor_consent_days`` — a shorter ``metadata.consent.retention_days`` wins [true].
    - ``quarantine_days`` — quarantined records are deleted after this many days [30].
    - ``action`` — what expiry does to an event: ``null_payload`` keeps the sealed envelope so the
      hash chain still verifies; ``delete`` removes the row [null_payload].
    """

    model_config = _SECTION

    days: dict[Classification, Annotated[int, Field(ge=0, le=36_500)]] = Field(default_factory=lambda: {
        Classification.PUBLIC: 730, Classification.INTERNAL: 365,
        Classification.CONFIDENTIAL: 90, Classification.RESTRICTED: 30,
    })
    honor_consent_days: bool = True
    quarantine_days: Annotated[int, Field(ge=0, le=36_500)] = 30
    action: Literal["null_payload", "delete"] = "null_payload"

    @field_validator("days")
    @classmethod
    def _every_class(cls, v: dict[Classification, int]) -> dict[Classification, int]:
        missing = [c.value for c in _ORDER if c not in v]
        if missing:
            raise ValueError(f"no retention window for {missing}; give days for every classification")
        return v

    def window(self, classification: Classification | str) -> timedelta:
        """The retention window of a classification."""
        return timedelta(days=self.days[Classification(classification)])


class LimitSettings(BaseModel):
    """Validate stage.

    - ``max_event_bytes`` — an event whose JSON is larger is quarantined, 1 KiB – 16 MiB [1 MiB].
    - ``quarantine_record_bytes`` — the largest record a quarantine entry keeps, 0 – 8 MiB [4 MiB].
    - ``revalidate`` — validate every event against the ATDP model again (for adapters that build events
      with ``model_construct``, skipping validation); costs ~100 µs per 1 KB event [false].
    """

    model_config = _SECTION

    max_event_bytes: Annotated[int, Field(ge=1024, le=16 << 20)] = 1 << 20
    quarantine_record_bytes: Annotated[int, Field(ge=0, le=8 << 20)] = 4 << 20
    revalidate: bool = False


class TenantPolicy(BaseModel):
    """Every stage's settings for one tenant (defaults merged with the tenant's overrides)."""

    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))

    tenant_id: str | None = None
    redaction: RedactionSettings = RedactionSettings()
    classification: ClassificationSettings = ClassificationSettings()
    training: TrainingSettings = TrainingSettings()
    retention: RetentionSettings = RetentionSettings()
    limits: LimitSettings = LimitSettings()

    @cached_property
    def redaction_policy(self) -> Any:
        """The tenant's :class:`~molt.governance.redaction.RedactionPolicy` (built once)."""
        return _build_redaction_policy(self.redaction.policy, self.tenant_id)


_SECTIONS = ("redaction", "classification", "training", "retention", "limits")


class GovernancePolicy(BaseModel):
    """The whole policy file. Use :meth:`for_tenant` to get one tenant's merged settings.

    - ``version`` — the file format version [1].
    - ``name`` — recorded with every decision, with :meth:`fingerprint` ["default"].
    - ``pipeline`` — stage names, in order [:data:`DEFAULT_STAGES`].
    - ``unknown_tenants`` — what to do with a tenant the file does not name [use_defaults]; with
      ``use_defaults`` an event that names no tenant (and has no API key) is tenant
      :data:`ANONYMOUS_TENANT`, with ``quarantine`` it is quarantined.
    - ``defaults`` — settings for every tenant; ``tenants`` — per-tenant overrides.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    name: str = Field(default="default", min_length=1, max_length=128)
    pipeline: tuple[str, ...] = DEFAULT_STAGES
    unknown_tenants: UnknownTenants = UnknownTenants.USE_DEFAULTS
    defaults: dict[str, Any] = Field(default_factory=dict)
    tenants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    source: str | None = Field(default=None, exclude=True)
    _resolved: dict[str | None, TenantPolicy] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> GovernancePolicy:
        known = set(DEFAULT_STAGES) | set(stages.names())  # the built-ins register when the stages load
        unknown = [s for s in self.pipeline if s not in known]
        if unknown:
            raise _FieldError("pipeline", f"unknown stages {unknown}; registered stages: {sorted(known)}")
        for name, section in [("defaults", self.defaults)] + [(f"tenants.{t}", s) for t, s in self.tenants.items()]:
            if not isinstance(section, dict):
                raise _FieldError(name, "must be a mapping of sections")
            extra = sorted(set(section) - set(_SECTIONS))
            if extra:
                raise _FieldError(f"{name}.{extra[0]}", f"unknown section; sections are {list(_SECTIONS)}")
        for tenant in [None, *self.tenants]:  # validate every tenant now, not at the first event
            self.for_tenant(tenant)
        return self

    def knows(self, tenant_id: str | None) -> bool:
        """Whether the file has a section for ``tenant_id``."""
        return tenant_id in self.tenants

    def for_tenant(self, tenant_id: str | None) -> TenantPolicy:
        """The merged settings of ``tenant_id`` (the defaults for a tenant the file does not name)."""
        got = self._resolved.get(tenant_id)
        if got is not None:
            return got
        override = self.tenants.get(tenant_id, {}) if tenant_id is not None else {}
        merged = _merge(self.defaults, override)
        try:
            got = TenantPolicy.model_validate({"tenant_id": tenant_id, **merged})
            if got.redaction.enabled:
                got.redaction_policy  # noqa: B018 - build now so a bad inline policy fails at load
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            where = f"tenants.{tenant_id}" if tenant_id is not None and _has_path(override, err["loc"]) else "defaults"
            raise _FieldError(f"{where}.{loc}", err["msg"]) from None
        except _FieldError:
            raise
        except GovernanceError as exc:
            where = f"tenants.{tenant_id}" if tenant_id is not None and "redaction" in override else "defaults"
            raise _FieldError(f"{where}.redaction.policy", exc.message) from None
        self._resolved[tenant_id] = got
        return got

    def training_tenants(self) -> list[str]:
        """The tenants the file names whose data may be trained on (``training.opt_in``): the tenants
        that can have adapters of their own. With ``defaults.training.opt_in`` every other tenant can
        too, which no file can count."""
        return [t for t in self.tenants if self.for_tenant(t).training.opt_in]

    def shares(self, owner: str, reader: str) -> bool:
        """Whether ``reader``'s trainer may train on ``owner``'s data: both must list each other."""
        if owner == reader:
            return True
        a, b = self.for_tenant(owner).training, self.for_tenant(reader).training
        return reader in a.share_with and owner in b.share_with and a.opt_in

    def fingerprint(self) -> str:
        """A short hash of the policy's content, recorded next to every decision it produced."""
        dump = self.model_dump(mode="json")
        return hashlib.sha256(orjson.dumps(dump, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

    @property
    def label(self) -> str:
        """``name@fingerprint``, as recorded with decisions."""
        return f"{self.name}@{self.fingerprint()}"


class _FieldError(ValueError):
    """A policy error located at a dotted field path (turned into GovernanceError by the loader)."""

    def __init__(self, field: str, msg: str):
        super().__init__(f"{field}: {msg}")
        self.field = field
        self.msg = msg


def _has_path(d: Any, loc: tuple[Any, ...]) -> bool:
    for key in loc:
        if not isinstance(d, dict) or key not in d:
            return False
        d = d[key]
    return True


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "policy":
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _build_redaction_policy(spec: str | dict[str, Any], tenant_id: str | None) -> Any:
    from molt.governance.redaction import RedactionPolicy, derive_tenant_key, load_policy

    if isinstance(spec, str):
        return load_policy(spec)
    fields = dict(spec)
    env = fields.pop("pseudonym_key_env", None)
    if env is not None:
        master = os.environ.get(str(env))
        if not master:
            raise GovernanceError(f"pseudonym_key_env names ${env}, which is not set; export the master key.")
        fields["pseudonym_key"] = derive_tenant_key(master, tenant_id or "").get_secret_value()
    fields.setdefault("name", f"tenant:{tenant_id}" if tenant_id else "inline")
    fields.setdefault("tenant_id", tenant_id)
    try:
        return RedactionPolicy.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise GovernanceError(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None


def load_policy_file(path: str | os.PathLike[str] | None) -> GovernancePolicy:
    """Read and validate a policy file (YAML, or TOML by extension); ``None`` or ``"default"`` (what
    ``--governance`` takes for it) = the built-in policy.

    Raises :class:`~molt.errors.GovernanceError` naming the file and the field when it is invalid.
    """
    if path is None or path == BUILTIN_POLICY:
        return GovernancePolicy()
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GovernanceError(f"The governance policy file {p} does not exist; check the path.") from None
    except OSError as exc:
        raise GovernanceError(f"The governance policy file {p} cannot be read: {exc}.") from None
    try:
        if p.suffix.lower() == ".toml":
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError
        raise GovernanceError(f"The governance policy file {p} is not valid {_fmt(p)}: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GovernanceError(f"The governance policy file {p} must hold a mapping at the top level, "
                              f"not {type(data).__name__}.")
    try:
        return GovernancePolicy.model_validate({**data, "source": str(p)})
    except _FieldError as exc:
        raise GovernanceError(f"The governance policy file {p} is invalid at field '{exc.field}': {exc.msg}. "
                              f"Fix that field and reload.") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "(top level)"
        inner = err.get("ctx", {}).get("error")
        if isinstance(inner, _FieldError):
            raise GovernanceError(f"The governance policy file {p} is invalid at field '{inner.field}': "
                                  f"{inner.msg}. Fix that field and reload.") from None
        raise GovernanceError(f"The governance policy file {p} is invalid at field '{field}': {err['msg']}. "
                              f"Fix that field and reload.") from None


def _fmt(p: Path) -> str:
    return "TOML" if p.suffix.lower() == ".toml" else "YAML"

"""Per-tenant redaction policy: which entities, which detectors, and how each is replaced.

Three replacement modes:

- ``mask`` — the span becomes ``mask_char`` repeated (its length, or ``mask_length`` if set).
- ``placeholder`` — a typed, numbered placeholder: ``<EMAIL_ADDRESS_1>``; the same value gets the
  same number within one text or event, so "who said what" survives.
- ``pseudonym`` — a keyed pseudonym ``<PERSON_5e1f0a9c2b>`` = HMAC-SHA256(tenant key, type + value).
  Stable for a tenant across events and days, so trajectories stay learnable (the same customer is
  the same token everywhere), and different across tenants, so pseudonyms cannot be joined.

Named policies live in :data:`policies`; the CLI's ``--policy`` takes a registered name or a path
to a YAML/JSON file holding a policy::

    RedactionPolicy(name="acme", tenant_id="acme", mode="pseudonym", pseudonym_key="…32+ chars…")
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from molt.errors import GovernanceError
from molt.governance.redaction.base import DEFAULT_ENTITIES, EntityType
from molt.registry import Registry

__all__ = [
    "DEFAULT_DETECTORS",
    "RedactionPolicy",
    "ReplacementMode",
    "TokenTraceHandling",
    "derive_tenant_key",
    "load_policy",
    "policies",
]

#: Detectors a policy runs unless it lists its own (every built-in detector but ``date_time``).
DEFAULT_DETECTORS: tuple[str, ...] = (
    "email",
    "phone",
    "credit_card",
    "us_ssn",
    "iban",
    "ip",
    "url",
    "handle",
    "us_driver_license",
    "national_id",
    "api_key",
    "private_key",
    "password",
    "entities",
)


class ReplacementMode(StrEnum):
    """How a detected span is replaced."""

    MASK = "mask"
    PLACEHOLDER = "placeholder"
    PSEUDONYM = "pseudonym"
    #: A realistic stand-in chosen by the tenant's key (:meth:`RedactionPolicy.surrogate`): the same
    #: value gets the same fake name within a window, so replays and memories read as text.
    SURROGATE = "surrogate"


class TokenTraceHandling(StrEnum):
    """What to do with a generation's token ids when its text was redacted (the ids encode the
    original text, so keeping them would leak what was replaced)."""

    DROP_IF_REDACTED = "drop_if_redacted"
    KEEP = "keep"


class RedactionPolicy(BaseModel):
    """A tenant's redaction configuration. Frozen; persist ``fingerprint()`` next to what it produced.

    Fields (defaults in brackets):

    - ``name`` — registry / report name ["default"].
    - ``tenant_id`` — the tenant this policy belongs to [None].
    - ``mode`` — default replacement mode [placeholder].
    - ``entity_modes`` — per-type override of ``mode`` ({"PERSON": "pseudonym"}) [{}].
    - ``entities`` — types to redact [every :class:`EntityType` but DATE_TIME].
    - ``detectors`` — detector registry names to run [:data:`DEFAULT_DETECTORS`].
    - ``min_score`` — spans below this detector score are kept as they are; 0–1 [0.5].
    - ``allow_list`` — exact values never redacted (a support address, the product's own name) [[]].
    - ``mask_char`` — one character [*]; ``mask_length`` — fixed mask length, 1–64, None = span's [None].
    - ``pseudonym_key`` — the tenant's HMAC key, ≥ 16 characters; required for ``pseudonym`` [None].
    - ``pseudonym_length`` — hex digits of the HMAC kept, 6–64 [10].
    - ``surrogate_window_s`` — for ``surrogate``: the same value keeps the same stand-in within windows
      of this many seconds (UTC epoch buckets) and gets another in the next, so stand-ins cannot link a
      person across windows; None = one stand-in for as long as the key lives [None].
    - ``token_traces`` — :class:`TokenTraceHandling` [drop_if_redacted].
    - ``keep_country_level_places`` — leave a LOCATION that is a country or larger (a continent, a
      world region, the EU) as it is [True]. A country is shared by millions of people and says
      nothing about which one a trajectory is about — HIPAA's Safe Harbor method removes only
      "geographic subdivisions smaller than a State" — while it is often what a correction or a
      reward reason is about ("we ship to all countries in the EU and to Norway"); redacting it
      would leave the control plane's memory as "<LOCATION_1> … <LOCATION_2>". Cities, regions,
      streets and addresses are redacted as before. Labelled PII sets (presidio-research's, for
      one) count countries as LOCATION: set False to redact them as those labels do.
    - ``operator_vocabulary_after`` — keep the organisation and place names of a system prompt once
      the same prompt, naming no person and holding no identifier, has been seen in this many
      distinct conversations of the tenant: it is then the operator's configuration, and its names
      are kept wherever they appear (:mod:`~molt.governance.redaction.vocabulary`); 0 turns it off
      [3].
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="default", min_length=1, max_length=128)
    tenant_id: str | None = None
    mode: ReplacementMode = ReplacementMode.PLACEHOLDER
    entity_modes: dict[str, ReplacementMode] = Field(default_factory=dict)
    entities: frozenset[str] = DEFAULT_ENTITIES
    detectors: tuple[str, ...] = DEFAULT_DETECTORS
    min_score: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    allow_list: frozenset[str] = frozenset()
    mask_char: str = Field(default="*", min_length=1, max_length=1)
    mask_length: Annotated[int, Field(ge=1, le=64)] | None = None
    pseudonym_key: SecretStr | None = None
    pseudonym_length: Annotated[int, Field(ge=6, le=64)] = 10
    surrogate_window_s: Annotated[int, Field(ge=60)] | None = None
    token_traces: TokenTraceHandling = TokenTraceHandling.DROP_IF_REDACTED
    keep_country_level_places: bool = True
    operator_vocabulary_after: Annotated[int, Field(ge=0)] = 3

    @field_validator("operator_vocabulary_after")
    @classmethod
    def _vocabulary_after(cls, v: int) -> int:
        if v == 1:
            raise ValueError("operator_vocabulary_after must be 0 (off) or at least 2: a prompt seen in one "
                             "conversation may be about its user.")
        return v

    @field_validator("entities", "entity_modes")
    @classmethod
    def _known_entities(cls, v: frozenset[str] | dict[str, ReplacementMode]) -> object:
        known = {e.value for e in EntityType}
        unknown = sorted(set(v) - known)
        if unknown:
            raise ValueError(f"unknown entity types {unknown}; known types are {sorted(known)}.")
        return v

    @model_validator(mode="after")
    def _pseudonym_needs_key(self) -> RedactionPolicy:
        keyed = (ReplacementMode.PSEUDONYM, ReplacementMode.SURROGATE)
        uses = self.mode in keyed or any(m in keyed for m in self.entity_modes.values())
        if uses and self.pseudonym_key is None:
            raise ValueError(
                "mode/entity_modes use 'pseudonym' or 'surrogate' but pseudonym_key is not set; give the tenant "
                "an HMAC key (derive_tenant_key(master_key, tenant_id) makes one) or choose another mode."
            )
        if self.pseudonym_key is not None and len(self.pseudonym_key.get_secret_value()) < 16:
            raise ValueError("pseudonym_key must be at least 16 characters; use a random 32-byte secret.")
        return self

    def mode_for(self, entity_type: str) -> ReplacementMode:
        """The replacement mode for ``entity_type``."""
        return self.entity_modes.get(entity_type, self.mode)

    def pseudonym(self, entity_type: str, value: str) -> str:
        """The keyed pseudonym of ``value``: case and spacing do not change it."""
        if self.pseudonym_key is None:
            raise GovernanceError(f"Policy {self.name!r} has no pseudonym_key; set one to use pseudonyms.")
        normalized = " ".join(value.casefold().split())
        digest = hmac.new(
            self.pseudonym_key.get_secret_value().encode(),
            f"{entity_type}\x1f{normalized}".encode(),
            hashlib.sha256,
        ).hexdigest()
        return f"<{entity_type}_{digest[: self.pseudonym_length]}>"

    def surrogate(self, entity_type: str, value: str, *, now: float | None = None) -> str:
        """A realistic stand-in for ``value`` chosen by the tenant's key (case and spacing do not
        change it): a person's name, an e-mail address at ``example.com``, a city or a firm built
        from the lexicon's names; other types get their :meth:`pseudonym`. Within one
        ``surrogate_window_s`` window (``now``: epoch seconds, default the clock) the same value gets
        the same stand-in."""
        if self.pseudonym_key is None:
            raise GovernanceError(f"Policy {self.name!r} has no pseudonym_key; set one to use surrogates.")
        from molt.governance.redaction.surrogates import stand_in

        window = ""
        if self.surrogate_window_s:
            window = str(int((time.time() if now is None else now) // self.surrogate_window_s))
        normalized = " ".join(value.casefold().split())
        digest = hmac.new(
            self.pseudonym_key.get_secret_value().encode(),
            f"surrogate\x1f{window}\x1f{entity_type}\x1f{normalized}".encode(),
            hashlib.sha256,
        ).digest()
        got = stand_in(entity_type, int.from_bytes(digest[:8], "big"))
        return got if got is not None else self.pseudonym(entity_type, value)

    def fingerprint(self) -> str:
        """A short hash of the configuration (the key excluded), to record next to redacted data."""
        # sets dump in hash order, which changes from process to process: sort them so the
        # fingerprint of one configuration is the same everywhere
        dump = self.model_dump(mode="json", exclude={"pseudonym_key"})
        for k in ("entities", "allow_list"):
            dump[k] = sorted(dump[k])
        dump["entity_modes"] = dict(sorted(dump["entity_modes"].items()))
        if dump.get("surrogate_window_s") is None:
            del dump["surrogate_window_s"]  # unset, a configuration keeps the fingerprint it had before the field
        text = json.dumps(dump, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def derive_tenant_key(master_key: str, tenant_id: str) -> SecretStr:
    """A per-tenant HMAC key from one master secret: HMAC-SHA256(master, "molt-pseudonym:" + tenant)."""
    if len(master_key) < 16:
        raise GovernanceError("The master key must be at least 16 characters; use a random 32-byte secret.")
    digest = hmac.new(master_key.encode(), f"molt-pseudonym:{tenant_id}".encode(), hashlib.sha256)
    return SecretStr(digest.hexdigest())


#: Named policies. ``default`` (placeholders) and ``mask`` are built in; ``pseudonym`` is
#: registered when ``MOLT_PSEUDONYM_KEY`` is set in the environment.
policies: Registry[RedactionPolicy] = Registry("redaction policy")
policies.register("default", RedactionPolicy())
policies.register("mask", RedactionPolicy(name="mask", mode=ReplacementMode.MASK))


def load_policy(name_or_path: str | None) -> RedactionPolicy:
    """The policy registered as ``name_or_path``, or read from that YAML/JSON file; None = default.

    Raises :class:`~molt.errors.GovernanceError` with the reason when the file is invalid.
    """
    if name_or_path is None:
        return policies.get("default")
    if name_or_path in policies:
        return policies.get(name_or_path)
    if name_or_path == "pseudonym" and os.environ.get("MOLT_PSEUDONYM_KEY"):
        return RedactionPolicy(
            name="pseudonym", mode=ReplacementMode.PSEUDONYM, pseudonym_key=os.environ["MOLT_PSEUDONYM_KEY"]
        )
    path = Path(name_or_path)
    if not path.is_file():
        raise GovernanceError(
            f"No redaction policy named {name_or_path!r} and no such file; registered policies: "
            f"{', '.join(policies.names())} (pass a YAML or JSON file path for your own)."
        )
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return RedactionPolicy.model_validate(data)
    except (OSError, ValidationError, yaml.YAMLError) as exc:
        raise GovernanceError(f"The redaction policy file {path} is not valid: {exc}") from exc

"""Tenants, API keys and roles: who may do what, for which tenant.

An API key maps to one tenant and one role. Keys are never stored in clear: the key ring holds their
SHA-256 digests. Roles and what they allow:

============  ==========================================================
role          allowed actions
============  ==========================================================
operator      the platform: shared serving configuration (public models' routes and weights,
              base versions, LoRA adapters loaded into shared backends), plus everything an
              admin may do for the operator's own tenant
admin         everything for its tenant, including audit, erasure, and its own agents'
              policy versions and canaries — never the serving configuration other tenants share
trainer       read, export, train (read eligible data, register adapters)
reader        read (trajectories, rewards, signals)
agent_writer  write (record events, send model calls through the gateway, rewards)
============  ==========================================================

Every action but ``operate`` acts on the key's own tenant only; ``operate`` is the one action on
what all tenants share, so a tenant's admin key cannot change another tenant's serving.

A key file (TOML) looks like::

    [[keys]]
    key_sha256 = "9f86d0…"      # or: key = "sk-molt-…" (hashed on load)
    tenant = "acme"
    role = "agent_writer"
    name = "support-bot prod"

>>> ring = KeyRing.from_mapping({"k1": ("acme", "reader")})
>>> ring.authenticate("k1").tenant_id
'acme'
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from molt.errors import AuthenticationError, GovernanceError, PermissionDenied

__all__ = ["KeyRing", "OPEN_KEY_NAME", "Permission", "Principal", "Role", "generate_key", "hash_key"]

#: The key name a gateway without a key file gives every caller: it names no writer, so evidence that
#: counts distinct keys (molt.control.hands) does not count it as one.
OPEN_KEY_NAME = "open-gateway"


class Role(StrEnum):
    """What a key may do for its tenant."""

    OPERATOR = "operator"
    ADMIN = "admin"
    TRAINER = "trainer"
    READER = "reader"
    AGENT_WRITER = "agent_writer"


class Permission(StrEnum):
    """Actions checked by :meth:`Principal.require`."""

    READ = "read"
    WRITE = "write"
    EXPORT = "export"
    TRAIN = "train"
    ADMIN = "admin"
    #: Change what every tenant shares (routes and weights of public models, base versions, adapters).
    OPERATE = "operate"


_ROLE_NAMES = frozenset(r.value for r in Role)
_ALLOWED: dict[Role, frozenset[Permission]] = {
    Role.OPERATOR: frozenset(Permission),
    Role.ADMIN: frozenset(Permission) - {Permission.OPERATE},
    Role.TRAINER: frozenset({Permission.READ, Permission.EXPORT, Permission.TRAIN}),
    Role.READER: frozenset({Permission.READ}),
    Role.AGENT_WRITER: frozenset({Permission.WRITE}),
}


def hash_key(key: str) -> str:
    """SHA-256 hex digest of an API key (what the key ring stores)."""
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key(prefix: str = "sk-molt-") -> str:
    """A new random API key (256 bits)."""
    return prefix + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: one tenant, one role."""

    tenant_id: str
    role: Role
    key_name: str | None = None
    #: The agent the key is bound to (``agent`` in the key file): the agent of its calls that name none.
    agent_id: str | None = None

    def can(self, action: Permission | str) -> bool:
        """Whether this principal's role allows ``action``."""
        return Permission(action) in _ALLOWED[self.role]

    def require(self, what: Permission | Role | str, *, tenant: str | None = None) -> Principal:
        """Raise :class:`PermissionDenied` unless the role allows ``what`` (an action, or a role whose
        actions must all be allowed) and, when given, ``tenant`` is this principal's tenant."""
        if tenant is not None and tenant != self.tenant_id:
            raise PermissionDenied(
                f"A key of tenant {self.tenant_id!r} cannot act on tenant {tenant!r}; use a key of that tenant.")
        needed = _ALLOWED[Role(what)] if isinstance(what, Role) or what in _ROLE_NAMES else frozenset({Permission(what)})
        missing = needed - _ALLOWED[self.role]
        if missing:
            raise PermissionDenied(
                f"The role {self.role.value!r} may not {', '.join(sorted(m.value for m in missing))}; "
                f"use a key with a role that may (admin has every permission for its tenant; changing the "
                f"serving configuration all tenants share needs the platform operator's key).")
        return self


class KeyRing:
    """API key digests → (tenant, role)."""

    def __init__(self) -> None:
        self._by_digest: dict[str, Principal] = {}

    def add(self, *, tenant: str, role: Role | str, key: str | None = None, key_sha256: str | None = None,
            name: str | None = None, agent: str | None = None) -> None:
        """Register a key (clear or as its SHA-256 digest) for ``tenant`` with ``role`` (and, optionally,
        the ``agent`` its calls come from when they name none)."""
        if (key is None) == (key_sha256 is None):
            raise GovernanceError("Give exactly one of key or key_sha256 for each API key.")
        if not tenant:
            raise GovernanceError("Every API key needs a non-empty tenant.")
        try:
            r = Role(role)
        except ValueError:
            raise GovernanceError(
                f"Unknown role {role!r}; roles are {', '.join(x.value for x in Role)}.") from None
        digest = key_sha256.lower() if key_sha256 else hash_key(key)  # type: ignore[arg-type]
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise GovernanceError(f"key_sha256 for tenant {tenant!r} is not a SHA-256 hex digest.")
        if agent is not None and (not isinstance(agent, str) or not agent):
            raise GovernanceError(f"The agent of a key of tenant {tenant!r} must be a non-empty string.")
        self._by_digest[digest] = Principal(tenant_id=tenant, role=r, key_name=name, agent_id=agent)

    @classmethod
    def from_mapping(cls, keys: Mapping[str, tuple[str, Role | str]]) -> KeyRing:
        """A ring from ``{api_key: (tenant, role)}`` (tests and embedded setups)."""
        ring = cls()
        for key, (tenant, role) in keys.items():
            ring.add(tenant=tenant, role=role, key=key)
        return ring

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from a TOML key file (see the module docstring)."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise GovernanceError(f"The key file {p} does not exist.") from None
        except tomllib.TOMLDecodeError as exc:
            raise GovernanceError(f"The key file {p} is not valid TOML: {exc}.") from None
        ring = cls()
        for i, entry in enumerate(data.get("keys", [])):
            if not isinstance(entry, dict):
                raise GovernanceError(f"{p}: keys[{i}] must be a table.")
            unknown = set(entry) - {"key", "key_sha256", "tenant", "role", "name", "agent"}
            if unknown:
                raise GovernanceError(f"{p}: keys[{i}] has unknown fields {sorted(unknown)}.")
            try:
                ring.add(tenant=entry.get("tenant", ""), role=entry.get("role", ""), key=entry.get("key"),
                         key_sha256=entry.get("key_sha256"), name=entry.get("name"), agent=entry.get("agent"))
            except GovernanceError as exc:
                raise GovernanceError(f"{p}: keys[{i}]: {exc.message}") from None
        return ring

    def authenticate(self, api_key: str | None) -> Principal:
        """The principal for ``api_key``; raises :class:`AuthenticationError` if missing or unknown."""
        if not api_key:
            raise AuthenticationError("No API key was given; send 'Authorization: Bearer <key>'.")
        # A dict lookup on the SHA-256 digest: the caller cannot steer the digest, so lookup timing
        # reveals nothing useful about stored keys.
        principal = self._by_digest.get(hash_key(api_key))
        if principal is not None:
            return principal
        raise AuthenticationError("The API key is not known; check the key or ask an admin for one.")

    def tenants(self) -> set[str]:
        """Tenants that have at least one key."""
        return {p.tenant_id for p in self._by_digest.values()}

    def multi_tenant(self) -> bool:
        """Whether the keys name more than one tenant (then client-chosen trajectory ids are
        namespaced per tenant: :mod:`molt.capture.tenancy`)."""
        first: str | None = None
        for p in self._by_digest.values():
            if first is None:
                first = p.tenant_id
            elif p.tenant_id != first:
                return True
        return False

    def __len__(self) -> int:
        return len(self._by_digest)

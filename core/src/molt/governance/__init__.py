"""Governance between capture and the training queue: access control, redaction, eligibility,
retention and erasure."""

from molt.governance.access import Action, KeyRing, Principal, Role, generate_key, hash_key

__all__ = ["Action", "KeyRing", "Principal", "Role", "generate_key", "hash_key"]

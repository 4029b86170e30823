"""Realistic stand-ins for redacted values (the ``surrogate`` replacement mode).

A stand-in is picked from the lexicon's own name lists by a number the policy derives from the
tenant's key and the value (:meth:`~molt.governance.redaction.policy.RedactionPolicy.surrogate`), so
the same value gets the same stand-in and nothing about the value can be read back from it. The lists
are sorted once, so one key gives the same stand-ins in every process with the same lexicon.
Only names that are plain letters are used, so a stand-in is never taken for an identifier.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["stand_in"]


@lru_cache(maxsize=1)
def _pools() -> tuple[list[str], list[str], list[str]]:
    from molt.governance.redaction.lexicon import get_lexicon

    lx = get_lexicon()

    def plain(words: object) -> list[str]:
        return sorted(w for w in words if w.isascii() and w.isalpha() and 3 <= len(w) <= 10)  # type: ignore[attr-defined]

    first = [w for w in plain(lx.first_names) if w not in lx.word_zipf]
    last = [w for w in plain(lx.last_names) if w not in lx.word_zipf]
    cities = [w for w in plain(lx.cities) if w not in lx.word_zipf and w not in lx.first_names]
    return first, last, cities


def stand_in(entity_type: str, n: int) -> str | None:
    """The stand-in number ``n`` for a value of ``entity_type``, or None for a type without one."""
    first, last, cities = _pools()
    f = first[n % len(first)].title()
    s = last[(n // len(first)) % len(last)].title()
    if entity_type == "PERSON":
        return f"{f} {s}"
    if entity_type == "EMAIL_ADDRESS":
        return f"{f.lower()}.{s.lower()}@example.com"
    if entity_type == "LOCATION":
        return cities[n % len(cities)].title()
    if entity_type == "ORGANIZATION":
        return f"{s} & Co"
    return None

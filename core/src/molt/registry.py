"""A small generic name → object registry.

Used for redactors, verifiers, interventions, advantage estimators and backends, so that a config
names a component and a replay can rebuild exactly what ran.

>>> backends: Registry[type] = Registry("backend")
>>> _ = backends.register("stub", object)
>>> backends.get("stub") is object
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from molt.errors import RegistryError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Objects registered by name. ``kind`` names what is registered, for error messages."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    @overload
    def register(self, name: str, obj: T) -> T: ...
    @overload
    def register(self, name: str, obj: None = None) -> Callable[[T], T]: ...

    def register(self, name: str, obj: T | None = None) -> T | Callable[[T], T]:
        """Register ``obj`` under ``name``; without ``obj``, return a decorator.

        Registering the same object twice is a no-op; a different object under a taken name raises.
        """
        if obj is None:
            return lambda o: self.register(name, o)
        if not name or not isinstance(name, str):
            raise RegistryError(f"A {self.kind} name must be a non-empty string, got {name!r}.")
        existing = self._items.get(name)
        if existing is not None and existing is not obj:
            raise RegistryError(
                f"The {self.kind} name {name!r} is already registered to {existing!r}; "
                f"choose another name or unregister the first one."
            )
        self._items[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (no error if absent)."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name lists the known ones."""
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise RegistryError(f"Unknown {self.kind} {name!r}; registered {self.kind}s: {known}.") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"

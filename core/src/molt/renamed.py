"""Former public names, kept one deprecation period: a module's ``__getattr__`` built by :func:`renamed`
returns the new object for an old name with a ``DeprecationWarning`` that names the new one.

    __getattr__ = renamed(__name__, {"Decision": "Route"}, globals())
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["renamed"]


def renamed(module: str, names: Mapping[str, str], namespace: Mapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__``: each old name of ``names`` (old → new) warns and resolves to the new name in
    ``namespace`` (the module's ``globals()``, read at the time of the access); any other name is missing."""

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is renamed {module}.{new}; the old name goes in a later release.",
                      DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__

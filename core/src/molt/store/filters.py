"""Which rows of a store table: a small typed filter, and the one place it becomes LanceDB's ``where``.

Code outside :mod:`molt.store` says *which* rows it wants — a tenant, an agent, a time window, an
outcome, a set of ids — and never writes the query language: values are quoted and escaped here only,
column names are checked to be plain identifiers, and a value of the wrong kind (a NUL in a string, a
NaN, a list where one value belongs) is refused with an error that names it.

>>> str(Filter(tenant_id="acme", agent_id="desk").among("trajectory_id", ["t1", "o'brien"]))
"tenant_id = 'acme' AND agent_id = 'desk' AND trajectory_id IN ('t1', 'o''brien')"
>>> str(Filter().absent("tenant_id").since("ts", datetime(2026, 12, 1, tzinfo=UTC)))
"tenant_id IS NULL AND ts >= TIMESTAMP '2026-12-01T00:00:00.000000Z'"
>>> str(Filter().either(Filter(tenant_id="acme"), Filter().absent("tenant_id")))
"(tenant_id = 'acme' OR tenant_id IS NULL)"
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

__all__ = ["IN_CHUNK", "Filter", "Value", "lance_where", "sql_str"]

#: A value a filter compares a column with.
Value = str | int | float | bool | datetime
#: Values per ``IN (…)`` list: LanceDB plans a long list slowly, so :meth:`Filter.chunks` splits it.
IN_CHUNK = 512

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def sql_str(value: str) -> str:
    """A string literal for a LanceDB filter, quotes escaped (never interpolate raw ids)."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string id, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("ids may not contain NUL characters")
    return "'" + value.replace("'", "''") + "'"


def _literal(value: Value) -> str:
    if isinstance(value, str):
        return sql_str(value)
    if isinstance(value, bool):  # before int: a bool is an int
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a filter compares with finite numbers only, got {value!r}")
        return repr(value)
    if isinstance(value, datetime):  # a naive time is local time (as datetime.astimezone reads it)
        return f"TIMESTAMP '{value.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}Z'"
    raise TypeError(f"a filter compares with str, int, float, bool or datetime, got {type(value).__name__}")


def _column(name: str) -> str:
    if not isinstance(name, str) or not _COLUMN.fullmatch(name):
        raise ValueError(f"{name!r} is not a column name (letters, digits and _, not first a digit)")
    return name


class Filter:
    """Rows where every condition holds; ``Filter()`` holds for every row.

    ``Filter(tenant_id="acme", agent_id="desk")`` compares columns for equality; :meth:`given` skips the
    ``None`` ones; :meth:`where`, :meth:`among`, :meth:`other_than`, :meth:`present`, :meth:`absent`, the comparisons
    (:meth:`before`, :meth:`at_or_before`, :meth:`after`, :meth:`since`), :meth:`either` and
    :meth:`none_of` add the other conditions, and ``a & b`` holds where both do. A
    filter is immutable: each method returns a new one."""

    __slots__ = ("_clauses",)

    def __init__(self, **equal: Value) -> None:
        for c, v in equal.items():
            if v is None:  # a tenant id that went missing must not turn into "the untagged rows"
                raise TypeError(f"Filter({c}=None): compare with a value; Filter().absent({c!r}) asks for a "
                                f"null, Filter.given(...) leaves a column that was not given free")
        self._clauses: tuple[str, ...] = tuple(f"{_column(c)} = {_literal(v)}" for c, v in equal.items())

    @classmethod
    def given(cls, **equal: Value | None) -> Filter:
        """Equality on the columns given a value; ``None`` leaves that column free (an optional argument
        that was not given)."""
        return cls(**{c: v for c, v in equal.items() if v is not None})

    @classmethod
    def _of(cls, clauses: Iterable[str]) -> Filter:
        f = cls()
        f._clauses = tuple(clauses)
        return f

    def _and(self, clause: str) -> Filter:
        return Filter._of((*self._clauses, clause))

    def where(self, **equal: Value) -> Filter:
        """This filter and equality on more columns."""
        return Filter._of((*self._clauses, *Filter(**equal)._clauses))

    def among(self, column: str, values: Iterable[Value]) -> Filter:
        """…and ``column`` is one of ``values`` (none: no row matches). Keep lists short (:meth:`chunks`)."""
        vals = list(values)
        return self._and(f"{_column(column)} IN ({', '.join(map(_literal, vals))})" if vals else "FALSE")

    def other_than(self, column: str, values: Iterable[Value]) -> Filter:
        """…and ``column`` is none of ``values``."""
        vals = list(values)
        return self._and(f"{_column(column)} NOT IN ({', '.join(map(_literal, vals))})") if vals else self

    def present(self, column: str) -> Filter:
        """…and ``column`` is not null."""
        return self._and(f"{_column(column)} IS NOT NULL")

    def absent(self, column: str) -> Filter:
        """…and ``column`` is null."""
        return self._and(f"{_column(column)} IS NULL")

    def before(self, column: str, value: Value) -> Filter:
        """…and ``column < value``."""
        return self._and(f"{_column(column)} < {_literal(value)}")

    def at_or_before(self, column: str, value: Value) -> Filter:
        """…and ``column <= value``."""
        return self._and(f"{_column(column)} <= {_literal(value)}")

    def after(self, column: str, value: Value) -> Filter:
        """…and ``column > value``."""
        return self._and(f"{_column(column)} > {_literal(value)}")

    def since(self, column: str, value: Value) -> Filter:
        """…and ``column >= value``."""
        return self._and(f"{_column(column)} >= {_literal(value)}")

    def either(self, *alternatives: Filter) -> Filter:
        """…and at least one of ``alternatives`` holds."""
        if not alternatives:
            raise ValueError("either() needs at least one alternative")
        return self._and(_any(alternatives))

    def none_of(self, *alternatives: Filter) -> Filter:
        """…and none of ``alternatives`` holds (none given: nothing is excluded)."""
        return self._and(f"NOT {_any(alternatives)}") if alternatives else self

    def chunks(self, column: str, values: Sequence[Value], size: int = IN_CHUNK) -> Iterator[Filter]:
        """This filter with ``column`` among each run of at most ``size`` of ``values``, in order."""
        for i in range(0, len(values), size):
            yield self.among(column, values[i:i + size])

    def __and__(self, other: Filter) -> Filter:
        return Filter._of((*self._clauses, *other._clauses))

    def __bool__(self) -> bool:
        return bool(self._clauses)

    def __str__(self) -> str:
        """The LanceDB ``where`` string (``TRUE`` for the empty filter)."""
        return " AND ".join(self._clauses) or "TRUE"

    def __repr__(self) -> str:
        return f"Filter<{self}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other._clauses == self._clauses

    def __hash__(self) -> int:
        return hash(self._clauses)


def _any(alternatives: Sequence[Filter]) -> str:
    return "(" + " OR ".join(f"({a})" if len(a._clauses) > 1 else str(a) for a in alternatives) + ")"


def lance_where(where: Filter | str | None) -> str | None:
    """What a store method passes to LanceDB for ``where``: a filter rendered, a string as given (an
    operator's own filter, e.g. ``molt export --where``), nothing for no filter or an empty one."""
    if isinstance(where, Filter):
        return str(where) if where else None
    return where

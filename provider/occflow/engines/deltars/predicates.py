"""Predicates for delta-rs, built from validated column names and quoted literals.

A :class:`Where` is the only predicate this engine sends to delta-rs, so a partition value such
as ``x' OR '1'='1`` stays a string literal and never becomes SQL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidDeclarationError

# Column names as Delta and DataFusion both accept them unquoted; anything else is refused
# rather than escaped, so a name never carries SQL.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMPARATORS = frozenset({"=", "!=", "<", "<=", ">", ">="})

Literal = str | int | float | bool | decimal.Decimal | dt.date | dt.datetime


def column(name: str) -> str:
    """``name`` as a quoted identifier; an invalid name is an error saying what is allowed."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise InvalidDeclarationError(
            f"invalid column name {name!r}: use letters, digits and underscores, not starting with a digit"
        )
    return f'"{name}"'


def literal(value: Literal) -> str:
    """``value`` as a SQL literal: strings single-quoted with quotes doubled, numbers checked."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidDeclarationError(f"predicate value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InvalidDeclarationError(f"predicate value {value!r} is not a finite number")
        return str(value)
    if isinstance(value, dt.datetime):
        return "'" + value.isoformat() + "'"
    if isinstance(value, dt.date):
        return "'" + value.isoformat() + "'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise InvalidDeclarationError(
        f"predicate value {value!r} has type {type(value).__name__}; use str, int, float, bool, "
        "Decimal, date or datetime"
    )


@dataclass(frozen=True)
class Compare:
    """``column <op> value``; ``value`` is always rendered as a literal."""

    column: str
    op: str
    value: Literal

    def __post_init__(self) -> None:
        column(self.column)
        if self.op not in _COMPARATORS:
            raise InvalidDeclarationError(
                f"unknown comparison {self.op!r}; use one of {', '.join(sorted(_COMPARATORS))}"
            )
        literal(self.value)

    def sql(self, alias: str | None = None) -> str:
        prefix = "" if alias is None else f"{alias}."
        return f"{prefix}{column(self.column)} {self.op} {literal(self.value)}"


@dataclass(frozen=True)
class Where:
    """A conjunction of comparisons: the only predicates this engine sends to delta-rs."""

    conditions: tuple[Compare, ...]

    def __post_init__(self) -> None:
        if not self.conditions:
            raise InvalidDeclarationError("a predicate needs at least one condition")

    @classmethod
    def equals(cls, values: Mapping[str, Literal] | None = None, **more: Literal) -> Where:
        """``Where.equals(part="a", id=1)``: every column equal to its value."""
        merged = dict(values or {}) | more
        return cls(tuple(Compare(name, "=", value) for name, value in merged.items()))

    def and_(self, other: Where | None) -> Where:
        return self if other is None else Where(self.conditions + other.conditions)

    def sql(self, alias: str | None = None) -> str:
        return " AND ".join(c.sql(alias) for c in self.conditions)

    def columns(self) -> frozenset[str]:
        return frozenset(c.column for c in self.conditions)


def partition_where(partition: Mapping[str, Literal] | None) -> Where | None:
    return None if not partition else Where.equals(partition)


def partition_filters(partition: Mapping[str, Literal] | None) -> list[tuple[str, str, Any]] | None:
    """Partition filters for optimize: structured tuples, no SQL; values as Delta stores them."""
    if not partition:
        return None
    out: list[tuple[str, str, Any]] = []
    for name, value in partition.items():
        column(name)
        literal(value)  # same validation as a predicate value
        text = value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else str(value)
        out.append((name, "=", text))
    return out




def combine(where: Where | None, partition: Mapping[str, Literal] | None) -> Where | None:
    part = partition_where(partition)
    if where is None:
        return part
    return where.and_(part)

"""A task's declared write: table, profile, operation and the partitions it touches.

Operators, admission control, the DAG linter and the pools planner all read the same object,
so a bad declaration is caught once, at DAG parse time, with one message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidDeclarationError, InvalidFootprintError
from .identifiers import canonical_table, canonical_value, table_parts
from .operations import Operation
from .profiles import Profile, get_profile

_PARTITION_COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEMPLATE_RE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")

FORMAT_DEFAULT_PROFILE = {
    "delta": "delta-write-serializable",
    "iceberg": "iceberg-serializable",
    "maxcompute": "maxcompute-standard",
    "maxcompute-transactional": "maxcompute-transactional",
}


def validate_table_identifier(table: str) -> str:
    """``table`` if it is a safe identifier (``catalog.db.table``), else an error saying why."""
    table_parts(table)
    return table


def partition_key(values: Mapping[str, Any]) -> str:
    """``{"ds": "2024-01-01", "country": "NL"}`` -> ``"country=NL/ds=2024-01-01"``: columns
    sorted and lower-cased, values canonical (``1``, ``1.0`` and ``"1"`` are one value)."""
    if not isinstance(values, Mapping) or not values:
        raise InvalidFootprintError(
            f"a partition spec is a non-empty mapping of column to value, got {values!r}"
        )
    parts = []
    for column in values:
        if not isinstance(column, str) or not _PARTITION_COLUMN_RE.fullmatch(column):
            raise InvalidFootprintError(f"invalid partition column {column!r}: use letters, digits, _")
    if len({c.lower() for c in values}) != len(values):
        raise InvalidFootprintError(f"partition spec {dict(values)!r} names one column twice (columns ignore case)")
    for column in sorted(values, key=str.lower):
        value = values[column]
        if value is None or isinstance(value, (dict, list, tuple, set)):
            raise InvalidFootprintError(
                f"partition value for {column!r} must be a scalar, got {value!r}"
            )
        parts.append(f"{column.lower()}={canonical_value(column, value)}")
    return "/".join(parts)


@dataclass(frozen=True)
class WriteDeclaration:
    """What one task writes. ``partitions`` empty tuple / ``None`` = the whole table."""

    table: str
    profile: Profile
    operation: Operation
    partitions: tuple[Mapping[str, Any], ...] | None = None
    # A MERGE/UPDATE/DELETE whose condition names no partition reads the whole table (spec 003).
    reads_whole_table: bool = False
    # The engine's default catalog, so that ``db.t`` and ``lake.db.t`` are one table to admission.
    catalog: str | None = None

    @property
    def table_key(self) -> str:
        """The table's canonical identity (see ``core.identifiers.canonical_table``)."""
        return canonical_table(self.table, self.catalog)

    @classmethod
    def create(
        cls,
        table: str,
        operation: str | Operation,
        profile: str | Profile | None = None,
        table_format: str | None = None,
        partitions: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        reads_whole_table: bool = False,
        allow_templates: bool = False,
    ) -> WriteDeclaration:
        """Validate everything a user wrote; errors name the field and what would be right.

        With ``allow_templates`` (DAG parse time), Jinja templates in partition values are
        accepted and checked again after rendering.
        """
        validate_table_identifier(table)
        prof = resolve_profile(profile, table_format)
        op = prof.operation(operation)
        parts = normalise_partitions(partitions, allow_templates=allow_templates)
        return cls(table, prof, op, parts, reads_whole_table)

    def partition_keys(self) -> frozenset[str] | None:
        if not self.partitions:
            return None
        return frozenset(partition_key(p) for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "profile": self.profile.name,
            "operation": self.operation.value,
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "reads_whole_table": self.reads_whole_table,
        }


def resolve_profile(profile: str | Profile | None, table_format: str | None) -> Profile:
    if profile is not None:
        return get_profile(profile)
    if table_format is None:
        raise InvalidDeclarationError("name a profile or a table_format ('delta', 'iceberg', 'maxcompute')")
    try:
        return get_profile(FORMAT_DEFAULT_PROFILE[table_format])
    except KeyError:
        raise InvalidDeclarationError(
            f"unknown table_format {table_format!r}; known: {', '.join(FORMAT_DEFAULT_PROFILE)}"
        ) from None


def normalise_partitions(
    partitions: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None, allow_templates: bool = False
) -> tuple[Mapping[str, Any], ...] | None:
    if partitions is None:
        return None
    if isinstance(partitions, Mapping):
        partitions = [partitions]
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise InvalidFootprintError(
            f"partitions must be a mapping like {{'ds': '2024-01-01'}} or a list of them, got {partitions!r}"
        )
    out: list[Mapping[str, Any]] = []
    for spec in partitions:
        if allow_templates and isinstance(spec, Mapping) and any(
            isinstance(v, str) and _TEMPLATE_RE.search(v) for v in spec.values()
        ):
            # Columns are checked now; values once Airflow has rendered them.
            partition_key({k: "x" for k in spec} if spec else spec)
        else:
            partition_key(spec)
        out.append(dict(spec))
    return tuple(out) if out else None

"""A task's declared write: table, profile, operation and the partitions it touches.

Operators, admission control, the DAG linter and the pools planner all read the same object,
so a bad declaration is caught once, at DAG parse time, with one message.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .engines import table_kind
from .errors import InvalidDeclarationError, InvalidFootprintError
from .identifiers import canonical_location, canonical_table, shown, table_parts
from .operations import Operation
from .partvalues import string_typed_columns, typed_partition_spec
from .profiles import Cell, Profile, get_profile
from .ranges import canonical_spec_value, key_value_parts, string_key
from .tablefacts import TableFacts, physical_key_column

_PARTITION_COLUMN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEMPLATE_RE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")


def format_default_profile(table_format: str) -> str:
    """The profile ``table_format`` means when no profile is named: a format's or table kind's
    default, or a committer's (``delta-rs``: its own matrix, not Databricks'), as the facts of
    such a table with no property set give it. The names are the registry's
    (``core.engines.table_kinds``); an unknown one is an error naming the known."""
    kind = table_kind(table_format)
    return TableFacts(f"a {kind.name} table", kind.table_format, kind.engine, properties=kind.properties).profile_name()


class EngineProfileWarning(UserWarning):
    """The declared profile is not the matrix the engine that commits the write implements."""


def validate_table_identifier(table: str) -> str:
    """``table`` if it is a safe identifier (``catalog.db.table``), else an error saying why."""
    table_parts(table)
    return table


def partition_key(values: Mapping[str, Any], string_columns: Collection[str] = ()) -> str:
    """``{"ds": "2024-01-01", "country": "NL"}`` -> ``"country=NL/ds=2024-01-01"``: columns
    sorted and lower-cased, values canonical (``core.identifiers.canonical_value``: ``1``,
    ``1.0`` and ``"1"`` are one value; ``"2024-1-1"``, ``date(2024, 1, 1)`` and a midnight
    ``datetime`` are ``2024-01-01``); a ``core.ranges.ValueRange`` value gives its canonical
    bounds (``ds>=2024-01-01/ds<2024-02-01``). A text on one of ``string_columns`` (lower-cased
    names of STRING columns) is its own spelling (``core.ranges.string_key``: ``ds='2024-5-1'``)."""
    if not isinstance(values, Mapping) or not values:
        raise InvalidFootprintError(
            f"a partition spec is a non-empty mapping of column to value, got {shown(values)}"
        )
    parts = []
    for column in values:
        if not isinstance(column, str) or not _PARTITION_COLUMN_RE.fullmatch(column):
            raise InvalidFootprintError(f"invalid partition column {shown(column)}: use letters, digits, _")
    if len({c.lower() for c in values}) != len(values):
        raise InvalidFootprintError(f"partition spec {shown(dict(values))} names one column twice (columns ignore case)")
    for column in sorted(values, key=str.lower):
        value = values[column]
        if value is None or isinstance(value, (dict, list, tuple, set)):
            raise InvalidFootprintError(
                f"partition value for {column!r} must be a scalar, got {shown(value)}"
            )
        as_text = column.lower() in string_columns
        parts.extend(key_value_parts(column.lower(), canonical_spec_value(column, value, as_text=as_text)))
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
    # The profile the engine that commits the write really implements (``delta-rs`` for
    # DeltaWriteOperator), whatever profile the task declares: admission refuses the pairs this
    # profile says corrupt data even when the declared profile says they do not.
    engine_profile: str | None = None
    # Where the table is, when the engine writes a location (delta-rs's ``path``): then that
    # place, not the name, is the table to admission (two names for one path are one table).
    location: str | None = None
    # What admission keys the write by when the table says more than ``partitions`` do (issue 33:
    # Delta column mapping keys each partition by its physical column, ``core.tablereach``);
    # ``None``: ``partitions``. Set by the operator from the table's facts just before admission
    # (``keyed_by_reach``); the report, assets and logs keep ``partitions``.
    # Keyword-only: positional construction (``_declaration``) does not shift with it.
    admission_partitions: tuple[Mapping[str, Any], ...] | None = dataclasses.field(default=None, kw_only=True)
    # The partition columns the table types STRING (lower-cased; ``with_typed_partitions``): a text
    # declared on one is the partition of that spelling, ``"2024-5-1"`` is not ``2024-05-01``. The
    # keys say so (``partition_keys``); the values stay plain text for the engine and the report.
    string_columns: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if isinstance(self.string_columns, (str, bytes)) or not all(
            isinstance(c, str) for c in self.string_columns
        ):
            raise InvalidDeclarationError(
                f"string_columns is a set of column names, got {shown(self.string_columns)}"
            )
        object.__setattr__(self, "string_columns", frozenset(c.lower() for c in self.string_columns))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its profile's name (profiles hold their validators as closures): a
        declaration crosses a process boundary (``occflow lint`` reads DAG files in a child)."""
        return (_declaration, (self.table, self.profile.name, self.operation, self.partitions,
                               self.reads_whole_table, self.catalog, self.engine_profile, self.location,
                               self.string_columns))

    def __repr__(self) -> str:
        """One line: the profile by name (its matrix is tens of KB of cells)."""
        where = "whole table" if self.partitions is None else ", ".join(
            "/".join(f"{k}={v}" for k, v in spec.items()) for spec in self.partitions)
        extra = "".join(
            f", {name}={value!r}" for name, value in (
                ("reads_whole_table", self.reads_whole_table or None), ("catalog", self.catalog),
                ("engine_profile", self.engine_profile), ("location", self.location),
                ("string_columns", sorted(self.string_columns) or None)) if value is not None
        )
        return (f"WriteDeclaration({self.operation.value} on {self.table!r} [{where}], "
                f"profile={self.profile.name!r}{extra})")

    @property
    def table_key(self) -> str:
        """The table's canonical identity: its location when the declaration has one
        (``core.identifiers.canonical_location``), else its name (``canonical_table``)."""
        if self.location is not None:
            return canonical_location(self.location)
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
        catalog: str | None = None,
        engine_profile: str | None = None,
        location: str | None = None,
    ) -> WriteDeclaration:
        """Validate everything a user wrote; errors name the field and what would be right.

        With ``allow_templates`` (DAG parse time), Jinja templates in partition values are
        accepted and checked again after rendering. ``location`` names where the table is (a
        delta-rs path): then that place is the table's identity to admission, lint and pools,
        as it is for the operator that writes it.
        """
        validate_table_identifier(table)
        if catalog is not None:
            table_parts(catalog)
        if engine_profile is not None:
            get_profile(engine_profile)
        prof = resolve_profile(profile, table_format)
        op = prof.operation(operation)
        parts = normalise_partitions(partitions, allow_templates=allow_templates)
        if location is not None:
            if not isinstance(location, str) or not location.strip():
                raise InvalidDeclarationError(f"location must be a path or URI, got {location!r}")
            canonical_location(location)
        return cls(table, prof, op, parts, reads_whole_table, catalog, engine_profile, location)

    @property
    def engine_matrix(self) -> Profile:
        """The matrix of the engine that commits the write (the declared profile if unknown)."""
        return get_profile(self.engine_profile) if self.engine_profile else self.profile

    def engine_mismatch(self) -> str | None:
        """Why the declared profile does not describe the engine that commits, or None."""
        if self.engine_profile is None or self.engine_profile == self.profile.name:
            return None
        return (
            f"profile {self.profile.name!r} does not describe {self.engine_profile}, the engine that commits "
            f"this write: its matrix is not what the engine does (admission still refuses the pairs "
            f"that corrupt data under {self.engine_profile!r}); declare profile={self.engine_profile!r} or "
            "leave the profile out"
        )

    def corrupting_cells(self) -> tuple[Cell, ...]:
        """The engine's cells in which this operation and another both commit and corrupt the
        data (delta-rs: two OPTIMIZEs of one partition duplicate its rows)."""
        matrix = self.engine_matrix
        if self.operation not in matrix.operations:
            return ()
        return tuple(
            cell
            for cell in matrix.cells
            if self.operation in (cell.earlier, cell.later) and cell.effect.corrupts_data
        )

    def require_admission_or_opt_in(self, admission: bool, allow_unsafe_concurrency: bool, where: str) -> None:
        """Without admission, an operation that can corrupt data with a concurrent one needs the
        DAG's explicit ``allow_unsafe_concurrency=True``; the error names the pairs."""
        cells = self.corrupting_cells()
        if admission or allow_unsafe_concurrency or not cells:
            return
        pairs = ", ".join(
            f"{c.earlier.value} then {c.later.value} -> both commit, {c.effect.value}" for c in cells
        )
        raise InvalidDeclarationError(
            f"{where}: admission=False would let {self.operation.value} on {self.table} run beside a "
            f"write that corrupts the data on {self.engine_matrix.name} ({pairs}); keep admission on, "
            "or pass allow_unsafe_concurrency=True if nothing else can write this table at the same time"
        )

    def partition_keys(self) -> frozenset[str] | None:
        """The lease keys of the declared partitions. On a STRING column (``string_columns``) a
        text is its own spelling; a text value whose canonical form differs from its spelling
        (``"2024-5-1"``) names both when the column's type is unknown: on a DATE column it is the
        canonical day, on a STRING column its own text (issue 33)."""
        if not self.partitions:
            return None
        keys: set[str] = set()
        for spec in self.partitions:
            # Per column, the readings of its value: (column, value, read as a STRING column's text).
            choices = [[(c, v, as_text) for as_text in self._text_readings(c, v)] for c, v in spec.items()]
            keys.update(
                partition_key({c: v for c, v, _ in combo}, {c.lower() for c, _, as_text in combo if as_text})
                for combo in itertools.product(*choices)
            )
        return frozenset(keys)

    def _text_readings(self, column: str, value: Any) -> tuple[bool, ...]:
        """Whether ``value`` is keyed as a STRING column's text (``True``), as a canonical value
        (``False``), or both when the column's type is unknown and the two keys differ."""
        if not isinstance(value, str):
            return (False,)
        if column.lower() in self.string_columns:
            return (True,)
        if string_key(value) == canonical_spec_value(column, value):
            return (False,)
        return (False, True)

    def with_typed_partitions(self, column_types: Mapping[str, str], engine: str | None) -> WriteDeclaration:
        """The declaration with each partition value as ``engine`` writes it for the column's type
        (``core.partvalues.typed_partition_spec``: ``{"p": "07"}`` on an INT column is ``p=7``)."""
        if not self.partitions:
            return self
        typed = tuple(typed_partition_spec(spec, column_types, engine) for spec in self.partitions)
        return dataclasses.replace(
            self, partitions=typed, string_columns=self.string_columns | string_typed_columns(column_types)
        )

    def keyed_by_reach(self, facts: TableFacts) -> tuple[WriteDeclaration, tuple[str, ...]]:
        """This declaration as admission keys it once the table itself is counted
        (``TableFacts.reach``, issue 33), and why, one reason a line (empty: as declared). A reach
        of the whole table widens the declaration itself (the report says the write may touch any
        partition); a reach keyed otherwise (Delta column mapping's physical columns) is only what
        the claim, and so the commit fence, compare: ``admission_partitions``, while the report,
        the assets and the logs keep the partitions the user named. Call it after
        ``with_typed_partitions``: the reach keys the typed values. Both write operators call it;
        ``occflow explain`` calls ``facts.reach`` on the SQL's own partitions, the same rule."""
        if self.partitions is None:
            return self, ()
        reach = facts.reach(self.operation, self.partitions)
        if reach.partitions is None:
            return dataclasses.replace(self, partitions=None, admission_partitions=None), reach.why
        if not reach.why:
            return self, ()
        # A STRING column keeps keying text by its spelling under its physical name too.
        texts = {physical_key_column(facts.physical_columns[c]) for c in self.string_columns if c in facts.physical_columns}
        keyed = dataclasses.replace(self, admission_partitions=reach.partitions, string_columns=self.string_columns | texts)
        return keyed, reach.why

    def admission_claim(self) -> WriteDeclaration:
        """The declaration whose partitions the lease is keyed by: ``admission_partitions`` where
        the table's reach set them (``keyed_by_reach``), else this declaration itself."""
        if self.admission_partitions is None:
            return self
        return dataclasses.replace(self, partitions=self.admission_partitions, admission_partitions=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "profile": self.profile.name,
            "operation": self.operation.value,
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "reads_whole_table": self.reads_whole_table,
            "catalog": self.catalog,
            "engine_profile": self.engine_profile,
            "location": self.location,
            "string_columns": sorted(self.string_columns),
        }


def resolve_profile(profile: str | Profile | None, table_format: str | None) -> Profile:
    if profile is not None:
        return get_profile(profile)
    if table_format is None:
        raise InvalidDeclarationError("name a profile or a table_format ('delta', 'iceberg', 'maxcompute')")
    return get_profile(format_default_profile(table_format))


def normalise_partitions(
    partitions: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None, allow_templates: bool = False
) -> tuple[Mapping[str, Any], ...] | None:
    if partitions is None:
        return None
    if isinstance(partitions, Mapping):
        partitions = [partitions]
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise InvalidFootprintError(
            f"partitions must be a mapping like {{'ds': '2024-01-01'}} or a list of them, got {shown(partitions)}"
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


def _declaration(table: str, profile: str, operation: Operation, partitions: Any, reads_whole_table: bool,
                 catalog: str | None, engine_profile: str | None, location: str | None,
                 string_columns: frozenset[str] = frozenset()) -> WriteDeclaration:
    """``WriteDeclaration.__reduce__``'s other half: the profile looked up by its name again."""
    return WriteDeclaration(table, get_profile(profile), operation, partitions, reads_whole_table, catalog,
                            engine_profile, location, string_columns)

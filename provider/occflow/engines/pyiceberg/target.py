"""``PyIcebergTarget``: an Iceberg table in a catalog as the write flow runs writes on it through
pyiceberg (``WriteTarget``).

The operation dispatch is a table: each built-in operation is one function of the table, the
attempt's fresh snapshot and the write's parameters (``PyIcebergWrite``). A ``job`` callable
replaces it for anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.declaration import WriteDeclaration
from ...core.errors import InvalidDeclarationError
from ...core.observed import ObservedFootprint
from ...core.operations import Operation, check_retention
from ...core.tablefacts import TableFacts
from ..outcome import WriteOutcome
from ..target import AttemptContext
from .catalog import CatalogConfig
from .commit import CommitOptions
from .facts import isolation_level, pyiceberg_table_facts
from .ledger import PyIcebergLedger
from .maintenance import check_retain_last, expire_snapshots, expired_ids
from .observed import observe_pyiceberg_commit
from .table import ENGINE, PyIcebergTable, primitive_type, require_columns, where_expression

#: ``job(table, snapshot, commit, context) -> WriteOutcome`` for writes the built-in operations
#: do not cover; ``snapshot`` (a pyiceberg ``Table``) is freshly loaded for every attempt.
PyIcebergJob = Callable[..., WriteOutcome]

#: How an overwrite picks the rows it replaces: ``filter`` (the declared partition and ``where``)
#: or ``dynamic`` (every partition the data has rows in: Iceberg's ReplacePartitions).
OVERWRITE_MODES = ("filter", "dynamic")


@dataclass(frozen=True)
class PyIcebergWrite:
    """What a built-in pyiceberg operation needs besides the table: its parameters."""

    data: Any = None
    merge_keys: tuple[str, ...] = ()
    where: Mapping[str, Any] | None = None
    add_columns: Mapping[str, str] | None = None
    overwrite_mode: str = "filter"
    job: PyIcebergJob | None = field(default=None, compare=False)
    #: expire_snapshots: expire snapshots older than this (``None``: the table's
    #: ``history.expire.max-snapshot-age-ms``, 5 days by default), keeping the ``retain_last``
    #: newest (``None``: the table's ``history.expire.min-snapshots-to-keep``, 1); below the safe
    #: minimum only with ``allow_unsafe_retention=True``.
    older_than_hours: float | None = None
    retain_last: int | None = None
    allow_unsafe_retention: bool = False

    def check(self, operation: Operation, where: str) -> None:
        """An error naming what the operation needs and was not given (DAG parse time)."""
        # The floor the table itself sets is checked again when the expire runs (it reads it).
        check_retention(
            operation, self.older_than_hours, allow_unsafe_retention=self.allow_unsafe_retention, where=where
        )
        if operation is not Operation.EXPIRE_SNAPSHOTS and self.retain_last is not None:
            raise InvalidDeclarationError(f"{where}: retain_last is expire_snapshots', not {operation.value}'s")
        check_retain_last(self.retain_last, where)
        if operation is Operation.EXPIRE_SNAPSHOTS and self.where:
            raise InvalidDeclarationError(
                f"{where}: expire_snapshots works on the whole table's snapshots, it takes no where= (got {self.where!r})"
            )
        if self.overwrite_mode not in OVERWRITE_MODES:
            raise InvalidDeclarationError(
                f"{where}: overwrite_mode must be one of {', '.join(OVERWRITE_MODES)}, got {self.overwrite_mode!r}"
            )
        if self.job is not None:
            return
        if operation not in BUILT_IN:
            raise InvalidDeclarationError(
                f"{where}: PyIcebergWriteOperator runs {sorted(o.value for o in BUILT_IN)} itself; "
                f"give job=... for {operation.value}"
            )
        needs = {
            Operation.INSERT_INTO: (self.data is not None, "needs data=... (rows or a callable)"),
            Operation.INSERT_OVERWRITE: (self.data is not None, "needs data=... (rows or a callable)"),
            Operation.MERGE: (self.data is not None and bool(self.merge_keys),
                              "needs data=... and merge_keys=[...] (an upsert on those keys)"),
            Operation.ALTER_METADATA: (bool(self.add_columns), "needs add_columns={column: iceberg type}"),
        }
        given, message = needs.get(operation, (True, ""))
        if not given:
            raise InvalidDeclarationError(f"{where}: {operation.value} {message}")
        for name, kind in (self.add_columns or {}).items():
            primitive_type(kind, f"{where}: add_columns[{name!r}]")
        if self.overwrite_mode == "dynamic" and operation is not Operation.INSERT_OVERWRITE:
            raise InvalidDeclarationError(f"{where}: overwrite_mode='dynamic' is for insert_overwrite, not {operation.value}")


@dataclass(frozen=True)
class _Call:
    """One attempt's arguments to a built-in operation."""

    table: PyIcebergTable
    snapshot: Any
    filter: dict[str, Any] | None
    commit: CommitOptions
    write: PyIcebergWrite
    rows: Callable[[], Any]


def _overwrite(c: _Call) -> WriteOutcome:
    if c.write.overwrite_mode == "dynamic":
        return c.table.dynamic_overwrite(c.rows(), snapshot=c.snapshot, commit=c.commit)
    return c.table.overwrite(c.rows(), where=c.filter, snapshot=c.snapshot, commit=c.commit)


#: The built-in operations, one function each.
_OPERATIONS: dict[Operation, Callable[[_Call], WriteOutcome]] = {
    Operation.INSERT_INTO: lambda c: c.table.append(c.rows(), snapshot=c.snapshot, commit=c.commit),
    Operation.INSERT_OVERWRITE: _overwrite,
    Operation.DELETE: lambda c: c.table.delete(c.filter, snapshot=c.snapshot, commit=c.commit),
    Operation.TRUNCATE: lambda c: c.table.truncate(where=c.filter, snapshot=c.snapshot, commit=c.commit),
    Operation.MERGE: lambda c: c.table.merge(
        c.rows(), c.write.merge_keys, snapshot=c.snapshot, commit=c.commit, scope=c.filter
    ),
    Operation.ALTER_METADATA: lambda c: c.table.add_columns(c.write.add_columns or {}, snapshot=c.snapshot, commit=c.commit),
    Operation.EXPIRE_SNAPSHOTS: lambda c: expire_snapshots(
        c.table,
        older_than_hours=c.write.older_than_hours,
        retain_last=c.write.retain_last,
        allow_unsafe_retention=c.write.allow_unsafe_retention,
        snapshot=c.snapshot,
        commit=c.commit,
    ),
}
BUILT_IN = frozenset(_OPERATIONS)


def profile_of(properties: Mapping[str, str]) -> str:
    """The measured profile of a table with these properties (``pyiceberg-<level>``)."""
    return f"pyiceberg-{isolation_level(properties)}"


@dataclass
class PyIcebergTarget:
    """The Iceberg table ``identifier`` in ``catalog``, through pyiceberg."""

    catalog: CatalogConfig
    identifier: str
    write: PyIcebergWrite = field(default_factory=PyIcebergWrite)
    engine_name: str = ENGINE

    @property
    def table(self) -> PyIcebergTable:
        return PyIcebergTable(self.catalog, self.identifier)

    def prepare(self) -> None:
        """pyiceberg starts nothing: every attempt loads the table afresh."""

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        table = self.table
        snapshot = table.load()  # fresh for every attempt: a read-modify-write re-plans on it
        commit = CommitOptions(
            metadata=attempt.commit_metadata(declaration),
            before_commit=attempt.before_commit,
            fence=attempt.fence,
        )
        if self.write.job is not None:
            return self.write.job(table, snapshot, commit, attempt.user_context)

        def rows() -> Any:
            data = self.write.data
            return data(attempt.user_context, snapshot) if callable(data) else data

        return _OPERATIONS[declaration.operation](_Call(table, snapshot, row_filter(declaration, self.write), commit, self.write, rows))

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> PyIcebergLedger:
        """The table's snapshot log as the exactly-once ledger (docs/exactly-once.md)."""
        return PyIcebergLedger(self.table, only_if=only_if)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed snapshots really touched, read from their manifests."""
        ids = list(outcome.engine_details.get("snapshots") or ([] if outcome.snapshot_id is None else [outcome.snapshot_id]))
        if not ids or outcome.found is not None:
            return None  # nothing committed (a change to nothing, a schema change), or settled by exactly-once
        return observe_pyiceberg_commit(self.table, [int(i) for i in ids])

    def report_details(self, declaration: WriteDeclaration, outcome: WriteOutcome | None) -> Mapping[str, Any]:
        """An expire's report names the snapshots it removed (its commit has no snapshot of its own)."""
        if outcome is None or declaration.operation is not Operation.EXPIRE_SNAPSHOTS or not outcome.committed:
            return {}
        return {"expired_snapshots": expired_ids(outcome)}

    # ------------------------------------------------------------------ checks before admission

    def table_facts(self) -> TableFacts | None:
        """The table's facts (partition columns and types, properties); ``None`` when there is no
        table yet (the attempt reports pyiceberg's own error)."""
        table = self.table
        if not table.exists():
            return None
        return pyiceberg_table_facts(table)

    def check_profile(self, declaration: WriteDeclaration, facts: TableFacts | None) -> None:
        """The declared profile is the measured one the table's isolation levels give, or an
        error naming both (no table yet: nothing to check)."""
        if facts is None:
            return
        expected = profile_of(facts.properties)
        if declaration.profile.name != expected:
            raise InvalidDeclarationError(
                f"profile {declaration.profile.name!r} is not what pyiceberg does on {self.identifier}: its "
                f"write.update.isolation-level / write.delete.isolation-level give {expected!r}; declare "
                f"profile={expected!r} or leave the profile out"
            )

    def check_columns(self, declaration: WriteDeclaration) -> None:
        """The columns the built-in operation names (partitions, ``where``, merge keys) are in the
        table's schema; no table yet: the attempt reports pyiceberg's own error."""
        if self.write.job is not None or not self.table.exists():
            return
        columns = self.table.columns()
        where_expression(row_filter(declaration, self.write), columns, f"{declaration.operation.value} on {self.identifier}")
        if declaration.operation is Operation.MERGE:
            require_columns(self.write.merge_keys, columns, f"merge_keys on {self.identifier}")


def row_filter(declaration: WriteDeclaration, write: PyIcebergWrite) -> dict[str, Any] | None:
    """The rows a filtered operation works on: the declared partition and ``where`` together
    (``None``: the whole table). A write of several partitions is one task per partition."""
    parts = declaration.partitions or ()
    if len(parts) > 1:
        raise InvalidDeclarationError(
            f"{declaration.table}: the built-in pyiceberg operations write one partition; split the task per "
            "partition or give job=..."
        )
    merged = {**(dict(parts[0]) if parts else {}), **dict(write.where or {})}
    return merged or None


__all__ = ["BUILT_IN", "OVERWRITE_MODES", "PyIcebergJob", "PyIcebergTarget", "PyIcebergWrite", "profile_of", "row_filter"]

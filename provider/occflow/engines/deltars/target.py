"""``DeltaRsTarget``: a Delta table at a path as the write flow runs writes on it (``WriteTarget``).

The operation dispatch is a table: each built-in operation is one function of the table, the
attempt's fresh snapshot and the write's parameters (``DeltaRsWrite``). A ``job`` callable
replaces it for anything else.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ...core.declaration import WriteDeclaration
from ...core.errors import InvalidDeclarationError
from ...core.observed import ObservedFootprint
from ...core.operations import RETENTION_FLOORS, Operation, check_retention
from ...core.tablefacts import TableFacts
from ..outcome import WriteOutcome
from ..target import AttemptContext
from .commit import CommitOptions
from .facts import deltars_table_facts
from .ledger import DeltaRsLedger
from .observed import observe_deltars_commit
from .predicates import Where, column
from .table import ENGINE, DeltaRsTable, require_columns

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

#: ``job(table, snapshot, partition, commit, context) -> WriteOutcome`` for writes the built-in
#: operations do not cover; ``snapshot`` is freshly loaded for every attempt.
DeltaJob = Callable[..., WriteOutcome]


@dataclass(frozen=True)
class DeltaRsWrite:
    """What a built-in delta-rs operation needs besides the table: its parameters."""

    data: Any = None
    merge_keys: tuple[str, ...] = ()
    where: Mapping[str, Any] | None = None
    set_values: Mapping[str, Any] | None = None
    add_columns: Mapping[str, str] | None = None
    properties: Mapping[str, str] | None = None
    job: DeltaJob | None = field(default=None, compare=False)
    #: VACUUM: files removed longer ago than this are deleted (``None``: the table's
    #: ``delta.deletedFileRetentionDuration``, 1 week by default); below the safe minimum only
    #: with ``allow_unsafe_retention=True``; ``vacuum_full`` also deletes files no log entry names.
    retention_hours: float | None = None
    allow_unsafe_retention: bool = False
    vacuum_full: bool = False

    def check(self, operation: Operation, where: str) -> None:
        """An error naming what the operation needs and was not given (DAG parse time)."""
        # The floor the table itself sets is checked again when the vacuum runs (it reads it).
        check_retention(
            operation, self.retention_hours, allow_unsafe_retention=self.allow_unsafe_retention, where=where
        )
        if self.vacuum_full and operation is not Operation.VACUUM:
            raise InvalidDeclarationError(f"{where}: vacuum_full is VACUUM's, not {operation.value}'s")
        if self.job is not None:
            return
        if operation not in BUILT_IN:
            raise InvalidDeclarationError(
                f"{where}: DeltaWriteOperator runs {sorted(o.value for o in BUILT_IN)} itself; "
                f"give job=... for {operation.value}"
            )
        needs = {
            Operation.INSERT_INTO: (self.data is not None, "needs data=... (rows or a callable)"),
            Operation.INSERT_OVERWRITE: (self.data is not None, "needs data=... (rows or a callable)"),
            Operation.MERGE: (self.data is not None, "needs data=... (rows or a callable)"),
            Operation.UPDATE: (bool(self.set_values), "needs set_values={column: value}"),
            Operation.ALTER_METADATA: (
                bool(self.add_columns or self.properties),
                "needs add_columns or properties",
            ),
        }
        given, message = needs.get(operation, (True, ""))
        if not given:
            raise InvalidDeclarationError(f"{where}: {operation.value} {message}")
        if operation is Operation.MERGE and not self.merge_keys:
            raise InvalidDeclarationError(f"{where}: merge needs merge_keys=[...]")


@dataclass(frozen=True)
class _Call:
    """One attempt's arguments to a built-in operation."""

    table: DeltaRsTable
    snapshot: Any
    partition: dict[str, Any] | None
    commit: CommitOptions
    write: DeltaRsWrite
    rows: Callable[[], Any]

    @property
    def where(self) -> Where | None:
        return Where.equals(self.write.where) if self.write.where else None


_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+(\w+?)s?\s*$", re.IGNORECASE)
_UNIT_HOURS = {
    "nanosecond": 1 / 3.6e12, "microsecond": 1 / 3.6e9, "millisecond": 1 / 3.6e6, "second": 1 / 3600,
    "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0,
}


def retention_property_hours(value: str | None) -> float | None:
    """``delta.deletedFileRetentionDuration`` (``"interval 7 days"``) in hours; ``None`` unset.
    A value Delta would not read is an error naming it: the floor must not be guessed."""
    if value is None:
        return None
    found = _INTERVAL.match(value)
    if found is None or found.group(2).lower() not in _UNIT_HOURS:
        raise InvalidDeclarationError(
            f"delta.deletedFileRetentionDuration is {value!r}, not an interval Delta reads "
            "('interval 7 days', 'interval 168 hours')"
        )
    return float(found.group(1)) * _UNIT_HOURS[found.group(2).lower()]


def vacuum(
    table: DeltaRsTable,
    *,
    retention_hours: float | None = None,
    allow_unsafe_retention: bool = False,
    full: bool = False,
    snapshot: DeltaTable | None = None,
    commit: CommitOptions | None = None,
) -> WriteOutcome:
    """Delete the files no version younger than ``retention_hours`` references (the table's
    ``delta.deletedFileRetentionDuration``, 1 week by default, when ``None``); ``full`` also
    deletes files no log entry names (a running writer's uncommitted files among them).

    A retention below the safe minimum (``RETENTION_FLOORS``, or the table's own longer setting)
    is refused before anything is deleted, unless ``allow_unsafe_retention=True``: then delta-rs's
    own check is turned off too (``enforce_retention_duration=False``).
    """
    current = snapshot if snapshot is not None else table.load()
    configured = retention_property_hours(
        current.metadata().configuration.get(RETENTION_FLOORS[Operation.VACUUM].table_property)
    )
    check_retention(
        Operation.VACUUM,
        retention_hours,
        table_minimum_hours=configured,
        allow_unsafe_retention=allow_unsafe_retention,
        where=f"vacuum of {table.uri}",
    )
    hours = None if retention_hours is None else int(retention_hours)
    if retention_hours is not None and hours != retention_hours:
        raise InvalidDeclarationError(
            f"vacuum of {table.uri}: delta-rs takes whole hours, retention_hours={retention_hours!r}"
        )

    def run(loaded: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
        assert loaded is not None
        deleted = loaded.vacuum(
            retention_hours=hours,
            dry_run=False,
            enforce_retention_duration=not allow_unsafe_retention,
            commit_properties=props,
            full=full,
        )
        return {"num_deleted_files": len(deleted)}

    return table._run(Operation.VACUUM, current, run, commit)


def _alter(c: _Call) -> WriteOutcome:
    if c.write.add_columns:
        return c.table.add_columns(c.write.add_columns, snapshot=c.snapshot, commit=c.commit)
    return c.table.set_properties(c.write.properties or {}, snapshot=c.snapshot, commit=c.commit)


#: The built-in operations, one function each.
_OPERATIONS: dict[Operation, Callable[[_Call], WriteOutcome]] = {
    Operation.INSERT_INTO: lambda c: c.table.append(c.rows(), snapshot=c.snapshot, commit=c.commit),
    Operation.INSERT_OVERWRITE: lambda c: c.table.overwrite(
        c.rows(), where=c.where, partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.MERGE: lambda c: c.table.merge(
        c.rows(), c.write.merge_keys, partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.DELETE: lambda c: c.table.delete(
        c.where, partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.TRUNCATE: lambda c: c.table.truncate(
        partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.UPDATE: lambda c: c.table.update(
        c.where, set_values=c.write.set_values, partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.OPTIMIZE: lambda c: c.table.optimize(
        partition=c.partition, snapshot=c.snapshot, commit=c.commit
    ),
    Operation.ALTER_METADATA: _alter,
    Operation.VACUUM: lambda c: vacuum(
        c.table,
        retention_hours=c.write.retention_hours,
        allow_unsafe_retention=c.write.allow_unsafe_retention,
        full=c.write.vacuum_full,
        snapshot=c.snapshot,
        commit=c.commit,
    ),
}
BUILT_IN = frozenset(_OPERATIONS)
#: Built-in operations whose predicate (where=, partitions) names columns.
PREDICATE_OPERATIONS = frozenset(
    {Operation.INSERT_OVERWRITE, Operation.DELETE, Operation.TRUNCATE, Operation.UPDATE}
)


@dataclass
class DeltaRsTarget:
    """The Delta table at ``path`` through delta-rs."""

    path: str
    write: DeltaRsWrite = field(default_factory=DeltaRsWrite)
    storage_options: Mapping[str, str] | None = None
    table_name: str | None = None
    engine_name: str = ENGINE

    @property
    def table(self) -> DeltaRsTable:
        return DeltaRsTable(self.path, dict(self.storage_options) if self.storage_options else None)

    def prepare(self) -> None:
        """delta-rs starts nothing: every attempt loads the table afresh."""

    def exists(self) -> bool:
        try:
            self.table.load()
        except Exception:  # noqa: BLE001 - delta-rs raises TableNotFoundError (a DeltaError) when absent
            return False
        return True

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        table = self.table
        fence = attempt.commit_fence()
        if fence is not None and fence.supersedes:
            # Leases this write supersedes lapsed, their holders may be stalled inside delta-rs:
            # before reading, make the engine refuse their commits (core.fencing).
            table.fence_out(fence)
        snapshot = table.load()  # fresh for every attempt: a read-modify-write re-plans on it
        partition = single_partition(declaration)
        # before_commit: the lease is live and no other try committed this write (delta-rs runs
        # it right before the engine call, which then reads, rewrites and commits: a stall in
        # there is caught by the fence above, made by the write admitted in its place).
        commit = CommitOptions(
            metadata=attempt.commit_metadata(declaration),
            before_commit=attempt.before_commit,
            fence=attempt.fence,
            commit_fence=attempt.commit_fence,
        )
        if self.write.job is not None:
            return self.write.job(table, snapshot, partition, commit, attempt.user_context)

        def rows() -> Any:
            data = self.write.data
            if not callable(data):
                return data
            return data(attempt.user_context, snapshot, **data_arguments(data, declaration))

        return _OPERATIONS[declaration.operation](_Call(table, snapshot, partition, commit, self.write, rows))

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> DeltaRsLedger:
        """The delta-rs ledger of the table (exactly once, docs/exactly-once.md); ``only_if``:
        only the operator's own commits (its commit metadata names the task instance) get the
        tag, a data callable that writes the same table is another writer."""
        return DeltaRsLedger(self.table, only_if=only_if)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed version really touched, read from the table's Delta log."""
        if outcome.version is None:
            return None  # nothing committed (a change to nothing), or settled by exactly-once
        return observe_deltars_commit(self.path, outcome.version, dict(self.storage_options or {}) or None)

    def report_details(
        self, declaration: WriteDeclaration, outcome: WriteOutcome | None
    ) -> Mapping[str, Any]:
        return {}

    # ------------------------------------------------------------------ checks before admission

    def table_facts(self) -> TableFacts | None:
        """The table's facts, read from its log (profile, partition columns and their types);
        ``None`` when there is no table yet (the attempt reports delta-rs's own error)."""
        try:
            return deltars_table_facts(self.path, dict(self.storage_options or {}) or None, table=self.table_name)
        except InvalidDeclarationError:
            raise
        except Exception:  # noqa: BLE001 - no table yet
            return None

    def check_profile(self, declaration: WriteDeclaration, facts: TableFacts | None) -> None:
        """The table's facts (``table_facts()``) against the declared profile (raises
        ``InvalidDeclarationError`` when they contradict it); no table yet: nothing to check."""
        if facts is not None:
            facts.check_declared_profile(declaration.profile, declaration.operation)

    def check_columns(self, declaration: WriteDeclaration) -> None:
        """The columns the built-in operation names (partitions, ``where``, ``set_values``) are
        in the table's schema; no table yet: the attempt reports delta-rs's own error."""
        op = declaration.operation
        if self.write.job is not None or op not in PREDICATE_OPERATIONS:
            return
        names = {*(self.write.where or {}), *(k for p in declaration.partitions or () for k in p)}
        if op is Operation.UPDATE:
            names |= set(self.write.set_values or {})
        if not names:
            return
        table = self.table
        try:
            snapshot = table.load()
        except Exception:  # noqa: BLE001 - no table yet
            return
        where = f"{op.value} on " + (
            self.path if self.table_name is None else f"{self.table_name} (at {self.path})"
        )
        require_columns(snapshot, names, where)

    def create(self, schema: Any, partition_by: Sequence[str]) -> bool:
        """The table created empty when it is not there (``True`` when this call created it).

        Two tasks creating it at once both end with the table: the second sees delta-rs's
        "already exists" and finds the first one's table."""
        if self.exists():
            return False
        outcome = self.table.create(schema.empty_table(), partition_by=list(partition_by))
        if outcome.committed:
            return True
        if not self.exists():
            raise InvalidDeclarationError(
                f"could not create {self.table_name or self.path} at {self.path}: "
                f"{outcome.error.text if outcome.error else outcome}"
            )
        return False

    # ------------------------------------------------------------------ links

    def log_url(self, version: int | None = None) -> str:
        """A commit's file in the table's ``_delta_log`` (the log itself without ``version``):
        ``file://`` for a local path, the location's own scheme (``s3://``, ...) otherwise."""
        name = "" if version is None else f"{int(version):020d}.json"
        location = self.path
        if urlsplit(location).scheme in ("", "file") or Path(location).is_absolute():
            local = Path(urlsplit(location).path if location.startswith("file:") else location).resolve()
            return (local / "_delta_log").as_uri() + "/" + name
        return location.rstrip("/") + "/_delta_log/" + name


def new_table_schema(
    schema: Any, partition_by: Sequence[str] | None, declared_columns: Sequence[str], where: str
) -> tuple[Any, list[str]]:
    """The pyarrow schema and partition columns of a table to create from ``schema`` (a pyarrow
    schema or ``{column: delta type}``); an error naming the column or type that is wrong."""
    import pyarrow as pa  # optional heavy dependency (delta-rs's Arrow)
    from deltalake import Field, Schema  # optional heavy dependency
    from deltalake.schema import PrimitiveType  # optional heavy dependency

    if isinstance(schema, pa.Schema):
        arrow = schema
    elif isinstance(schema, Mapping) and schema:
        fields = []
        for name, kind in schema.items():
            column(str(name))
            try:
                fields.append(Field(str(name), PrimitiveType(str(kind)), nullable=True))
            except Exception:  # noqa: BLE001 - delta-rs raises its own error type for a bad type name
                raise InvalidDeclarationError(
                    f"{where}: column {name!r} has type {kind!r}, not a Delta primitive type (string, "
                    "long, integer, double, boolean, date, timestamp, decimal(p,s), ...)"
                ) from None
        arrow = pa.schema(Schema(fields).to_arrow())
    else:
        raise InvalidDeclarationError(
            f"{where} needs schema=: a pyarrow schema or {{column: delta type}}, got {schema!r}"
        )
    columns = list(partition_by if partition_by is not None else declared_columns)
    missing = [c for c in columns if c not in arrow.names]
    if missing:
        raise InvalidDeclarationError(
            f"{where}: partition column(s) {missing} are not in the schema ({', '.join(arrow.names)})"
        )
    return arrow, columns


def data_arguments(data: Callable[..., Any], declaration: WriteDeclaration) -> dict[str, Any]:
    """The keyword arguments a ``data`` callable asks for by name: ``declaration`` (the rendered
    declaration) and ``partition`` (its single partition, or ``None``); a ``**kwargs`` callable
    gets both. ``data(context, snapshot)`` gets neither."""
    try:
        parameters = inspect.signature(data).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the two positional arguments
        return {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    offered: dict[str, Callable[[], Any]] = {
        "declaration": lambda: declaration,
        "partition": lambda: (
            None
            if not declaration.partitions or len(declaration.partitions) != 1
            else dict(declaration.partitions[0])
        ),
    }
    return {
        name: make()
        for name, make in offered.items()
        if takes_all
        or (name in parameters and parameters[name].kind is not inspect.Parameter.POSITIONAL_ONLY)
    }


def single_partition(declaration: WriteDeclaration) -> dict[str, Any] | None:
    if not declaration.partitions:
        return None
    if len(declaration.partitions) > 1:
        raise InvalidDeclarationError(
            f"{declaration.table}: the built-in delta-rs operations write one partition; "
            "split the task per partition or give job=..."
        )
    return dict(declaration.partitions[0])


__all__ = [
    "BUILT_IN",
    "retention_property_hours",
    "vacuum",
    "PREDICATE_OPERATIONS",
    "DeltaJob",
    "DeltaRsTarget",
    "DeltaRsWrite",
    "data_arguments",
    "new_table_schema",
    "single_partition",
]

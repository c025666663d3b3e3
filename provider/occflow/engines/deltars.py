"""delta-rs: the real Delta protocol on a local path (or any URI ``deltalake`` opens).

Every write returns a :class:`WriteOutcome`: the committed version, the rows the operation's
metrics report and the seconds it took, or the engine's error with its classification. A
conflict is never raised from here: the caller decides from the classification.

Predicates are built here from validated column names and quoted literals (:class:`Where`), so a
partition value such as ``x' OR '1'='1`` stays a string literal and never becomes SQL.

The module also contributes delta-rs's conformance runners (``conformance_runners``): every
ordered pair of the Delta profiles' operations on one partition of a fresh real table, the later
job planned on the earlier job's snapshot and committed after it.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import decimal
import math
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidDeclarationError
from ..core.kinds import Classification
from ..core.operations import Operation
from .conformance import Observation
from .outcome import ErrorInfo, WriteOutcome

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

ENGINE = "delta-rs"

# Column names as Delta and DataFusion both accept them unquoted; anything else is refused
# rather than escaped, so a name never carries SQL.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMPARATORS = frozenset({"=", "!=", "<", "<=", ">", ">="})
_COMMIT_ID_KEY = "occflow.commit_id"

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


def _partition_where(partition: Mapping[str, Literal] | None) -> Where | None:
    return None if not partition else Where.equals(partition)


def _partition_filters(partition: Mapping[str, Literal] | None) -> list[tuple[str, str, Any]] | None:
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


@dataclass(frozen=True)
class CommitOptions:
    """What delta-rs records with a commit: custom commit info, app transactions, retries.

    ``app_id`` / ``app_version`` write a Delta ``txn`` action (what exactly-once writers check
    with :meth:`DeltaRsTable.app_version`); delta-rs fails a commit whose app id a concurrent
    winner also wrote (``concurrent_transaction``).
    """

    metadata: Mapping[str, str] = field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    max_commit_retries: int | None = None

    def __post_init__(self) -> None:
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidDeclarationError("an app transaction needs both app_id and app_version")
        if self.app_version is not None and self.app_version < 0:
            raise InvalidDeclarationError(f"app_version must be >= 0, got {self.app_version}")
        if self.max_commit_retries is not None and self.max_commit_retries < 0:
            raise InvalidDeclarationError(f"max_commit_retries must be >= 0, got {self.max_commit_retries}")

    def properties(self, commit_id: str) -> CommitProperties:
        from deltalake import CommitProperties, Transaction

        ambient = _AMBIENT_COMMIT.get()
        if ambient is not None and self.app_id is None:  # ambient options always name one
            options, only_if = ambient
            if all(self.metadata.get(k) == v for k, v in only_if.items()):
                return options.merged_over(self).properties(commit_id)
        metadata = {**self.metadata, _COMMIT_ID_KEY: commit_id}
        txns = None
        if self.app_id is not None and self.app_version is not None:
            txns = [Transaction(app_id=self.app_id, version=self.app_version)]
        return CommitProperties(
            custom_metadata=metadata, max_commit_retries=self.max_commit_retries, app_transactions=txns
        )

    def merged_over(self, other: CommitOptions) -> CommitOptions:
        """``other`` with this one's app transaction and metadata added (this one wins)."""
        return CommitOptions(
            metadata={**other.metadata, **self.metadata},
            app_id=self.app_id,
            app_version=self.app_version,
            max_commit_retries=other.max_commit_retries if self.max_commit_retries is None else self.max_commit_retries,
        )


# Commit options every delta-rs commit made inside ``ambient_commit`` carries: how an operator
# puts its exactly-once tag on commits made by jobs it does not build (occflow.engines.tags).
_AMBIENT_COMMIT: contextvars.ContextVar[tuple[CommitOptions, Mapping[str, str]] | None] = contextvars.ContextVar(
    "occflow_ambient_commit", default=None
)


@contextlib.contextmanager
def ambient_commit(options: CommitOptions, only_if: Mapping[str, str] | None = None) -> Iterator[None]:
    """Inside, every commit whose own options name no app transaction gets ``options`` merged in.

    ``only_if``: only commits whose metadata holds all these entries (e.g. the operator's own
    commit, which names its task), so another writer called during the attempt stays untagged.
    """
    if options.app_id is None:
        raise InvalidDeclarationError("ambient commit options must name an app transaction (app_id, app_version)")
    token = _AMBIENT_COMMIT.set((options, dict(only_if or {})))
    try:
        yield
    finally:
        _AMBIENT_COMMIT.reset(token)


# Which operation metric counts the rows a write touched.
_ROW_METRICS: dict[Operation, tuple[str, ...]] = {
    Operation.INSERT_INTO: ("num_added_rows",),
    Operation.INSERT_OVERWRITE: ("num_added_rows",),
    Operation.TRUNCATE: ("num_deleted_rows",),
    Operation.DELETE: ("num_deleted_rows",),
    Operation.UPDATE: ("num_updated_rows",),
    Operation.MERGE: ("num_target_rows_inserted", "num_target_rows_updated", "num_target_rows_deleted"),
}


class DeltaRsTable:
    """One Delta table operated through delta-rs. Every write returns a :class:`WriteOutcome`.

    ``snapshot`` (on every write) is a ``DeltaTable`` already loaded at some version: the write
    plans on that snapshot, so a concurrent writer that committed since makes delta-rs run its
    conflict checker. Without it the write loads the latest version.
    """

    engine = ENGINE

    def __init__(self, uri: str | Path, storage_options: Mapping[str, str] | None = None) -> None:
        text = str(uri)
        if not text.strip():
            raise InvalidDeclarationError("a Delta table needs a path or URI, got an empty string")
        self.uri = text
        self.storage_options = dict(storage_options or {})

    def __repr__(self) -> str:
        return f"DeltaRsTable({self.uri!r})"

    # -- reading ------------------------------------------------------------------------------

    def load(self, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)

    def version(self) -> int:
        return int(self.load().version())

    def app_version(self, app_id: str) -> int | None:
        """The last version committed for ``app_id`` (Delta ``txn`` action), or ``None``."""
        found = self.load().transaction_version(app_id)
        return None if found is None else int(found)

    # -- writes -------------------------------------------------------------------------------

    def create(
        self,
        data: Any,
        partition_by: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Create the table from ``data``; it is an error (in the outcome) if it exists."""
        from deltalake import write_deltalake

        cols = [column(c) and c for c in partition_by]

        def run(_: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            write_deltalake(
                self.uri,
                data,
                partition_by=cols or None,
                mode="error",
                configuration=dict(configuration or {}),
                storage_options=self.storage_options or None,
                commit_properties=props,
            )
            return None

        return self._run(Operation.INSERT_INTO, None, run, commit, load=False)

    def append(self, data: Any, *, snapshot: DeltaTable | None = None, commit: CommitOptions | None = None) -> WriteOutcome:
        from deltalake import write_deltalake

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            write_deltalake(table or self.uri, data, mode="append", commit_properties=props)
            return None

        return self._run(Operation.INSERT_INTO, snapshot, run, commit)

    def overwrite(
        self,
        data: Any,
        *,
        where: Where | None = None,
        partition: Mapping[str, Literal] | None = None,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Replace the rows matching ``where`` / ``partition`` (the whole table with neither)."""
        from deltalake import write_deltalake

        predicate = _combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            write_deltalake(
                table or self.uri,
                data,
                mode="overwrite",
                predicate=None if predicate is None else predicate.sql(),
                commit_properties=props,
            )
            return None

        return self._run(Operation.INSERT_OVERWRITE, snapshot, run, commit)

    def delete(
        self,
        where: Where | None = None,
        *,
        partition: Mapping[str, Literal] | None = None,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
        operation: Operation = Operation.DELETE,
    ) -> WriteOutcome:
        """Delete matching rows; with neither ``where`` nor ``partition`` every row (a truncate)."""
        predicate = _combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            return table.delete(None if predicate is None else predicate.sql(), commit_properties=props)

        return self._run(operation, snapshot, run, commit)

    def truncate(
        self,
        *,
        partition: Mapping[str, Literal] | None = None,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Remove every row of the partition (or table): a delete whose predicate is the partition."""
        return self.delete(partition=partition, snapshot=snapshot, commit=commit, operation=Operation.TRUNCATE)

    def update(
        self,
        where: Where | None = None,
        *,
        set_values: Mapping[str, Literal] | None = None,
        set_expressions: Mapping[str, str] | None = None,
        partition: Mapping[str, Literal] | None = None,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Set columns to values (quoted by delta-rs) or to SQL expressions the caller writes."""
        if not set_values and not set_expressions:
            raise InvalidDeclarationError("an update needs set_values or set_expressions")
        values: dict[str, Any] = {column(k) and k: v for k, v in (set_values or {}).items()}
        for v in values.values():
            literal(v)
        expressions = {column(k) and k: v for k, v in (set_expressions or {}).items()}
        predicate = _combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            return table.update(
                updates=expressions or None,
                new_values=values or None,
                predicate=None if predicate is None else predicate.sql(),
                commit_properties=props,
            )

        return self._run(Operation.UPDATE, snapshot, run, commit)

    def merge(
        self,
        source: Any,
        keys: Sequence[str],
        *,
        partition: Mapping[str, Literal] | None = None,
        update_matched: bool = True,
        insert_unmatched: bool = True,
        delete_matched: bool = False,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """MERGE ``source`` on ``keys``; ``partition`` narrows the target (and the conflict check).

        delta-rs checks conflicts against the merge predicate: naming the partition in it keeps
        merges into disjoint partitions from conflicting.
        """
        if not keys:
            raise InvalidDeclarationError("a merge needs at least one key column")
        if not (update_matched or insert_unmatched or delete_matched):
            raise InvalidDeclarationError("a merge needs at least one clause (update, insert or delete)")
        if update_matched and delete_matched:
            raise InvalidDeclarationError("a merge either updates or deletes matched rows, not both")
        on = " AND ".join(f"t.{column(k)} = s.{column(k)}" for k in keys)
        part = _partition_where(partition)
        predicate = on if part is None else f"{on} AND {part.sql('t')}"

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            merger = table.merge(
                source, predicate=predicate, source_alias="s", target_alias="t", commit_properties=props
            )
            if update_matched:
                merger = merger.when_matched_update_all()
            if delete_matched:
                merger = merger.when_matched_delete()
            if insert_unmatched:
                merger = merger.when_not_matched_insert_all()
            result: dict[str, Any] = merger.execute()
            return result

        return self._run(Operation.MERGE, snapshot, run, commit)

    def optimize(
        self,
        *,
        partition: Mapping[str, Literal] | None = None,
        z_order: Sequence[str] = (),
        target_size: int | None = None,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Compact small files (or z-order by ``z_order`` columns) in a partition or the table."""
        filters = _partition_filters(partition)
        order = [column(c) and c for c in z_order]

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            if order:
                return table.optimize.z_order(
                    order, partition_filters=filters, target_size=target_size, commit_properties=props
                )
            return table.optimize.compact(
                partition_filters=filters, target_size=target_size, commit_properties=props
            )

        return self._run(Operation.OPTIMIZE, snapshot, run, commit)

    def add_columns(
        self,
        columns: Mapping[str, str],
        *,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Add nullable columns, ``{"name": "string"}`` (Delta primitive type names)."""
        from deltalake import Field
        from deltalake.schema import PrimitiveType

        if not columns:
            raise InvalidDeclarationError("add_columns needs at least one column")
        fields = []
        for name, kind in columns.items():
            column(name)
            try:
                delta_type = PrimitiveType(kind)
            except Exception as exc:  # delta-rs raises its own error type for an unknown type name
                raise InvalidDeclarationError(
                    f"column {name!r}: {kind!r} is not a Delta primitive type (string, long, integer, "
                    f"double, boolean, date, timestamp, decimal(p,s), ...): {exc}"
                ) from None
            fields.append(Field(name, delta_type, nullable=True))

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            table.alter.add_columns(fields, commit_properties=props)
            return None

        return self._run(Operation.ALTER_METADATA, snapshot, run, commit)

    def set_properties(
        self,
        properties: Mapping[str, str],
        *,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Set table properties (``delta.*`` ones are validated by delta-rs)."""
        if not properties:
            raise InvalidDeclarationError("set_properties needs at least one property")
        props_in = {str(k): str(v) for k, v in properties.items()}

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            table.alter.set_table_properties(props_in, raise_if_not_exists=False, commit_properties=props)
            return None

        return self._run(Operation.ALTER_METADATA, snapshot, run, commit)

    # -- the one place that runs, times and records a write ------------------------------------

    def _run(
        self,
        operation: Operation,
        snapshot: DeltaTable | None,
        fn: Callable[[DeltaTable | None, CommitProperties], dict[str, Any] | None],
        commit: CommitOptions | None,
        load: bool = True,
    ) -> WriteOutcome:
        commit_id = uuid.uuid4().hex
        options = commit or CommitOptions()
        tag = {"commit_id": commit_id}
        if options.app_id is not None:
            tag["app_id"] = options.app_id
            tag["app_version"] = str(options.app_version)
        start = time.perf_counter()
        try:
            table = snapshot if snapshot is not None else (self.load() if load else None)
            if snapshot is not None:
                tag["read_version"] = str(snapshot.version())
            metrics = fn(table, options.properties(commit_id))
        except InvalidDeclarationError:
            raise
        except Exception as exc:  # noqa: BLE001 - every engine failure becomes an outcome
            seconds = time.perf_counter() - start
            return WriteOutcome(
                engine=ENGINE,
                table=self.uri,
                operation=operation,
                committed=False,
                seconds=seconds,
                error=error_info(exc),
                classification=classify_error(exc),
                tag=tag,
            )
        seconds = time.perf_counter() - start
        version, commit_metrics = self._find_commit(commit_id)
        if version is None:
            # delta-rs writes no commit when an operation changes nothing (a delete that matched
            # no row); the write succeeded, but there is no version to name
            tag["version"] = "none: no commit carries this write's id (nothing changed)"
        rows = _rows(operation, metrics if metrics is not None else commit_metrics)
        return WriteOutcome(
            engine=ENGINE,
            table=self.uri,
            operation=operation,
            committed=True,
            seconds=seconds,
            version=version,
            rows=rows,
            tag=tag,
        )

    def _find_commit(self, commit_id: str, depth: int = 50) -> tuple[int | None, dict[str, Any]]:
        """Our commit's version and metrics, found by the id we wrote into its commit info.

        Looked up rather than taken from the table object, whose version may already include
        a concurrent writer's later commit.
        """
        for entry in self.load().history(depth):
            if entry.get(_COMMIT_ID_KEY) == commit_id:
                return int(entry["version"]), dict(entry.get("operationMetrics") or {})
        return None, {}


def _combine(where: Where | None, partition: Mapping[str, Literal] | None) -> Where | None:
    part = _partition_where(partition)
    if where is None:
        return part
    return where.and_(part)


def _rows(operation: Operation, metrics: Mapping[str, Any]) -> int | None:
    keys = _ROW_METRICS.get(operation, ())
    values = [metrics[k] for k in keys if isinstance(metrics.get(k), int)]
    return sum(values) if values else None


def error_info(exc: BaseException) -> ErrorInfo:
    """The exception as the outcome records it: class, message chain, cause classes."""
    messages = [str(exc)]
    causes: list[str] = []
    seen = {id(exc)}
    cur = exc.__cause__ or exc.__context__
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        causes.append(type(cur).__name__)
        messages.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return ErrorInfo(exception_class=type(exc).__name__, messages=tuple(messages), cause_classes=tuple(causes))


def classify_error(exc: BaseException) -> Classification:
    """``occflow.core.classify``: the one place that knows delta-rs's conflict texts."""
    from ..core.classify import classify

    return classify(exc)


# ---------------------------------------------------------------------------------------------
# Conformance: every ordered pair of canonical operations on one partition of a real table.

#: The partition both jobs of a pair work on; ``other`` holds rows no job touches.
PAIR_PARTITION = "a"
OTHER_PARTITION = "b"

_ISOLATION = {
    "WriteSerializable": ("delta-rs", ("delta-write-serializable",)),
    "Serializable": ("delta-rs", ("delta-serializable",)),
}


def _rows_table(part: str, ids: Sequence[int], value: int) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "part": pa.array([part] * len(ids), pa.string()),
            "value": pa.array([value] * len(ids), pa.int64()),
        }
    )


@dataclass(frozen=True)
class PairJobs:
    """How each canonical operation is run on partition ``a`` by one job of a pair.

    ``role`` ("earlier" / "later") gives the two jobs different rows, so neither writes what the
    other wrote; both stay inside the partition.
    """

    table: DeltaRsTable

    def run(self, op: Operation, snapshot: DeltaTable, role: str) -> WriteOutcome:
        part = {"part": PAIR_PARTITION}
        base = 100 if role == "earlier" else 200
        commit = CommitOptions(metadata={"occflow.conformance": f"{role}:{op.value}"})
        if op is Operation.INSERT_INTO:
            return self.table.append(_rows_table(PAIR_PARTITION, [base + 1], base), snapshot=snapshot, commit=commit)
        if op is Operation.INSERT_OVERWRITE:
            return self.table.overwrite(
                _rows_table(PAIR_PARTITION, [base + 1, base + 2], base), partition=part, snapshot=snapshot, commit=commit
            )
        if op is Operation.TRUNCATE:
            return self.table.truncate(partition=part, snapshot=snapshot, commit=commit)
        # Row-level jobs read the whole partition, as the matrix's "two jobs on one partition"
        # means: delta-rs matches its read predicate against file statistics, so a predicate
        # on a few ids would let jobs on disjoint files pass (shown separately in the tests).
        if op is Operation.UPDATE:
            return self.table.update(set_values={"value": base}, partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.DELETE:
            # "id != k" cannot be pruned by statistics: every file of the partition is read
            keep = 1 if role == "earlier" else 2
            return self.table.delete(Where((Compare("id", "!=", keep),)), partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.MERGE:
            source = _rows_table(PAIR_PARTITION, [1 if role == "earlier" else 2, base + 5], base)
            return self.table.merge(source, ["id"], partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.OPTIMIZE:
            return self.table.optimize(partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.ALTER_METADATA:
            return self.table.set_properties(
                {f"occflow.conformance.{role}": "1"}, snapshot=snapshot, commit=commit
            )
        raise InvalidDeclarationError(f"delta-rs conformance has no job for operation {op.value!r}")


@dataclass
class DeltaRsPairRunner:
    """Runs pairs on fresh delta-rs tables under ``workdir`` at one ``delta.isolationLevel``."""

    workdir: Path
    isolation: str = "WriteSerializable"
    engine: str = ENGINE
    profile: str = field(init=False)
    compare_with: tuple[str, ...] = field(init=False)
    label: str = field(init=False)
    _count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.label = f"delta-rs {self.isolation}"
        try:
            self.profile, self.compare_with = _ISOLATION[self.isolation]
        except KeyError:
            raise InvalidDeclarationError(
                f"unknown delta.isolationLevel {self.isolation!r}; use one of {', '.join(_ISOLATION)}"
            ) from None

    def prepare(self, name: str) -> DeltaRsTable:
        """A fresh table: partition ``a`` in two files (rows 1-2, 3-4), partition ``b`` in one."""
        path = self.workdir / name
        if path.exists():
            shutil.rmtree(path)
        table = DeltaRsTable(path)
        steps = [
            table.create(
                _rows_table(PAIR_PARTITION, [1, 2], 0),
                partition_by=["part"],
                configuration={"delta.isolationLevel": self.isolation},
            ),
            table.append(_rows_table(PAIR_PARTITION, [3, 4], 0)),
            table.append(_rows_table(OTHER_PARTITION, [1, 2], 0)),
        ]
        for step in steps:
            if not step.committed:
                raise RuntimeError(f"could not prepare conformance table {path}: {step.error}")
        return table

    def run_pair(self, earlier: Operation, later: Operation) -> Observation:
        self._count += 1
        table = self.prepare(f"{self.isolation.lower()}-{self._count:03d}-{earlier.value}-{later.value}")
        start = time.perf_counter()
        read_version = table.version()
        # Both jobs hold the same snapshot; the later one plans on it only after the earlier
        # committed, so delta-rs must check it against the winning commit.
        earlier_snapshot = table.load(read_version)
        later_snapshot = table.load(read_version)
        jobs = PairJobs(table)
        first = jobs.run(earlier, earlier_snapshot, "earlier")
        if not first.committed:
            return Observation(
                later_committed=False,
                earlier_committed=False,
                earlier_error=None if first.error is None else first.error.text,
                seconds=time.perf_counter() - start,
            )
        second = jobs.run(later, later_snapshot, "later")
        note = f"read version {read_version}; earlier committed {first.version}"
        if second.committed:
            note += f", later committed {second.version}"
            duplicated = _duplicated_ids(table)
            if duplicated:
                note += f"; DUPLICATED ROWS in partition {PAIR_PARTITION}: ids {duplicated}"
            return Observation(later_committed=True, seconds=time.perf_counter() - start, note=note)
        kind = None if second.classification is None else second.classification.kind
        return Observation(
            later_committed=False,
            later_kind=kind,
            later_error=None if second.error is None else " ".join(second.error.messages),
            seconds=time.perf_counter() - start,
            note=note,
        )


def _duplicated_ids(table: DeltaRsTable) -> list[int]:
    """Ids that appear more than once in the pair's partition: no job here writes an id twice."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    data = table.load().to_pyarrow_table(columns=["id", "part"])
    ids = data.filter(pc.equal(data["part"], PAIR_PARTITION))["id"].to_pylist()
    return sorted({i for i in ids if ids.count(i) > 1})


@contextlib.contextmanager
def conformance_runners(workdir: Path) -> Iterator[list[DeltaRsPairRunner]]:
    """delta-rs at both isolation levels it implements (the framework's engine entry point)."""
    root = Path(workdir) / "delta-rs"
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield [DeltaRsPairRunner(root, "WriteSerializable"), DeltaRsPairRunner(root, "Serializable")]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def conformance_meta() -> dict[str, str]:
    import deltalake

    return {"deltalake": str(deltalake.__version__)}

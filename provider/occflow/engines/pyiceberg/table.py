"""pyiceberg: an Iceberg table in a catalog, written from Python (no JVM).

Every write returns a :class:`WriteOutcome`: the snapshot it committed (found again by the commit
id in its summary), the rows its summary counts and the seconds it took, or the engine's error
with its classification and the commit it lost to. A conflict is never raised from here.

``snapshot`` (on every write) is a ``pyiceberg.table.Table`` loaded at some snapshot: the write
plans on it, so a writer that committed since makes pyiceberg's commit lose the catalog's
compare-and-swap, re-read the table and validate against the commits it raced (its retry,
``commit.retry.num-retries``), raising a ``ValidationException`` when they conflict.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core.classify import classify
from ...core.errors import InvalidDeclarationError
from ...core.kinds import WinningCommit
from ...core.operations import Operation
from ..ledger import CommitRefused
from ..outcome import ErrorInfo, MetadataCommit, WriteOutcome
from .catalog import CatalogConfig
from .commit import (
    COMMIT_ID_KEY,
    EXPIRE_SNAPSHOTS_PREFIX,
    SCHEMA_CHANGE_PREFIX,
    CommitOptions,
    from_schema_change_properties,
    metadata_number,
    schema_change_properties,
)
from .fence import commit_checked
from .winner import find_winner

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table
    from pyiceberg.types import PrimitiveType

ENGINE = "pyiceberg"

#: The snapshot summary counts that say how many rows a write touched.
_ROW_COUNTS: dict[Operation, tuple[str, ...]] = {
    Operation.INSERT_INTO: ("added-records",),
    Operation.INSERT_OVERWRITE: ("added-records",),
    Operation.TRUNCATE: ("deleted-records",),
    Operation.DELETE: ("deleted-records",),
    Operation.MERGE: ("added-records",),
}

#: The operations that commit no snapshot, only new table metadata, and the prefix of the table
#: properties their labels go to in the same commit (``commit.py``): how their commit is found.
METADATA_ONLY: dict[Operation, str] = {
    Operation.ALTER_METADATA: SCHEMA_CHANGE_PREFIX,
    Operation.EXPIRE_SNAPSHOTS: EXPIRE_SNAPSHOTS_PREFIX,
}

#: The rows a write works on: ``{column: value}`` (equalities, ANDed) or a pyiceberg expression.
Where = Any


def primitive_type(name: str, where: str) -> PrimitiveType:
    """The Iceberg primitive type ``name`` spells (``long``, ``string``, ``decimal(10,2)``, ...)."""
    from pydantic import ValidationError  # pyiceberg parses type names with pydantic
    from pyiceberg.types import IcebergType, PrimitiveType

    try:
        parsed = IcebergType.model_validate(str(name).strip().lower())
    except (ValidationError, ValueError):
        parsed = None
    if not isinstance(parsed, PrimitiveType):
        raise InvalidDeclarationError(
            f"{where}: {name!r} is not an Iceberg primitive type (boolean, int, long, float, double, "
            "decimal(p,s), date, time, timestamp, timestamptz, string, uuid, binary)"
        )
    return parsed


def equals(column: str, value: Any) -> BooleanExpression:
    """``column = value`` (``IS NULL`` for ``None``) as a pyiceberg expression, the value a literal."""
    from pyiceberg.expressions import EqualTo, IsNull

    # pyiceberg's predicates take (term, literal) positionally at run time; mypy reads their
    # pydantic fields instead (term=, value=), so they are called through ``Any`` here.
    make: Any = IsNull if value is None else EqualTo
    made: BooleanExpression = make(column) if value is None else make(column, value)
    return made


def require_columns(names: Iterable[str], columns: Iterable[str], what: str) -> None:
    """Every one of ``names`` is a column of the table, or an error naming the unknown and the known."""
    known = list(columns)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise InvalidDeclarationError(
            f"{what} names unknown column(s) {', '.join(unknown)}; the table's columns are {', '.join(known)}"
        )


def where_expression(where: Where | None, columns: Iterable[str], what: str) -> BooleanExpression | None:
    """``{column: value}`` as a pyiceberg expression (an AND of equalities; ``None`` is IS NULL):
    values travel as literals, never as text; a column the table lacks is an error naming it. A
    pyiceberg expression is passed through (pyiceberg binds it to the schema itself)."""
    from pyiceberg.expressions import And, BooleanExpression

    if isinstance(where, BooleanExpression):
        return where
    if not where:
        return None
    if not isinstance(where, Mapping):
        raise InvalidDeclarationError(f"{what} is {{column: value}} or a pyiceberg expression, got {where!r}")
    require_columns(where, columns, what)
    terms = [equals(column, value) for column, value in sorted(where.items())]
    expression = terms[0]
    for term in terms[1:]:
        expression = And(expression, term)
    return expression


class PyIcebergTable:
    """One Iceberg table in a catalog, written through pyiceberg."""

    engine = ENGINE

    def __init__(self, catalog: CatalogConfig | Catalog, identifier: str) -> None:
        if not str(identifier).strip() or "." not in str(identifier):
            raise InvalidDeclarationError(
                f"a pyiceberg table is named namespace.table (e.g. db.events), got {identifier!r}"
            )
        self.identifier = str(identifier)
        self._config = catalog if isinstance(catalog, CatalogConfig) else None
        self._catalog: Catalog | None = None if isinstance(catalog, CatalogConfig) else catalog

    def __repr__(self) -> str:
        return f"PyIcebergTable({self.identifier!r})"

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            assert self._config is not None
            self._catalog = self._config.load()
        return self._catalog

    # -- reading ------------------------------------------------------------------------------

    def load(self) -> Table:
        """The table at its current snapshot (a fresh handle every call)."""
        return self.catalog.load_table(self.identifier)

    def exists(self) -> bool:
        return bool(self.catalog.table_exists(self.identifier))

    def columns(self, table: Table | None = None) -> list[str]:
        return [f.name for f in (table or self.load()).schema().fields]

    # -- writes -------------------------------------------------------------------------------

    def append(self, data: Any, *, snapshot: Table | None = None, commit: CommitOptions | None = None) -> WriteOutcome:
        return self._run(Operation.INSERT_INTO, snapshot, lambda t, p: t.append(data, snapshot_properties=p), commit)

    def overwrite(
        self,
        data: Any,
        *,
        where: Where | None = None,
        snapshot: Table | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Replace the rows matching ``where`` (``{column: value}``; the whole table without it)."""
        from pyiceberg.expressions import AlwaysTrue

        def run(table: Table, props: dict[str, str]) -> None:
            expression = where_expression(where, self.columns(table), "the overwrite's filter") or AlwaysTrue()
            table.overwrite(data, overwrite_filter=expression, snapshot_properties=props)

        return self._run(Operation.INSERT_OVERWRITE, snapshot, run, commit, scope=where)

    def dynamic_overwrite(
        self, data: Any, *, snapshot: Table | None = None, commit: CommitOptions | None = None
    ) -> WriteOutcome:
        """Replace every partition ``data`` has rows in (Iceberg's ReplacePartitions); a table
        without partitions is refused by pyiceberg (an engine error in the outcome)."""
        return self._run(
            Operation.INSERT_OVERWRITE, snapshot,
            lambda t, p: t.dynamic_partition_overwrite(data, snapshot_properties=p), commit,
        )

    def delete(
        self,
        where: Where | None = None,
        *,
        snapshot: Table | None = None,
        commit: CommitOptions | None = None,
        operation: Operation = Operation.DELETE,
    ) -> WriteOutcome:
        """Delete the rows matching ``where`` (every row without it: a truncate)."""
        from pyiceberg.expressions import AlwaysTrue

        def run(table: Table, props: dict[str, str]) -> None:
            expression = where_expression(where, self.columns(table), f"the {operation.value}'s filter") or AlwaysTrue()
            table.delete(expression, snapshot_properties=props)

        return self._run(operation, snapshot, run, commit, scope=where)

    def truncate(
        self, *, where: Where | None = None, snapshot: Table | None = None, commit: CommitOptions | None = None
    ) -> WriteOutcome:
        return self.delete(where, snapshot=snapshot, commit=commit, operation=Operation.TRUNCATE)

    def merge(
        self,
        data: Any,
        keys: Sequence[str],
        *,
        snapshot: Table | None = None,
        commit: CommitOptions | None = None,
        scope: Where | None = None,
    ) -> WriteOutcome:
        """Upsert ``data`` on ``keys`` (matched rows updated, the others inserted)."""
        if not keys:
            raise InvalidDeclarationError("a merge (upsert) needs at least one key column")

        def run(table: Table, props: dict[str, str]) -> dict[str, Any]:
            require_columns(keys, self.columns(table), "the merge's keys")
            result = table.upsert(data, join_cols=list(keys), snapshot_properties=props)
            return {"rows": int(result.rows_updated) + int(result.rows_inserted)}

        return self._run(Operation.MERGE, snapshot, run, commit, scope=scope)

    def add_columns(
        self, columns: Mapping[str, str], *, snapshot: Table | None = None, commit: CommitOptions | None = None
    ) -> WriteOutcome:
        """Add optional columns ``{"name": "long"}`` (a schema change: a new metadata version, no
        snapshot). Its labels go into table properties set in the same transaction."""
        if not columns:
            raise InvalidDeclarationError("add_columns needs at least one column")
        types = {str(name): primitive_type(kind, f"column {name!r}") for name, kind in columns.items()}

        def run(table: Table, props: dict[str, str]) -> None:
            with table.transaction() as tx:
                with tx.update_schema() as schema:
                    for name, kind in types.items():
                        schema.add_column(name, kind)
                tx.set_properties(schema_change_properties(props))

        return self._run(Operation.ALTER_METADATA, snapshot, run, commit)

    # -- the one place that runs, times and records a write ------------------------------------

    def _run(
        self,
        operation: Operation,
        snapshot: Table | None,
        fn: Callable[[Table, dict[str, str]], dict[str, Any] | None],
        commit: CommitOptions | None,
        scope: Where | None = None,
    ) -> WriteOutcome:
        """Run ``fn`` on the snapshot and record the outcome; ``scope``: the rows' partition (where
        to look for the commit it lost to first), ``None`` for the whole table."""
        commit_id = uuid.uuid4().hex
        options = commit or CommitOptions()
        tag = {"commit_id": commit_id}
        start = time.perf_counter()
        read_metadata: str | None = None
        read_id: int | None = None
        try:
            table = snapshot if snapshot is not None else self.load()
            read = table.current_snapshot()
            read_id = None if read is None else read.snapshot_id
            # Kept now: pyiceberg's commit retry refreshes ``table`` in place.
            read_metadata = table.metadata_location
            if read_id is not None:
                tag["read_snapshot"] = str(read_id)  # payload for the report
            props = options.properties(commit_id)
            if options.before_commit is not None:
                options.before_commit()  # refused before any file is written
            # And again right before each catalog commit (a retry's too): the write may stall in
            # between past its lease's TTL (``fence.py``, with the window that remains).
            with commit_checked(table, options.before_commit):
                result = fn(table, props)
        except (InvalidDeclarationError, CommitRefused):
            raise  # a refused commit is the caller's decision; bad input is the user's to fix
        except Exception as exc:  # noqa: BLE001 - every engine failure becomes an outcome
            lost = WriteOutcome(
                engine=ENGINE, table=self.identifier, operation=operation, committed=False,
                seconds=time.perf_counter() - start, error=ErrorInfo.from_exception(exc),
                classification=classify(exc), tag=tag,
            )
            return lost.with_winner(self._winner(lost, read_id, read_metadata, commit_id, scope))
        return self._committed(operation, commit_id, tag, result, time.perf_counter() - start)

    def _committed(
        self, operation: Operation, commit_id: str, tag: dict[str, str], result: dict[str, Any] | None, seconds: float
    ) -> WriteOutcome:
        """The outcome of a write whose engine call returned: its own snapshots, found by its id."""
        after = self.load()
        ours = [s for s in after.snapshots() if s.summary is not None and s.summary[COMMIT_ID_KEY] == commit_id]
        # A schema change (an expire) is ours when the labels it set in the table's properties carry our id.
        prefix = METADATA_ONLY.get(operation)
        altered = (
            prefix is not None
            and from_schema_change_properties(after.properties, prefix).get(COMMIT_ID_KEY) == commit_id
        )
        if not ours and not altered:
            # pyiceberg commits nothing when a write changes nothing (a delete that matched no row)
            tag["snapshot"] = "none: no snapshot carries this write's id (nothing changed)"
        rows = (result or {}).get("rows")
        if rows is None and ours:
            rows = _rows(operation, ours)
        return WriteOutcome(
            engine=ENGINE,
            table=self.identifier,
            operation=operation,
            committed=True,
            seconds=seconds,
            snapshot_id=ours[-1].snapshot_id if ours else None,
            rows=rows,
            tag=tag,
            metadata_commit=MetadataCommit(metadata_number(after.metadata_location), after.metadata_location)
            if altered else None,
            engine_details={
                **({"snapshots": [s.snapshot_id for s in ours]} if len(ours) > 1 else {}),
                **dict((result or {}).get("details") or {}),
            },
        )

    def _winner(
        self, lost: WriteOutcome, read_id: int | None, read_metadata: str | None, commit_id: str, scope: Where | None
    ) -> WinningCommit | None:
        kind = None if lost.classification is None else lost.classification.kind
        if read_metadata is None or kind is None or not kind.is_conflict:
            return None
        try:
            return find_winner(self.load(), read_id, read_metadata, commit_id, scope)
        except Exception as exc:  # noqa: BLE001 - naming the winner must not hide the conflict
            return WinningCommit(basis=f"the snapshot log could not be read to name the winner: {exc}")


def _rows(operation: Operation, snapshots: Sequence[Any]) -> int | None:
    keys = _ROW_COUNTS.get(operation, ())
    total = 0
    seen = False
    for snapshot in snapshots:
        for key in keys:
            value = snapshot.summary[key]
            if value is not None:
                total += int(value)
                seen = True
    return total if seen else None


__all__ = [
    "ENGINE",
    "PyIcebergTable",
    "Where",
    "primitive_type",
    "equals",
    "require_columns",
    "where_expression",
]

"""delta-rs: the real Delta protocol on a local path (or any URI ``deltalake`` opens).

Every write returns a :class:`WriteOutcome`: the committed version, the rows the operation's
metrics report and the seconds it took, or the engine's error with its classification. A
conflict is never raised from here: the caller decides from the classification.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import InvalidDeclarationError
from ...core.fencing import LAPSED_FENCE_PROPERTY, CommitFence, fenced_up_to
from ...core.kinds import ConflictKind, WinningCommit
from ...core.operations import Operation
from ..ledger import CommitRefused, FencedOut
from ..outcome import MetadataCommit, WriteOutcome
from ..tags import FENCE as FENCE_KEY
from .commit import COMMIT_ID_KEY, CommitOptions
from .compaction import duplicate_compaction
from .errors import classify_error, error_info
from .log import DeltaLog
from .predicates import Literal, Where, column, combine, literal, partition_filters, partition_where
from .winner import find_winner

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

ENGINE = "delta-rs"


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
        from deltalake import DeltaTable  # optional heavy dependency

        return DeltaTable(self.uri, version=version, storage_options=self.storage_options or None)

    def version(self) -> int:
        return int(self.load().version())

    def log(self) -> DeltaLog:
        """The table's log, read by version number."""
        return DeltaLog(self.uri, self.storage_options)

    def app_version(self, app_id: str) -> int | None:
        """The last version committed for ``app_id`` (Delta ``txn`` action), or ``None``."""
        found = self.load().transaction_version(app_id)
        return None if found is None else int(found)

    def check_columns(self, names: Iterable[str], what: str, snapshot: DeltaTable | None = None) -> None:
        """Every column in ``names`` is in the table's schema; else an error naming the unknown
        and the known ones (``snapshot``: the version to check, default the latest)."""
        require_columns(snapshot if snapshot is not None else self.load(), names, f"{what} on {self.uri}")

    # -- writes -------------------------------------------------------------------------------

    def create(
        self,
        data: Any,
        partition_by: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Create the table from ``data``; it is an error (in the outcome) if it exists."""
        from deltalake import write_deltalake  # optional heavy dependency

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
        from deltalake import write_deltalake  # optional heavy dependency

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
        from deltalake import write_deltalake  # optional heavy dependency

        predicate = combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            write_deltalake(
                table or self.uri,
                data,
                mode="overwrite",
                predicate=None if predicate is None else predicate.sql(),
                commit_properties=props,
            )
            return None

        return self._run(Operation.INSERT_OVERWRITE, snapshot, run, commit, scope=partition)

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
        predicate = combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            return table.delete(None if predicate is None else predicate.sql(), commit_properties=props)

        return self._run(operation, snapshot, run, commit, scope=partition)

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
        predicate = combine(where, partition)

        def run(table: DeltaTable | None, props: CommitProperties) -> dict[str, Any] | None:
            assert table is not None
            # delta-rs commits an UPDATE of a column the table lacks as a change to nothing (an
            # unknown predicate column it does refuse, as an engine error in the outcome).
            require_columns(table, [*values, *expressions], "the update's set_values")
            return table.update(
                updates=expressions or None,
                new_values=values or None,
                predicate=None if predicate is None else predicate.sql(),
                commit_properties=props,
            )

        return self._run(Operation.UPDATE, snapshot, run, commit, scope=partition)

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
        part = partition_where(partition)
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

        return self._run(Operation.MERGE, snapshot, run, commit, scope=partition)

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
        filters = partition_filters(partition)
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

        outcome = self._run(Operation.OPTIMIZE, snapshot, run, commit)
        if outcome.committed and outcome.version is not None:
            race = duplicate_compaction(self.uri, outcome.version, self.storage_options)
            if race is not None:
                # committed all the same: the flow fails loudly on it, naming both commits
                outcome = dataclasses.replace(outcome, damage=race.describe())
        return outcome

    def add_columns(
        self,
        columns: Mapping[str, str],
        *,
        snapshot: DeltaTable | None = None,
        commit: CommitOptions | None = None,
    ) -> WriteOutcome:
        """Add nullable columns, ``{"name": "string"}`` (Delta primitive type names)."""
        from deltalake import Field  # optional heavy dependency
        from deltalake.schema import PrimitiveType  # optional heavy dependency

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
        scope: Mapping[str, Literal] | None = None,
    ) -> WriteOutcome:
        """Run ``fn`` on the snapshot, record the outcome; ``scope`` is the partition the write
        works on (where to look for the commit it lost to), ``None`` for the whole table."""
        commit_id = uuid.uuid4().hex
        options = commit or CommitOptions()
        tag = {"commit_id": commit_id}
        if options.app_id is not None:
            tag["app_id"] = options.app_id
            tag["app_version"] = str(options.app_version)
        start = time.perf_counter()
        table: DeltaTable | None = None
        fence: CommitFence | None = None
        try:
            table = snapshot if snapshot is not None else (self.load() if load else None)
            read_version = None if table is None else int(table.version())
            if read_version is not None:
                tag["read_version"] = str(read_version)  # payload for the report; decided on as an int
            # Last step before the engine call: the caller's before-commit check, and the snapshot
            # it plans on must not hold this write's app transaction yet (CommitOptions.ready).
            props, fence = options.ready(table, commit_id)
            if fence is not None and fence.supersedes:
                # A lease this write awaited at its gate lapsed meanwhile: fence its stalled
                # holder out now (this commit, planned before the fence, then retries after it).
                self.fence_out(fence)
            metrics = fn(table, props)
        except (InvalidDeclarationError, CommitRefused):
            raise  # a refused commit is the caller's decision, not an engine failure
        except Exception as exc:  # noqa: BLE001 - every engine failure becomes an outcome
            lost = _lost(operation, self.uri, time.perf_counter() - start, exc, tag)
            if fence is not None:
                self._fenced_out(lost, fence)
            return lost.with_winner(self._winner(lost, table, options, scope))
        seconds = time.perf_counter() - start
        version, commit_metrics = self._find_commit(commit_id, read_version)
        if version is None:
            # delta-rs writes no commit when an operation changes nothing (a delete that matched
            # no row); the write succeeded, but there is no version to name
            tag["version"] = "none: no commit carries this write's id (nothing changed)"
        rows = _rows(operation, metrics if metrics is not None else commit_metrics)
        # A schema or property change is a log version with a metaData action: name it as such.
        altered = operation is Operation.ALTER_METADATA and version is not None
        return WriteOutcome(
            engine=ENGINE,
            table=self.uri,
            operation=operation,
            committed=True,
            seconds=seconds,
            version=version,
            rows=rows,
            tag=tag,
            metadata_commit=MetadataCommit(version=version) if altered else None,
        )

    def fence_out(self, fence: CommitFence, tries: int = 5) -> int | None:
        """Make delta-rs refuse the commits of the stalled writers ``fence`` supersedes: one
        metadata commit raising ``occflow.lapsed_fence`` to their highest token, so every commit
        planned on an older snapshot fails the engine's own conflict check (``core.fencing``).
        The version it committed; ``None`` when the table was fenced that far already."""
        from deltalake import CommitProperties  # optional heavy dependency

        for _ in range(tries):
            table = self.load()
            if not fence.needs_fencing(fenced_up_to(table.metadata().configuration)):
                return None
            info = {"occflow.operation": "fence", FENCE_KEY: str(fence.fence),
                    "occflow.supersedes": ",".join(fence.supersedes)}
            try:
                table.alter.set_table_properties(
                    {LAPSED_FENCE_PROPERTY: str(fence.superseded_fence)}, raise_if_not_exists=False,
                    commit_properties=CommitProperties(custom_metadata=info),
                )
            except Exception as exc:  # noqa: BLE001 - delta-rs raises one error type for every failure
                if classify_error(exc).kind.is_conflict:
                    continue  # another writer (or fencer) committed first: read the table again
                raise
            return int(table.version())
        raise CommitRefused(f"could not fence {self.uri} for lapsed lease(s) {', '.join(fence.supersedes)} "
                            f"in {tries} tries: the table keeps changing")

    def _fenced_out(self, lost: WriteOutcome, fence: CommitFence) -> None:
        """Raise ``FencedOut`` when the lost commit was refused because this write's own lease
        lapsed and a write admitted in its place fenced the table (``metadata_changed``)."""
        if lost.classification is None or lost.classification.kind is not ConflictKind.METADATA_CHANGED:
            return
        try:
            current = fenced_up_to(self.load().metadata().configuration)
        except Exception:  # noqa: BLE001 - the table cannot be read: the conflict stands as it is
            return
        if fence.fenced_out_by(current):
            raise FencedOut(
                f"the lease of this write (fence {fence.fence}) lapsed while it ran, and a write admitted in "
                f"its place fenced the table ({LAPSED_FENCE_PROPERTY}={current}): delta-rs refused this "
                "commit, nothing was written",
                fence.fence,
            )

    def _winner(
        self, lost: WriteOutcome, table: DeltaTable | None, options: CommitOptions, scope: Mapping[str, Literal] | None
    ) -> WinningCommit | None:
        """The commit a lost attempt lost to, from the log after the version it read."""
        kind = None if lost.classification is None else lost.classification.kind
        if table is None or kind is None or not kind.is_conflict:
            return None
        try:
            return find_winner(self.log(), int(table.version()), kind, options.resolved().app_id, scope)
        except Exception as exc:  # noqa: BLE001 - naming the winner must not hide the conflict
            return WinningCommit(basis=f"the log could not be read to name the winner: {exc}")

    def _find_commit(self, commit_id: str, read_version: int | None = None) -> tuple[int | None, dict[str, Any]]:
        """Our commit's version and metrics, found by the id we wrote into its commit info.

        Read from the log by version number (``log.DeltaLog``), never from a handle's
        ``history()``, whose labels a concurrent commit shifts; every commit after the read
        version is searched (the last 50 without one), however many other writers committed
        in between.
        """
        found = self.log().find(lambda c: c.info.get(COMMIT_ID_KEY) == commit_id, after=read_version)
        if found is None:
            return None, {}
        return found.version, dict(found.info.get("operationMetrics") or {})


def _lost(operation: Operation, uri: str, seconds: float, exc: Exception, tag: dict[str, str]) -> WriteOutcome:
    """The outcome of an attempt delta-rs failed: its error and classification."""
    return WriteOutcome(
        engine=ENGINE, table=uri, operation=operation, committed=False, seconds=seconds,
        error=error_info(exc), classification=classify_error(exc), tag=tag,
    )


def require_columns(table: DeltaTable, names: Iterable[str], what: str) -> None:
    """``names`` are columns of ``table``'s schema, or an error (nothing is written) naming the
    unknown ones and the known ones."""
    known = [field.name for field in table.schema().fields]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise InvalidDeclarationError(
            f"{what} names unknown column(s) {', '.join(unknown)}; the table's columns are {', '.join(known)}"
        )


def _rows(operation: Operation, metrics: Mapping[str, Any]) -> int | None:
    keys = _ROW_METRICS.get(operation, ())
    values = [metrics[k] for k in keys if isinstance(metrics.get(k), int)]
    return sum(values) if values else None

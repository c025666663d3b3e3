"""``DeltaWriteOperator``: the occflow write flow on delta-rs (no JVM, a local path or object store)."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import EngineProfileWarning, WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.observed import ObservedFootprint
from ..core.operations import Operation
from ..engines.deltars import CommitOptions, DeltaRsLedger, DeltaRsTable, Where, column
from ..engines.deltars.facts import deltars_table_facts
from ..engines.deltars.observed import observe_deltars_commit
from ..engines.outcome import WriteOutcome
from ..hooks.spark import default_delta_location
from .base import OccflowWriteOperator

#: The matrix delta-rs really implements (``docs/engines-deltars.md``): the operator's default
#: profile, and the one admission checks for corrupting pairs whatever the task declares.
ENGINE_PROFILE = "delta-rs"

#: ``job(table, snapshot, partition, commit, context) -> WriteOutcome`` for writes the built-in
#: operations do not cover; ``snapshot`` is freshly loaded for every attempt.
DeltaJob = Callable[..., WriteOutcome]

# Operations the operator runs itself from its parameters (anything else needs ``job``).
_BUILT_IN = frozenset(
    {
        Operation.INSERT_INTO,
        Operation.INSERT_OVERWRITE,
        Operation.MERGE,
        Operation.DELETE,
        Operation.TRUNCATE,
        Operation.UPDATE,
        Operation.OPTIMIZE,
        Operation.ALTER_METADATA,
    }
)


class DeltaWriteOperator(OccflowWriteOperator):
    """A write on a Delta table through delta-rs, under the table's conflict policy.

    :param path: the table's location; default ``<warehouse>/delta/<db>/<table>``, which must
        resolve (symlinks followed) under the warehouse root. An explicit ``path`` is the only
        way to write anywhere else.
    :param data: rows to write: a pyarrow table, or ``data(context, snapshot)`` returning one,
        called on every attempt with that attempt's fresh snapshot (a ``DeltaTable``), so a retry
        writes what a fresh read gives, on the table's current schema. A callable that names a
        ``declaration`` parameter also gets the rendered ``WriteDeclaration`` (its
        ``partitions`` are the rendered partition values), one that names ``partition`` the
        single partition written (a dict, ``None`` for the whole table).
    :param create_if_missing: create the table at ``path`` before the write when it does not
        exist yet, with ``schema`` and ``partition_by``; an existing table is left as it is.
    :param schema: the columns of a table to create: a pyarrow schema or ``{column: delta
        type}`` (``string``, ``long``, ``integer``, ``double``, ``boolean``, ``date``,
        ``timestamp``, ``decimal(p,s)``...).
    :param partition_by: the partition columns of a table to create; default: the columns the
        declared partitions name.
    :param merge_keys: MERGE key columns (operation ``merge``).
    :param where: extra equality filter ``{column: value}`` for delete / update / overwrite.
    :param set_values: ``{column: value}`` for update.
    :param add_columns: ``{column: delta type}`` for ``alter_metadata``; or ``properties``.
    :param job: ``job(table, snapshot, partition, commit, context) -> WriteOutcome`` instead of
        the built-in operations.
    :param storage_options: passed to delta-rs.
    :param allow_unsafe_concurrency: with ``admission=False``, run an operation that delta-rs
        lets commit beside another one with corrupted data as the result (two OPTIMIZEs of one
        partition duplicate its rows); without it such a task fails the DAG import. It also lets
        a task run under a declared profile the table's facts contradict (with a warning).

    The profile defaults to ``delta-rs`` (``table_format="delta"`` means it too); another Delta
    profile passes the DAG import with a warning that it does not describe delta-rs, and is
    refused at run time, before anything is written, once the table's facts (read from its log,
    ``engines/deltars/facts.py``) show delta-rs commits the write (docs/explain.md).
    """

    template_fields: Sequence[str] = ("partitions", "path", "where", "set_values")
    engine_name = "delta-rs"
    default_table_format = ENGINE_PROFILE  # a format name too: core.declaration.FORMAT_DEFAULT_PROFILE

    def __init__(
        self,
        *,
        path: str | None = None,
        data: Any = None,
        merge_keys: Sequence[str] = (),
        where: Mapping[str, Any] | None = None,
        set_values: Mapping[str, Any] | None = None,
        add_columns: Mapping[str, str] | None = None,
        properties: Mapping[str, str] | None = None,
        job: DeltaJob | None = None,
        storage_options: Mapping[str, str] | None = None,
        allow_unsafe_concurrency: bool = False,
        create_if_missing: bool = False,
        schema: Any = None,
        partition_by: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**_delta_rs_defaults(kwargs))
        self.occflow_write = delta_rs_declaration(
            self.occflow_write, self.task_id, self.admission, allow_unsafe_concurrency
        )
        self.allow_unsafe_concurrency = allow_unsafe_concurrency
        op = self.occflow_write.operation
        if job is None and op not in _BUILT_IN:
            raise InvalidDeclarationError(
                f"{self.task_id}: DeltaWriteOperator runs {sorted(o.value for o in _BUILT_IN)} itself; "
                f"give job=... for {op.value}"
            )
        if job is None and op in (Operation.INSERT_INTO, Operation.INSERT_OVERWRITE, Operation.MERGE) and data is None:
            raise InvalidDeclarationError(f"{self.task_id}: {op.value} needs data=... (rows or a callable)")
        if job is None and op is Operation.MERGE and not merge_keys:
            raise InvalidDeclarationError(f"{self.task_id}: merge needs merge_keys=[...]")
        if job is None and op is Operation.UPDATE and not set_values:
            raise InvalidDeclarationError(f"{self.task_id}: update needs set_values={{column: value}}")
        if job is None and op is Operation.ALTER_METADATA and not (add_columns or properties):
            raise InvalidDeclarationError(f"{self.task_id}: alter_metadata needs add_columns or properties")
        # Derived from the name: confined under the warehouse root (checked again at run time).
        self.derived_location = path is None
        self.path = path or default_delta_location(self.table)
        self.data = data
        self.merge_keys = tuple(merge_keys)
        self.where = dict(where) if where else None
        self.set_values = dict(set_values) if set_values else None
        self.add_columns = dict(add_columns) if add_columns else None
        self.properties = dict(properties) if properties else None
        self.job = job
        self.storage_options = dict(storage_options or {})
        self.create_if_missing = create_if_missing
        self.schema = schema
        self.partition_by = None if partition_by is None else tuple(partition_by)
        if create_if_missing:  # a DAG import error, not a run error
            self._new_table_schema()
        elif schema is not None or partition_by is not None:
            raise InvalidDeclarationError(f"{self.task_id}: schema / partition_by need create_if_missing=True")

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:  # type: ignore[override]
        """As ``OccflowWriteOperator.partial``, with delta-rs's profile and checks at parse time."""
        kwargs = _delta_rs_defaults(kwargs)
        if "table" in kwargs and "operation" in kwargs:
            declared = WriteDeclaration.create(
                kwargs["table"],
                kwargs["operation"],
                profile=kwargs.get("profile"),
                table_format=kwargs.get("table_format"),
                partitions=kwargs.get("partitions"),
                allow_templates=True,
            )
            delta_rs_declaration(
                declared,
                str(kwargs.get("task_id")),
                bool(kwargs.get("admission", True)),
                bool(kwargs.get("allow_unsafe_concurrency", False)),
            )
        return super().partial(**kwargs)

    def declare(self) -> WriteDeclaration:
        """The rendered declaration, on delta-rs's matrix; before admission, the location and
        the columns the write names are checked against the warehouse root and the schema."""
        declaration = replace(super().declare(), engine_profile=ENGINE_PROFILE)
        mismatch = declaration.engine_mismatch()
        if mismatch:
            self.log.warning("%s", mismatch)  # the run's log says it too, not only the DAG's warnings
        try:
            if self.derived_location:
                self.path = default_delta_location(self.table)  # a symlink may have appeared since parse
            if self.create_if_missing:
                self._create_table(declaration)
            self._check_profile(declaration)
            self._check_columns(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing was written") from exc
        return declaration

    def _new_table_schema(self, declaration: WriteDeclaration | None = None) -> tuple[Any, list[str]]:
        """The pyarrow schema and partition columns of the table ``create_if_missing`` creates;
        an error naming the column or type that is wrong."""
        import pyarrow as pa  # optional heavy dependency (delta-rs's Arrow)
        from deltalake import Field, Schema  # optional heavy dependency
        from deltalake.schema import PrimitiveType  # optional heavy dependency

        where = f"{self.task_id}: create_if_missing"
        if isinstance(self.schema, pa.Schema):
            arrow = self.schema
        elif isinstance(self.schema, Mapping) and self.schema:
            fields = []
            for name, kind in self.schema.items():
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
                f"{where} needs schema=: a pyarrow schema or {{column: delta type}}, got {self.schema!r}"
            )
        source = declaration or self.occflow_write
        declared = sorted({str(k) for spec in source.partitions or () for k in spec})
        partition_by = list(self.partition_by if self.partition_by is not None else declared)
        missing = [c for c in partition_by if c not in arrow.names]
        if missing:
            raise InvalidDeclarationError(
                f"{where}: partition column(s) {missing} are not in the schema ({', '.join(arrow.names)})"
            )
        return arrow, partition_by

    def _create_table(self, declaration: WriteDeclaration) -> None:
        """The table at ``path``, created empty when it is not there (``create_if_missing``).

        Before admission: creating commits version 0 of a table no write holds yet. Two tasks
        creating it at once both end with the table: the second sees delta-rs's "already
        exists" and finds the first one's table."""
        table = DeltaRsTable(self.path, self.storage_options or None)
        if _exists(table):
            return
        arrow, partition_by = self._new_table_schema(declaration)
        outcome = table.create(arrow.empty_table(), partition_by=partition_by)
        if outcome.committed:
            self.log.info("created %s at %s (partitioned by %s)", self.table, self.path, partition_by or "nothing")
        elif not _exists(table):
            raise InvalidDeclarationError(
                f"could not create {self.table} at {self.path}: {outcome.error.text if outcome.error else outcome}"
            )

    def commit_url(self, report: Mapping[str, Any]) -> str | None:
        """The committed version's file in the table's Delta log (``WriteCommitLink``)."""
        version = report.get("version")
        return None if version is None else _log_url(self.path, f"{int(version):020d}.json")

    def table_history_url(self, report: Mapping[str, Any]) -> str | None:
        """The table's Delta log, every commit in it (``TableHistoryLink``)."""
        return _log_url(self.path, "")

    def _check_profile(self, declaration: WriteDeclaration) -> None:
        """The table's facts, read from its log, against the declared profile: one they
        contradict (a Databricks matrix for a write delta-rs commits) is refused, unless the DAG
        opted in with ``allow_unsafe_concurrency=True`` (then a warning, and admission still
        keeps apart what delta-rs's matrix says)."""
        try:
            facts = deltars_table_facts(self.path, self.storage_options or None, table=self.table)
        except InvalidDeclarationError:
            raise
        except Exception:  # noqa: BLE001 - no table yet: the attempt reports delta-rs's own error
            return
        try:
            facts.check_declared_profile(declaration.profile, declaration.operation)
        except InvalidDeclarationError as exc:
            if not self.allow_unsafe_concurrency:
                raise
            self.log.warning("%s (allow_unsafe_concurrency=True: running anyway)", exc)

    def _check_columns(self, declaration: WriteDeclaration) -> None:
        op = declaration.operation
        if self.job is not None or op not in _PREDICATE_OPERATIONS:
            return
        names = {*(self.where or {}), *(k for p in declaration.partitions or () for k in p)}
        if op is Operation.UPDATE:
            names |= set(self.set_values or {})
        if not names:
            return
        table = DeltaRsTable(self.path, self.storage_options or None)
        try:
            snapshot = table.load()
        except Exception:  # noqa: BLE001 - no table yet: the attempt reports delta-rs's own error
            return
        table.check_columns(names, op.value, snapshot=snapshot)

    def commit_ledger(self, table: str, only_if: Mapping[str, str] | None = None) -> DeltaRsLedger:
        """The delta-rs ledger of the table at ``path`` (exactly once, docs/exactly-once.md).

        ``only_if``: only the operator's own commits (its commit metadata names the task
        instance) get the tag; a data callable that writes the same table is another writer.
        """
        return DeltaRsLedger(DeltaRsTable(self.path, self.storage_options or None), only_if=only_if)

    def run_attempt(self, declaration: WriteDeclaration, context: Any, attempt: int) -> WriteOutcome:
        table = DeltaRsTable(self.path, self.storage_options or None)
        snapshot = table.load()  # fresh for every attempt: a read-modify-write re-plans on it
        partition = _single_partition(declaration)
        # before_commit: the lease is live and no other try committed this write (delta-rs runs
        # it right before the engine call); the lease's fence goes into the commit info.
        commit = CommitOptions(metadata=commit_metadata(context, declaration, attempt),
                               before_commit=self.before_commit, fence=self.commit_fence)
        if self.job is not None:
            return self.job(table, snapshot, partition, commit, context)
        op = declaration.operation
        where = Where.equals(self.where) if self.where else None
        if op is Operation.INSERT_INTO:
            return table.append(self._rows(context, snapshot, declaration), snapshot=snapshot, commit=commit)
        if op is Operation.INSERT_OVERWRITE:
            rows = self._rows(context, snapshot, declaration)
            return table.overwrite(rows, where=where, partition=partition, snapshot=snapshot, commit=commit)
        if op is Operation.MERGE:
            rows = self._rows(context, snapshot, declaration)
            return table.merge(rows, self.merge_keys, partition=partition, snapshot=snapshot, commit=commit)
        if op is Operation.DELETE:
            return table.delete(where, partition=partition, snapshot=snapshot, commit=commit)
        if op is Operation.TRUNCATE:
            return table.truncate(partition=partition, snapshot=snapshot, commit=commit)
        if op is Operation.UPDATE:
            return table.update(where, set_values=self.set_values, partition=partition, snapshot=snapshot, commit=commit)
        if op is Operation.OPTIMIZE:
            return table.optimize(partition=partition, snapshot=snapshot, commit=commit)
        if self.add_columns:
            return table.add_columns(self.add_columns, snapshot=snapshot, commit=commit)
        return table.set_properties(self.properties or {}, snapshot=snapshot, commit=commit)

    def _rows(self, context: Any, snapshot: Any, declaration: WriteDeclaration) -> Any:
        if not callable(self.data):
            return self.data
        return self.data(context, snapshot, **data_arguments(self.data, declaration))

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed version really touched, read from the table's Delta log."""
        if outcome.version is None:
            return None  # nothing committed (a change to nothing), or settled by exactly-once
        return observe_deltars_commit(self.path, outcome.version, self.storage_options or None)


def data_arguments(data: Callable[..., Any], declaration: WriteDeclaration) -> dict[str, Any]:
    """The keyword arguments a ``data`` callable asks for by name: ``declaration`` (the rendered
    declaration) and ``partition`` (its single partition, or ``None``); a ``**kwargs`` callable
    gets both. ``data(context, snapshot)`` gets neither, as before."""
    try:
        parameters = inspect.signature(data).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the two positional arguments
        return {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    offered = {
        "declaration": lambda: declaration,
        "partition": lambda: None if not declaration.partitions or len(declaration.partitions) != 1
        else dict(declaration.partitions[0]),
    }
    return {
        name: make() for name, make in offered.items()
        if takes_all or (name in parameters and parameters[name].kind is not inspect.Parameter.POSITIONAL_ONLY)
    }


def _exists(table: DeltaRsTable) -> bool:
    try:
        table.load()
    except Exception:  # noqa: BLE001 - delta-rs raises TableNotFoundError (a DeltaError) when absent
        return False
    return True


def _log_url(location: str, name: str) -> str:
    """A file in the table's ``_delta_log`` as a URL: ``file://`` for a local path, the
    location's own scheme (``s3://``, ``gs://``, ``abfss://``) otherwise."""
    if urlsplit(location).scheme in ("", "file") or Path(location).is_absolute():
        local = Path(urlsplit(location).path if location.startswith("file:") else location).resolve()
        url = (local / "_delta_log").as_uri() + "/"
    else:
        url = location.rstrip("/") + "/_delta_log/"
    return url + name


# Built-in operations whose predicate (where=, partitions) names columns.
_PREDICATE_OPERATIONS = frozenset(
    {Operation.INSERT_OVERWRITE, Operation.DELETE, Operation.TRUNCATE, Operation.UPDATE}
)


def _delta_rs_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``table_format="delta"`` (or none, without a profile) on this operator means delta-rs."""
    out = dict(kwargs)
    if not out.get("profile") and out.get("table_format") in (None, "delta"):
        out["table_format"] = ENGINE_PROFILE
    return out


def delta_rs_declaration(
    declared: WriteDeclaration, where: str, admission: bool, allow_unsafe_concurrency: bool
) -> WriteDeclaration:
    """``declared`` with delta-rs as its engine profile: a profile of another table format is
    refused, another Delta profile warned about (a DAG import warning, which Airflow shows with
    the DAG), and without admission an operation delta-rs can corrupt data with needs
    ``allow_unsafe_concurrency=True``."""
    if declared.profile.table_format != "delta":
        raise InvalidDeclarationError(
            f"{where}: profile {declared.profile.name!r} describes {declared.profile.table_format} tables; "
            f"DeltaWriteOperator writes Delta tables through delta-rs (profile {ENGINE_PROFILE!r})"
        )
    declaration = replace(declared, engine_profile=ENGINE_PROFILE)
    mismatch = declaration.engine_mismatch()
    if mismatch:
        warnings.warn(f"{where}: {mismatch}", EngineProfileWarning, stacklevel=4)
    declaration.require_admission_or_opt_in(admission, allow_unsafe_concurrency, where)
    return declaration


def _single_partition(declaration: WriteDeclaration) -> dict[str, Any] | None:
    if not declaration.partitions:
        return None
    if len(declaration.partitions) > 1:
        raise InvalidDeclarationError(
            f"{declaration.table}: the built-in delta-rs operations write one partition; "
            "split the task per partition or give job=..."
        )
    return dict(declaration.partitions[0])


def commit_metadata(context: Any, declaration: WriteDeclaration, attempt: int) -> dict[str, str]:
    """Who made a commit, written into it: what ``TableCommitSensor`` and alerts look up."""
    ti = context.get("ti") if hasattr(context, "get") else None
    meta = {
        "occflow.operation": declaration.operation.value,
        "occflow.attempt": str(attempt),
    }
    keys = declaration.partition_keys()
    if keys:
        meta["occflow.partitions"] = ",".join(sorted(keys))
    if ti is not None:
        meta["occflow.dag_id"] = str(ti.dag_id)
        meta["occflow.task_id"] = str(ti.task_id)
        meta["occflow.run_id"] = str(ti.run_id)
        meta["occflow.map_index"] = str(getattr(ti, "map_index", -1))
    return meta

"""``DeltaWriteOperator``: the occflow write flow on delta-rs (no JVM, a local path or object store)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import EngineProfileWarning, WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.identifiers import canonical_table
from ..core.report import WriteReport
from ..engines.deltars.target import DeltaJob, DeltaRsTarget, DeltaRsWrite, new_table_schema
from ..hooks.spark import default_delta_location
from .base import OccflowWriteOperator
from .lineage import location_uri, path_dataset

#: The matrix delta-rs really implements (``docs/engines-deltars.md``): the operator's default
#: profile, and the one admission checks for corrupting pairs whatever the task declares.
ENGINE_PROFILE = "delta-rs"


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
    :param retention_hours: operation ``vacuum``: delete the files removed longer ago than this
        (default: the table's ``delta.deletedFileRetentionDuration``, 1 week). Less than that is
        refused, naming the value and the minimum, unless ``allow_unsafe_retention=True``.
    :param allow_unsafe_retention: let a ``vacuum`` run below the safe retention: a job running
        meanwhile on an older snapshot can lose the files it reads (admission still keeps every
        write of the table apart from the vacuum, docs/maintenance.md).
    :param vacuum_full: ``vacuum`` also deletes files no log entry names (delta-rs ``full=True``).
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
        retention_hours: float | None = None,
        allow_unsafe_retention: bool = False,
        vacuum_full: bool = False,
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
        # Derived from the name: confined under the warehouse root (checked again at run time).
        self.derived_location = path is None
        self.path = path or default_delta_location(self.table)
        location = _parse_time_location(self.path, self.table)
        if location is not None:  # lint and pools plan meet the table by where it is
            self.occflow_write = replace(self.occflow_write, location=location)
        self.data = data
        self.merge_keys = tuple(merge_keys)
        self.where = dict(where) if where else None
        self.set_values = dict(set_values) if set_values else None
        self.add_columns = dict(add_columns) if add_columns else None
        self.properties = dict(properties) if properties else None
        self.job = job
        self.retention_hours = retention_hours
        self.allow_unsafe_retention = allow_unsafe_retention
        self.vacuum_full = vacuum_full
        self._delta_write().check(self.occflow_write.operation, self.task_id)
        self.storage_options = dict(storage_options or {})
        self.create_if_missing = create_if_missing
        self.schema = schema
        self.partition_by = None if partition_by is None else tuple(partition_by)
        if create_if_missing:  # a DAG import error, not a run error
            self._new_table_schema()
        elif schema is not None or partition_by is not None:
            raise InvalidDeclarationError(
                f"{self.task_id}: schema / partition_by need create_if_missing=True"
            )
        self.declare_table_outlet()

    def table_asset_uri(self) -> str | None:
        """The table's location as OpenLineage names it (``file:///abs/path``, ``s3://...``);
        ``None`` for a templated path (known only when the task runs: give ``outlets=``)."""
        return _asset_uri_of(self.path)

    @classmethod
    def parse_time_asset_uri(cls, kwargs: Mapping[str, Any]) -> str | None:
        path = kwargs.get("path")
        if path is None and isinstance(kwargs.get("table"), str):
            try:
                path = default_delta_location(kwargs["table"])
            except InvalidDeclarationError:
                return None
        return _asset_uri_of(path)

    @classmethod
    def parse_time_declaration(cls, kwargs: Mapping[str, Any]) -> WriteDeclaration | None:
        """As ``OccflowWriteOperator``'s, on delta-rs's profile, with its checks, and the table's
        location when it is known already (a ``path`` without a template, or the default one)."""
        declared = super().parse_time_declaration(_delta_rs_defaults(kwargs))
        if declared is None:
            return None
        declared = delta_rs_declaration(declared, str(kwargs.get("task_id")), bool(kwargs.get("admission", True)),
                                        bool(kwargs.get("allow_unsafe_concurrency", False)))
        location = _parse_time_location(kwargs.get("path"), declared.table)
        return declared if location is None else replace(declared, location=location)

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
            # The table is where delta-rs writes it: two names for one path are one table to admission.
            declaration = replace(declaration, location=_resolved(self.path))
            target = self._target()
            if self.create_if_missing:
                self._create_table(target, declaration)
            facts = target.table_facts()
            try:
                target.check_profile(declaration, facts)
            except InvalidDeclarationError as exc:
                if not self.allow_unsafe_concurrency:
                    raise
                self.log.warning("%s (allow_unsafe_concurrency=True: running anyway)", exc)
            if facts is not None:  # {"p": "07"} on an INT column is the partition p=7 delta-rs writes
                declaration = declaration.with_typed_partitions(facts.partition_column_types, facts.engine)
                # Under column mapping the claim names physical columns: a rename cannot make a
                # write admitted before it and one admitted after look disjoint (issue 33).
                declaration, why = declaration.keyed_by_reach(facts)
                for line in why:
                    self.log.info("admission keys the write by the table: %s", line)
            target.check_columns(declaration)
            self._refuse_unsafe_partner(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing was written") from exc
        return declaration

    def _refuse_unsafe_partner(self, declaration: WriteDeclaration) -> None:
        """``allow_unsafe_concurrency=True`` says nothing else writes the table meanwhile; a task
        of this same DAG that can corrupt the data beside this one, with no dependency between
        them, says otherwise: refused before anything is written."""
        if self.admission or not self.allow_unsafe_concurrency or self.dag is None:
            return
        cells = declaration.corrupting_cells()
        partners = {c.earlier for c in cells} | {c.later for c in cells}
        related = {
            t.task_id
            for t in (*self.get_flat_relatives(upstream=True), *self.get_flat_relatives(upstream=False))
        }
        for task in self.dag.tasks:
            if task.task_id == self.task_id or task.task_id in related or not isinstance(task, DeltaWriteOperator):
                continue
            same_table = task.path == self.path or canonical_table(task.table) == canonical_table(self.table)
            if same_table and task.occflow_write.operation in partners:
                raise InvalidDeclarationError(
                    f"allow_unsafe_concurrency=True, yet task {task.task_id!r} of this DAG runs "
                    f"{task.occflow_write.operation.value} on the same table with no dependency "
                    f"between them: {declaration.operation.value} beside it corrupts the data on "
                    "delta-rs; keep admission on, "
                    f"or order the two tasks (>>)"
                )

    def _delta_write(self) -> DeltaRsWrite:
        """The built-in operation's parameters, as rendered."""
        return DeltaRsWrite(
            data=self.data,
            merge_keys=self.merge_keys,
            where=self.where,
            set_values=self.set_values,
            add_columns=self.add_columns,
            properties=self.properties,
            job=self.job,
            retention_hours=self.retention_hours,
            allow_unsafe_retention=self.allow_unsafe_retention,
            vacuum_full=self.vacuum_full,
        )

    def _target(self) -> DeltaRsTarget:
        return DeltaRsTarget(
            self.path, self._delta_write(), self.storage_options or None, table_name=self.table
        )

    def write_target(self, declaration: WriteDeclaration, context: Any) -> DeltaRsTarget:
        return self._target()

    def _new_table_schema(self, declaration: WriteDeclaration | None = None) -> tuple[Any, list[str]]:
        """The pyarrow schema and partition columns of the table ``create_if_missing`` creates."""
        source = declaration or self.occflow_write
        declared = sorted({str(k) for spec in source.partitions or () for k in spec})
        return new_table_schema(
            self.schema, self.partition_by, declared, f"{self.task_id}: create_if_missing"
        )

    def _create_table(self, target: DeltaRsTarget, declaration: WriteDeclaration) -> None:
        """The table at ``path``, created empty when it is not there (``create_if_missing``).
        Before admission: creating commits version 0 of a table no write holds yet."""
        arrow, partition_by = self._new_table_schema(declaration)
        if target.create(arrow, partition_by):
            self.log.info(
                "created %s at %s (partitioned by %s)", self.table, self.path, partition_by or "nothing"
            )

    def openlineage_location(self) -> tuple[str, str, tuple[str, str] | None]:
        return path_dataset(self.path, self.table, self.derived_location)

    def commit_url(self, report: WriteReport) -> str | None:
        """The committed version's file in the table's Delta log (``WriteCommitLink``)."""
        return None if report.version is None else self._target().log_url(report.version)

    def table_history_url(self, report: WriteReport) -> str | None:
        """The table's Delta log, every commit in it (``TableHistoryLink``)."""
        return self._target().log_url()


def _parse_time_location(path: Any, table: str) -> str | None:
    """Where the table is, when that is known at DAG parse time: ``path`` (or the default
    location of ``table``) without a template in it; ``None`` otherwise."""
    if path is None:
        try:
            path = default_delta_location(table)
        except InvalidDeclarationError:
            return None
    if not isinstance(path, str) or "{{" in path or "{%" in path:
        return None
    return _resolved(path)


def _asset_uri_of(path: Any) -> str | None:
    """The asset URI of a table at ``path``: its OpenLineage location (``lineage.location_uri``),
    or ``None`` while the path holds a template."""
    if not isinstance(path, str) or "{{" in path or "{%" in path:
        return None
    return location_uri(path)


def _resolved(path: str) -> str:
    """A local path with its symlinks resolved (one directory, one identity); a URI as given."""
    if "://" in path and not path.startswith("file://"):
        return path
    return str(Path(path.removeprefix("file://")).resolve())


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

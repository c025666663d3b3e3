"""``SparkWriteOperator``: the occflow write flow on a Spark session (Iceberg, Delta, Parquet)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import WriteDeclaration, resolve_profile
from ..core.errors import InvalidDeclarationError
from ..core.operations import Operation, check_retention, statement_retention_hours
from ..core.sql import check_sql_write, job_text
from ..core.sqlderive import check_derived_against, derive_write
from ..engines.spark import IcebergFormat, SparkConfig
from ..engines.spark.ddl import table_columns
from ..engines.spark.maintenance import DeltaVacuumJob, vacuum_retention
from ..engines.spark.target import SparkJob, SparkTarget, spark_engine
from ..hooks.spark import DEFAULT_CONN_ID, OccflowSparkHook
from .assets import TABLE_SCHEMES, catalog_table_uri
from .base import OccflowWriteOperator
from .derived import Settled, settle
from .lineage import spark_table_location

_TEMPLATE_MARK = ("{{", "{%")

SqlText = str | list[str]


def sql_of(job: Any) -> SqlText | None:
    """A job given as SQL: text, or the DAG's list of statements (only a list may start with
    ``SET key = value`` statements); ``None`` for any other job."""
    if isinstance(job, str):
        return job
    if isinstance(job, (list, tuple)) and job and all(isinstance(s, str) for s in job):
        return list(job)
    return None


def templated(sql: SqlText) -> bool:
    return any(m in text for text in ([sql] if isinstance(sql, str) else sql) for m in _TEMPLATE_MARK)


def spark_declaration(
    declared: WriteDeclaration, config: Mapping[str, Any] | None
) -> tuple[WriteDeclaration, str | None]:
    """``declared`` in the config's catalog (``db.t`` and ``lake.db.t`` are one table), with its
    profile as the engine's; and the catalog Spark SQL resolves ``db.t`` in (``None``: the
    config is not known yet, at DAG parse time with a connection)."""
    if config is None:
        return replace(declared, engine_profile=declared.profile.name), None
    spark = SparkConfig.from_dict(config)
    return replace(
        declared, catalog=spark.table_catalog, engine_profile=declared.profile.name
    ), spark.sql_catalog


def checked_sql(sql: SqlText, declaration: WriteDeclaration, sql_catalog: str | None, where: str) -> str:
    """The SQL text to run, once it is exactly the declared write on the declared table
    (``core.sql.check_sql_write``); an error naming the statement and what differs otherwise."""
    try:
        check_sql_write(sql, declaration, sql_catalog, catalogs_known=sql_catalog is not None)
    except InvalidDeclarationError as exc:
        raise InvalidDeclarationError(f"{where}: {exc}") from None
    return job_text(sql)[0]


def declare_spark_write(
    declared: WriteDeclaration, config: Mapping[str, Any], sql: SqlText | None, where: str
) -> WriteDeclaration:
    """The rendered declaration in the session's catalog, and the rendered SQL checked against
    it before admission and before any engine sees it: a refusal fails the task for good."""
    declaration, sql_catalog = spark_declaration(declared, config)
    if sql is not None:
        try:
            checked_sql(sql, declaration, sql_catalog, where)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{exc}; nothing ran") from exc
    return declaration


class SparkWriteOperator(OccflowWriteOperator):
    """A write job on Spark under the table's conflict policy.

    :param job: SQL text (templated), a list of SQL statements, a callable ``(spark,
        job_context)`` or a ``Path`` to a PySpark application file. ``job_context.params`` holds
        the rendered partition values. SQL is checked when the DAG is parsed (if it holds no
        template) and after rendering, before admission: it must be exactly one write statement
        of the declared operation on the declared table (``docs/operators.md``); only a list may
        put ``SET key = value`` statements before the write.
    :param occflow_spark_conn_id: the ``occflow_spark`` connection (default: embedded local).
    :param spark_config: a config dict used instead of a connection (keys of ``SparkConfig``).
    :param job_params: extra string parameters for a callable / application job (templated).
    :param create_if_missing: ``CREATE TABLE IF NOT EXISTS`` the table before the write (in the
        connection's table format, its database / namespace too), with ``schema`` ``{column:
        Spark SQL type}`` and ``partition_by`` (default: the declared partition columns). Every
        name is quoted and every type checked against Spark's type names: nothing else reaches SQL.
    :param partition_columns: the table's partition columns, as a hint for DAG parse time: a SQL
        job that leaves ``partitions`` out (and holds no template) is then derived to its
        partitions when the DAG is parsed, so ``occflow lint`` and ``pools plan`` see them
        (``partition_by`` of ``create_if_missing`` is the same hint). At run time the partitions
        are derived again from the table's real columns, and a hint that names other columns
        than the table's fails the task.
    """

    template_fields: Sequence[str] = ("partitions", "sql", "job_params")
    template_fields_renderers = {"sql": "sql"}
    engine_name = "spark"

    def __init__(
        self,
        *,
        job: str | Sequence[str] | Path | Callable[..., None],
        occflow_spark_conn_id: str = DEFAULT_CONN_ID,
        spark_config: Mapping[str, Any] | None = None,
        job_params: Mapping[str, str] | None = None,
        create_if_missing: bool = False,
        schema: Mapping[str, str] | None = None,
        partition_by: Sequence[str] | None = None,
        partition_columns: Sequence[str] | None = None,
        allow_unsafe_retention: bool = False,
        **kwargs: Any,
    ) -> None:
        sql = sql_of(job)
        # A SQL job may leave operation and partitions out: the operation is derived now, the
        # partitions at run time, from the rendered SQL and the table's real partition columns.
        derives = {
            "operation": sql is not None and kwargs.get("operation") is None,
            "partitions": sql is not None and "partitions" not in kwargs,
            "profile": kwargs.get("profile") is None,
        }
        if kwargs.get("operation") is None:
            kwargs["operation"] = sql_operation(sql, kwargs)
        super().__init__(**kwargs)
        self.derives = derives
        self.sql: SqlText | None = sql
        # Not SQL: a callable or an application file (checked below); SQL runs from ``self.sql``.
        self.job: Path | Callable[..., None] | None = None
        if self.sql is None and (callable(job) or isinstance(job, Path)):
            self.job = job
        elif self.sql is None:
            raise InvalidDeclarationError(
                f"{self.task_id}: job must be SQL text, a list of SQL statements, a callable (spark, "
                f"context) or a Path to an application file, got {type(job).__name__}"
            )
        self.occflow_spark_conn_id = occflow_spark_conn_id
        self.spark_config = dict(spark_config) if spark_config is not None else None
        self.job_params = dict(job_params or {})
        self.create_if_missing = create_if_missing
        self.schema = dict(schema) if schema is not None else None
        self.partition_by = None if partition_by is None else tuple(partition_by)
        if create_if_missing:  # a bad column, type or partition column fails the DAG import
            table_columns(self.schema, self._partition_columns(self.occflow_write), self.task_id)
        elif schema is not None or partition_by is not None:
            raise InvalidDeclarationError(
                f"{self.task_id}: schema / partition_by need create_if_missing=True"
            )
        self.occflow_write, sql_catalog = spark_declaration(self.occflow_write, self.spark_config)
        self.allow_unsafe_retention = allow_unsafe_retention
        self._check_sql_at_parse_time(sql_catalog)
        self.partition_columns = _hinted_columns(partition_columns, self.partition_by, self.task_id)
        if self.partition_columns and derives["partitions"] and self.sql is not None and not templated(self.sql):
            # Parse time: the partitions the SQL names under the hinted columns (never narrower
            # than the engine's reading: no engine named, the widest rule applies).
            derived = derive_write(self.sql, list(self.partition_columns))
            self.occflow_write = replace(self.occflow_write, partitions=derived.partitions)
        self.declare_table_outlet()

    def _check_sql_at_parse_time(self, sql_catalog: str | None) -> None:
        """A SQL job checked when the DAG is parsed, so a refusal is a DAG import error: without
        templates, exactly the declared write with a safe retention; with templates, only its
        declared operation where the text reads as SQL (the rest once rendered, in ``declare``)."""
        if self.sql is None:
            return
        if not templated(self.sql):
            checked_sql(self.sql, self.occflow_write, sql_catalog, self.task_id)
            check_sql_retention(self.sql, self.occflow_write, self.allow_unsafe_retention, self.task_id)
        elif not self.derives["operation"]:
            check_templated_operation(self.sql, self.occflow_write, self.task_id)

    def table_asset_uri(self) -> str | None:
        return spark_asset_uri(
            self.table, self.occflow_write.profile.table_format, self.spark_config, self.occflow_spark_conn_id
        )

    @classmethod
    def parse_time_asset_uri(cls, kwargs: Mapping[str, Any]) -> str | None:
        """The URI ``table_asset_uri`` builds, from a mapped task's ``.partial`` arguments:
        ``table``, ``table_format`` or ``profile``, and ``spark_config`` or the connection id.
        ``None`` (no outlet) when ``.partial`` leaves the table or its format to ``expand``."""
        table, profile, table_format = kwargs.get("table"), kwargs.get("profile"), kwargs.get("table_format")
        if not isinstance(table, str) or (profile is None and table_format is None):
            return None
        config = kwargs.get("spark_config")
        return spark_asset_uri(
            table,
            resolve_profile(profile, table_format).table_format,
            None if config is None else dict(config),
            str(kwargs.get("occflow_spark_conn_id", DEFAULT_CONN_ID)),
        )

    def declare(self) -> WriteDeclaration:
        config = self.session_config()  # one read of the Airflow connection for both uses below
        declaration = declare_spark_write(super().declare(), config, self.sql, self.task_id)
        if self.create_if_missing:
            # Before the table's facts are read; CREATE ... IF NOT EXISTS conflicts with no write.
            self.create_table(declaration)
        if self.sql is None:
            # A callable job: start the Spark session now, before admission, so that the lease
            # covers the job and not the JVM's start (5-20 s). A SQL job's session is up already:
            # the table's facts were read with it just below.
            spark_engine(config).session()
            return declaration
        try:
            check_sql_retention(self.sql, declaration, self.allow_unsafe_retention, self.task_id)
            if _delta_vacuum(declaration):  # the table's own (longer) floor, before admission
                vacuum_retention(spark_engine(config).session(), declaration.table, job_text(self.sql)[0],
                                 allow_unsafe_retention=self.allow_unsafe_retention, where=self.task_id)
            return self.declare_from_table(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing ran") from exc

    def declare_from_table(self, declaration: WriteDeclaration) -> WriteDeclaration:
        """The declaration the rendered SQL and the table's facts give: partitions derived with
        the table's real partition columns (or checked against the declared ones), and the
        profile the table's facts say (a declared one they contradict is refused)."""
        facts = self._target(declaration).table_facts(declaration.table_key)
        if facts is not None and self.partition_columns and (
            sorted(c.lower() for c in self.partition_columns) != sorted(c.lower() for c in facts.partition_columns)
        ):
            raise InvalidDeclarationError(
                f"partition_columns={list(self.partition_columns)} but {facts.table} is partitioned by "
                f"{list(facts.partition_columns) or 'nothing'}: fix the hint (lint read the DAG with it)"
            )
        derived = derive_write(
            self.sql or "",
            None if facts is None else facts.partition_columns,
            None if facts is None else facts.engine,
            column_types=None if facts is None else facts.partition_column_types,
        )
        profile = declaration.profile
        if facts is not None and self.derives["profile"]:
            profile = facts.profile(derived.operation, zorder=derived.zorder)
            if profile.table_format != declaration.profile.table_format:
                raise InvalidDeclarationError(
                    f"the task declares a {declaration.profile.table_format} table but {facts.table} is a "
                    f"{facts.table_format} table ({facts.engine})"
                )
        elif facts is not None:
            facts.check_declared_profile(profile, derived.operation, zorder=derived.zorder)
        if facts is not None:  # declared values as the engine compares them: {"p": "07"} on INT is p=7
            declaration = declaration.with_typed_partitions(facts.partition_column_types, facts.engine)
        settled = settle(declaration, derived, profile, facts, derive_partitions=self.derives["partitions"])
        if facts is not None and settled.declaration.partitions is not None:
            # What the table and the session add (issue 33): an older Iceberg spec with live files
            # or the runtime file filter makes the write's reach the whole table; Delta column
            # mapping keys the claim by physical columns (the report keeps the declared names).
            keyed, why = settled.declaration.keyed_by_reach(facts)
            settled = Settled(keyed, (*settled.why, *why))
        self.profile = settled.declaration.profile.name  # the retry policy follows the table's matrix
        self.log.info("declared from the SQL and the table: %s", "; ".join(settled.why))
        return settled.declaration

    def _partition_columns(self, declaration: WriteDeclaration) -> list[str]:
        if self.partition_by is not None:
            return list(self.partition_by)
        return sorted({str(k) for spec in declaration.partitions or () for k in spec})

    def create_table(self, declaration: WriteDeclaration) -> None:
        """``CREATE TABLE IF NOT EXISTS`` (and its namespace) in the session's table format."""
        statement = self._target(declaration).create(
            self.schema or {}, self._partition_columns(declaration), self.task_id
        )
        self.log.info("ensured the table exists: %s", statement)

    def openlineage_location(self) -> tuple[str, str, tuple[str, str] | None]:
        return (*spark_table_location(self.session_config(), self.table), None)

    def session_config(self) -> dict[str, Any]:
        if self.spark_config is not None:
            return dict(self.spark_config)
        return OccflowSparkHook(self.occflow_spark_conn_id).session_config()

    def _target(self, declaration: WriteDeclaration) -> SparkTarget:
        params = {**partition_params(declaration), **{k: str(v) for k, v in self.job_params.items()}}
        return SparkTarget(self.session_config(), declaration.table, params, self._job_for)

    def _job_for(self, declaration: WriteDeclaration) -> SparkJob:
        if self.sql is None:
            assert self.job is not None  # __init__: SQL text, or a callable / a Path
            return self.job
        # Checked in declare(); again here, against the running session's catalog, so the
        # text that runs is the text that was checked.
        text = checked_sql(self.sql, declaration, spark_engine(self.session_config()).config.sql_catalog, self.task_id)
        if _delta_vacuum(declaration):
            # delta-spark: the table's floor checked again as the VACUUM runs, and Delta's own
            # check off for this statement only, only when allowed.
            return DeltaVacuumJob(text, declaration.table, self.allow_unsafe_retention, where=self.task_id)
        return text

    def write_target(self, declaration: WriteDeclaration, context: Any) -> SparkTarget:
        return self._target(declaration)


def _delta_vacuum(declaration: WriteDeclaration) -> bool:
    return declaration.operation is Operation.VACUUM and declaration.profile.table_format == "delta"


def sql_operation(sql: SqlText | None, kwargs: Mapping[str, Any]) -> str:
    """The operation a SQL job performs (DAG parse time; a template inside a string literal
    reads as that literal). A job that cannot be read needs ``operation=`` declared."""
    where = str(kwargs.get("task_id", "SparkWriteOperator"))
    if sql is None:
        raise InvalidDeclarationError(f"{where}: operation is required unless the job is SQL")
    try:
        return derive_write(sql, None).operation.value
    except InvalidDeclarationError as exc:
        hint = " (it holds a template: declare operation=...)" if templated(sql) else ""
        raise InvalidDeclarationError(
            f"{where}: the operation cannot be derived from the SQL job{hint}: {exc}"
        ) from None


def check_sql_retention(sql: SqlText, declaration: WriteDeclaration, allow: bool, where: str) -> None:
    """A VACUUM ... RETAIN n HOURS or an Iceberg older_than below the engine's safe minimum is
    refused (``core.operations.check_retention``) unless ``allow_unsafe_retention=True``; a job
    that leaves the retention to the engine passes."""
    text, _ = job_text(sql)
    hours = statement_retention_hours(declaration.operation, text, datetime.now(timezone.utc))
    # The job names its retention in SQL (RETAIN n HOURS, older_than => TIMESTAMP '...'): say so.
    check_retention(declaration.operation, hours, allow_unsafe_retention=allow, where=f"{where} (its SQL job)")


def check_templated_operation(sql: SqlText, declaration: WriteDeclaration, where: str) -> None:
    """A templated SQL job's operation against the declared one, at DAG parse time, when the
    text reads as SQL with its templates in place (else it is checked once rendered)."""
    try:
        derived = derive_write(sql, None)
    except InvalidDeclarationError:
        return
    try:
        check_derived_against(derived, replace(declaration, partitions=None), templated=True)
    except InvalidDeclarationError as exc:
        raise InvalidDeclarationError(f"{where}: {exc}") from None


#: The asset authority of Spark's default warehouse (``spark-warehouse`` in the driver's working
#: directory, wherever that is): docs/assets.md.
DEFAULT_WAREHOUSE_AUTHORITY = "spark-warehouse"


def spark_asset_uri(
    table: str, table_format: str, spark_config: Mapping[str, Any] | None, conn_id: str
) -> str | None:
    """The asset URI of a table written through Spark (docs/assets.md): ``<format>://`` + the
    OpenLineage namespace (the warehouse) + ``/`` + the OpenLineage name (the catalog-qualified
    identifier), from ``spark_config``; with a connection, which DAG parsing does not read, the
    connection id stands for the warehouse. ``None`` for a format with no asset scheme."""
    if table_format not in TABLE_SCHEMES:
        return None
    if spark_config is None:
        return catalog_table_uri(table_format, conn_id, table)
    namespace, name = spark_table_location(spark_config, table)
    spark = SparkConfig.from_dict(spark_config)
    if not isinstance(spark.table_format_spec(), IcebergFormat) and not spark.conf.get("spark.sql.warehouse.dir"):
        # Spark's default warehouse is under the driver's working directory, which differs
        # between the DAG processor and the worker: one name for it keeps the asset one asset.
        namespace = DEFAULT_WAREHOUSE_AUTHORITY
    return catalog_table_uri(table_format, namespace, name)


def partition_params(declaration: WriteDeclaration) -> dict[str, str]:
    """A single partition's values as job parameters (``{"ds": "2024-01-01"}``)."""
    if not declaration.partitions or len(declaration.partitions) != 1:
        return {}
    return {str(k): str(v) for k, v in declaration.partitions[0].items()}


def _hinted_columns(
    partition_columns: Sequence[str] | None, partition_by: tuple[str, ...] | None, task_id: str
) -> tuple[str, ...] | None:
    """The partition columns a DAG says at parse time: ``partition_columns``, else
    ``create_if_missing``'s ``partition_by``; each a plain column name."""
    hint = partition_columns if partition_columns is not None else partition_by
    if hint is None:
        return None
    if isinstance(hint, str) or not all(isinstance(c, str) and c.isidentifier() for c in hint):
        raise InvalidDeclarationError(
            f"{task_id}: partition_columns must be a list of column names, got {hint!r}"
        )
    return tuple(hint)

"""``SparkWriteOperator``: the occflow write flow on a Spark session (Iceberg, Delta, Parquet)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.observed import ObservedFootprint
from ..core.ranges import spec_json
from ..core.sql import check_sql_write, job_text
from ..core.sqlderive import check_derived_against, derive_write
from ..core.tablefacts import TableFacts
from ..engines.ledger import CommitLedger
from ..engines.outcome import WriteOutcome
from ..engines.spark import SparkConfig, SparkEngine
from ..engines.spark.facts import ENGINES as FACT_FORMATS
from ..engines.spark.facts import spark_table_facts
from ..engines.spark.identifiers import quote_table, split_table
from ..engines.spark.observed import observe_iceberg_snapshot
from ..hooks.spark import DEFAULT_CONN_ID, OccflowSparkHook
from .base import OccflowWriteOperator
from .derived import settle

_TEMPLATE_MARK = ("{{", "{%")
_engines: dict[str, SparkEngine] = {}
_engines_lock = threading.Lock()


def spark_engine(config: Mapping[str, Any]) -> SparkEngine:
    """One engine (one session) per config per process: attempts and tasks reuse the session."""
    key = json.dumps(config, sort_keys=True, default=str)
    with _engines_lock:
        if key not in _engines:
            _engines[key] = SparkEngine(config)
        return _engines[key]


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
    return replace(declared, catalog=spark.table_catalog, engine_profile=declared.profile.name), spark.sql_catalog


def checked_sql(sql: SqlText, declaration: WriteDeclaration, sql_catalog: str | None, where: str) -> str:
    """The SQL text to run, once it is exactly the declared write on the declared table
    (``core.sql.check_sql_write``); an error naming the statement and what differs otherwise."""
    try:
        check_sql_write(sql, declaration, sql_catalog, catalogs_known=sql_catalog is not None)
    except InvalidDeclarationError as exc:
        raise InvalidDeclarationError(f"{where}: {exc}") from None
    return job_text(sql)[0]


def declare_spark_write(operator: Any, declared: WriteDeclaration) -> WriteDeclaration:
    """The rendered declaration in the session's catalog, and the rendered SQL checked against
    it before admission and before any engine sees it: a refusal fails the task for good."""
    declaration, sql_catalog = spark_declaration(declared, operator.session_config())
    if operator.sql is not None:
        try:
            checked_sql(operator.sql, declaration, sql_catalog, operator.task_id)
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
        **kwargs: Any,
    ) -> None:
        sql = sql_of(job)
        # A SQL job may leave operation and partitions out: the operation is derived now, the
        # partitions at run time, from the rendered SQL and the table's real partition columns.
        derives = {"operation": sql is not None and kwargs.get("operation") is None,
                   "partitions": sql is not None and "partitions" not in kwargs,
                   "profile": kwargs.get("profile") is None}
        if kwargs.get("operation") is None:
            kwargs["operation"] = sql_operation(sql, kwargs)
        super().__init__(**kwargs)
        self.derives = derives
        self.sql: SqlText | None = sql
        self.job = None if self.sql is not None else job
        if self.job is not None and not (callable(self.job) or isinstance(self.job, Path)):
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
            raise InvalidDeclarationError(f"{self.task_id}: schema / partition_by need create_if_missing=True")
        self.occflow_write, sql_catalog = spark_declaration(self.occflow_write, self.spark_config)
        if self.sql is not None and not templated(self.sql):
            checked_sql(self.sql, self.occflow_write, sql_catalog, self.task_id)  # a DAG import error
        elif self.sql is not None and not derives["operation"]:
            check_templated_operation(self.sql, self.occflow_write, self.task_id)

    def declare(self) -> WriteDeclaration:
        declaration = declare_spark_write(self, super().declare())
        if self.create_if_missing:
            # Before the table's facts are read; CREATE ... IF NOT EXISTS conflicts with no write.
            self.create_table(declaration)
        if self.sql is None:
            return declaration
        try:
            return self.declare_from_table(declaration)
        except InvalidDeclarationError as exc:
            raise AirflowFailException(f"{self.task_id}: {exc}; nothing ran") from exc

    def declare_from_table(self, declaration: WriteDeclaration) -> WriteDeclaration:
        """The declaration the rendered SQL and the table's facts give: partitions derived with
        the table's real partition columns (or checked against the declared ones), and the
        profile the table's facts say (a declared one they contradict is refused)."""
        engine = spark_engine(self.session_config())
        facts: TableFacts | None = None
        if engine.format.name in FACT_FORMATS:
            facts = spark_table_facts(engine.session(), declaration.table_key)
        derived = derive_write(self.sql or "", None if facts is None else facts.partition_columns)
        profile = declaration.profile
        if facts is not None and self.derives["profile"]:
            profile = facts.profile(derived.operation)
            if profile.table_format != declaration.profile.table_format:
                raise InvalidDeclarationError(
                    f"the task declares a {declaration.profile.table_format} table but {facts.table} is a "
                    f"{facts.table_format} table ({facts.engine})"
                )
        elif facts is not None:
            facts.check_declared_profile(profile, derived.operation)
        return settle(self, declaration, derived, profile, facts)

    def _partition_columns(self, declaration: WriteDeclaration) -> list[str]:
        if self.partition_by is not None:
            return list(self.partition_by)
        return sorted({str(k) for spec in declaration.partitions or () for k in spec})

    def create_table(self, declaration: WriteDeclaration) -> None:
        """``CREATE TABLE IF NOT EXISTS`` (and its namespace) in the session's table format."""
        engine = spark_engine(self.session_config())
        name = engine.format.qualify(self.table) if hasattr(engine.format, "qualify") else self.table
        statements = create_table_sql(engine.format.name, name, self.schema or {},
                                      self._partition_columns(declaration), self.task_id)
        spark = engine.session()
        for statement in statements:
            spark.sql(statement)
        self.log.info("ensured the table exists: %s", statements[-1])

    def report(self, declaration: WriteDeclaration, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().report(declaration, *args, **kwargs)
        # Derived partitions may hold ranges (``core.ranges.ValueRange``): JSON for XCom.
        out["partitions"] = None if declaration.partitions is None else [spec_json(p) for p in declaration.partitions]
        return out

    def session_config(self) -> dict[str, Any]:
        if self.spark_config is not None:
            return dict(self.spark_config)
        return OccflowSparkHook(self.occflow_spark_conn_id).session_config()

    def commit_ledger(self, table: str, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
        """The exactly-once ledger the engine's table format keeps (Iceberg snapshots, Delta
        history); ``None`` for plain Parquet/Hive tables. Spark commits name no task, so
        ``only_if`` does not apply."""
        engine = spark_engine(self.session_config())
        return engine.format.commit_ledger(engine.session(), table)

    def prepare_engine(self, declaration: WriteDeclaration, context: Any) -> None:
        spark_engine(self.session_config()).session()

    def run_attempt(self, declaration: WriteDeclaration, context: Any, attempt: int) -> WriteOutcome:
        engine = spark_engine(self.session_config())
        self.engine_name = engine.engine_name
        if self.sql is not None:
            # Checked in declare(); again here, against the running session's catalog, so the
            # text that runs is the text that was checked.
            job: Any = checked_sql(self.sql, declaration, engine.config.sql_catalog, self.task_id)
        else:
            job = self.job
        params = {**partition_params(declaration), **{k: str(v) for k, v in self.job_params.items()}}
        # Each attempt plans again: the engine's catalog does not cache tables, so the job reads
        # the table's current snapshot (the fresh snapshot in-task retries rely on).
        # before_commit runs right before the SQL statement that writes (a callable: before it starts).
        return engine.run(job, declaration.table, declaration.operation, params=params,
                          before_commit=self.before_commit)

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed Iceberg snapshot really touched (its manifest entries); ``None``
        for the other table formats and for a commit with no snapshot to read."""
        engine = spark_engine(self.session_config())
        if engine.format.name != "iceberg" or outcome.snapshot_id is None:
            return None
        return observe_iceberg_snapshot(engine.session(), engine.format.qualify(self.table), outcome.snapshot_id)


#: Spark SQL type names a created table's columns may have (``DECIMAL(p, s)`` and
#: ``VARCHAR(n)`` / ``CHAR(n)`` with their numbers): the whole type must match, so no text a DAG
#: passes as a "type" reaches the statement.
_SPARK_TYPE = re.compile(
    r"^(?:STRING|BIGINT|LONG|INT|INTEGER|SMALLINT|SHORT|TINYINT|BYTE|DOUBLE|FLOAT|REAL|BOOLEAN|"
    r"DATE|TIMESTAMP|TIMESTAMP_NTZ|TIMESTAMP_LTZ|BINARY|"
    r"DECIMAL(?:\(\s*\d{1,2}\s*(?:,\s*\d{1,2}\s*)?\))?|(?:VAR)?CHAR\(\s*\d{1,5}\s*\))$",
    re.IGNORECASE,
)
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USING = {"iceberg": "iceberg", "delta": "delta", "parquet": "parquet", "hive": "hive"}


def table_columns(schema: Mapping[str, str] | None, partition_by: Sequence[str], where: str) -> list[tuple[str, str]]:
    """``schema`` checked: each column a name, each type a Spark type name, each partition
    column one of the columns; an error naming what is wrong otherwise."""
    if not schema:
        raise InvalidDeclarationError(f"{where}: create_if_missing needs schema={{column: Spark SQL type}}")
    columns = []
    for name, kind in schema.items():
        if not isinstance(name, str) or not _COLUMN.match(name):
            raise InvalidDeclarationError(
                f"{where}: create_if_missing: invalid column name {name!r}: use letters, digits and "
                "underscores, not starting with a digit"
            )
        if not isinstance(kind, str) or not _SPARK_TYPE.match(kind.strip()):
            raise InvalidDeclarationError(
                f"{where}: create_if_missing: column {name!r} has type {kind!r}; use a Spark SQL type name "
                "(STRING, BIGINT, INT, DOUBLE, BOOLEAN, DATE, TIMESTAMP, DECIMAL(p,s), ...)"
            )
        columns.append((name, kind.strip().upper()))
    missing = [c for c in partition_by if c not in schema]
    if missing:
        raise InvalidDeclarationError(
            f"{where}: create_if_missing: partition column(s) {missing} are not in the schema ({', '.join(schema)})"
        )
    return columns


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def create_table_sql(
    table_format: str, table: str, schema: Mapping[str, str], partition_by: Sequence[str], where: str
) -> list[str]:
    """The statements that create ``table`` when it is missing: its namespace, then the table,
    every identifier backquoted and every type checked (``table_columns``)."""
    columns = table_columns(schema, partition_by, where)
    using = _USING.get(table_format)
    if using is None:
        raise InvalidDeclarationError(f"{where}: create_if_missing: cannot create a {table_format!r} table")
    parts = split_table(table)
    statements = []
    if len(parts) > 1:
        statements.append("CREATE NAMESPACE IF NOT EXISTS " + ".".join(_quoted(p) for p in parts[:-1]))
    body = ", ".join(f"{_quoted(name)} {kind}" for name, kind in columns)
    create = f"CREATE TABLE IF NOT EXISTS {quote_table(table)} ({body}) USING {using}"
    if partition_by:
        create += " PARTITIONED BY (" + ", ".join(_quoted(c) for c in partition_by) + ")"
    statements.append(create)
    return statements


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
        raise InvalidDeclarationError(f"{where}: the operation cannot be derived from the SQL job{hint}: {exc}") from None


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


def partition_params(declaration: WriteDeclaration) -> dict[str, str]:
    """A single partition's values as job parameters (``{"ds": "2024-01-01"}``)."""
    if not declaration.partitions or len(declaration.partitions) != 1:
        return {}
    return {str(k): str(v) for k, v in declaration.partitions[0].items()}

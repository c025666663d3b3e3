"""``SparkWriteOperator``: the occflow write flow on a Spark session (Iceberg, Delta, Parquet)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..core.operations import Operation
from ..engines.ledger import CommitLedger
from ..engines.outcome import WriteOutcome
from ..engines.spark import SparkEngine, SqlJob
from ..hooks.spark import DEFAULT_CONN_ID, OccflowSparkHook
from .base import OccflowWriteOperator

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


def check_sql_operation(sql: str, declared: Operation, where: str) -> None:
    """The SQL's first write statement must be the declared operation (or the matrix is wrong)."""
    found = SqlJob(sql).operation()
    if found is not None and found is not declared:
        raise InvalidDeclarationError(
            f"{where}: the SQL job is a {found.value} but the task declares {declared.value}; "
            "declare the operation the job performs"
        )


class SparkWriteOperator(OccflowWriteOperator):
    """A write job on Spark under the table's conflict policy.

    :param job: SQL text (templated), a callable ``(spark, job_context)`` or a ``Path`` to a
        PySpark application file. ``job_context.params`` holds the rendered partition values.
    :param occflow_spark_conn_id: the ``occflow_spark`` connection (default: embedded local).
    :param spark_config: a config dict used instead of a connection (keys of ``SparkConfig``).
    :param job_params: extra string parameters for a callable / application job (templated).
    """

    template_fields: Sequence[str] = ("partitions", "sql", "job_params")
    template_fields_renderers = {"sql": "sql"}
    engine_name = "spark"

    def __init__(
        self,
        *,
        job: str | Path | Callable[..., None],
        occflow_spark_conn_id: str = DEFAULT_CONN_ID,
        spark_config: Mapping[str, Any] | None = None,
        job_params: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sql: str | None = job if isinstance(job, str) else None
        self.job = None if isinstance(job, str) else job
        if self.sql is not None and not any(m in self.sql for m in _TEMPLATE_MARK):
            check_sql_operation(self.sql, self.occflow_write.operation, self.task_id)
        if self.job is not None and not (callable(self.job) or isinstance(self.job, Path)):
            raise InvalidDeclarationError(
                f"{self.task_id}: job must be SQL text, a callable (spark, context) or a Path to an "
                f"application file, got {type(job).__name__}"
            )
        self.occflow_spark_conn_id = occflow_spark_conn_id
        self.spark_config = dict(spark_config) if spark_config is not None else None
        self.job_params = dict(job_params or {})

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
            check_sql_operation(self.sql, declaration.operation, self.task_id)  # after rendering
            job: Any = self.sql
        else:
            job = self.job
        params = {**partition_params(declaration), **{k: str(v) for k, v in self.job_params.items()}}
        # Each attempt plans again: the engine's catalog does not cache tables, so the job reads
        # the table's current snapshot (the fresh snapshot in-task retries rely on).
        return engine.run(job, declaration.table, declaration.operation, params=params)


def partition_params(declaration: WriteDeclaration) -> dict[str, str]:
    """A single partition's values as job parameters (``{"ds": "2024-01-01"}``)."""
    if not declaration.partitions or len(declaration.partitions) != 1:
        return {}
    return {str(k): str(v) for k, v in declaration.partitions[0].items()}

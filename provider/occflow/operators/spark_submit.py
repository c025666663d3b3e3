"""``SparkSubmitWriteOperator``: the write flow with each attempt run as a spark-submit driver.

The driver writes its ``WriteOutcome`` to an outcome file (``occflow.engines.spark.submit``). The
outcome path is the job's external id for Airflow 3.3's ``ResumableJobMixin``: it is saved in
the task's state store before the operator waits, so a retry after a worker crash finds the
driver still running and reconnects to it instead of submitting the same write twice; a driver
that already committed is not run again.

Exactly-once covers the driver's commit: the write's commit tag goes to the driver
(``submit_job(tag=...)``), which puts it on the commit and checks the table for it right before
committing; the operator's ledger (``SubmitLedger``) reads the same table history, so a later try
whose driver died after its commit (no outcome written) finds the commit instead of writing again.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import ResumableJobMixin

from ..core.declaration import WriteDeclaration
from ..core.errors import InvalidDeclarationError
from ..engines.outcome import WriteOutcome
from ..engines.spark import CallableJob, SubmitError, SubmittedJob, read_outcome
from ..engines.spark import submit_job as submit_driver
from ..engines.spark.lease_window import WindowPublisher, window_path
from ..engines.spark.submit_ledger import submit_tag
from ..engines.spark.submit_target import SparkSubmitTarget
from ..engines.target import AttemptContext
from ..hooks.spark import DEFAULT_CONN_ID, OccflowSparkHook, embedded_home, mask_config_secrets
from .base import OccflowWriteOperator
from .lineage import spark_table_location
from .spark import (
    SqlText,
    checked_sql,
    declare_spark_write,
    partition_params,
    spark_asset_uri,
    spark_declaration,
    sql_of,
    templated,
)

RUNNING, SUCCEEDED, FAILED = "RUNNING", "SUCCEEDED", "FAILED"


def outcome_dir() -> Path:
    """Where drivers write outcomes: ``$OCCFLOW_SUBMIT_DIR`` or ``$OCCFLOW_HOME/submit``."""
    return Path(os.environ.get("OCCFLOW_SUBMIT_DIR") or embedded_home() / "submit")


class SparkSubmitWriteOperator(ResumableJobMixin, OccflowWriteOperator):
    """A write job run by spark-submit, under the table's conflict policy, resumable across retries.

    :param job: SQL text (templated) or a list of SQL statements (checked as
        ``SparkWriteOperator`` checks them), an importable ``"package.module:function"`` taking
        ``(spark, job_context)``, or a ``Path`` to a PySpark application file.
    :param occflow_spark_conn_id: the ``occflow_spark`` connection (a master URL, not Spark Connect).
    :param spark_config: a config dict used instead of a connection.
    :param py_files: extra Python files for the driver (``--py-files``).
    :param job_params: extra string parameters for the job (templated).
    :param durable: keep the driver's outcome path in the task state store (``ResumableJobMixin``).
    :param master_gone_seconds: a cluster master (``spark://``) that accepts no connection for this
        long means the cluster is gone: the driver is stopped and the attempt fails with that
        message (not a conflict) instead of waiting forever.
    """

    template_fields: Sequence[str] = ("partitions", "sql", "job_params")
    template_fields_renderers = {"sql": "sql"}
    external_id_key = "occflow_submit_outcome_path"
    engine_name = "spark-submit"

    def __init__(
        self,
        *,
        job: str | Sequence[str] | Path,
        occflow_spark_conn_id: str = DEFAULT_CONN_ID,
        spark_config: Mapping[str, Any] | None = None,
        py_files: Sequence[str] = (),
        job_params: Mapping[str, str] | None = None,
        poll_interval: float = 1.0,
        master_gone_seconds: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sql: SqlText | None = None
        self.job: Any = None
        self.spark_config = dict(spark_config) if spark_config is not None else None
        if isinstance(job, Path):
            self.job = job
        elif isinstance(job, str) and re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", job.strip()):
            self.job = job.strip()  # a "module:function" reference, imported by the driver
        elif sql_of(job) is not None:
            self.sql = sql_of(job)
        else:
            raise InvalidDeclarationError(
                f"{self.task_id}: a spark-submit job is SQL text, 'package.module:function' or a Path to an "
                f"application file (callables must be importable by the driver), got {type(job).__name__}"
            )
        self.occflow_spark_conn_id = occflow_spark_conn_id
        self.occflow_write, sql_catalog = spark_declaration(self.occflow_write, self.spark_config)
        if self.sql is not None and not templated(self.sql):
            checked_sql(self.sql, self.occflow_write, sql_catalog, self.task_id)  # a DAG import error
        self.py_files = tuple(py_files)
        self.job_params = dict(job_params or {})
        self.poll_interval = poll_interval
        self.master_gone_seconds = master_gone_seconds
        self._attempt_state: dict[str, Any] = {}
        self.declare_table_outlet()

    def table_asset_uri(self) -> str | None:
        return spark_asset_uri(
            self.table, self.occflow_write.profile.table_format, self.spark_config, self.occflow_spark_conn_id
        )

    def declare(self) -> WriteDeclaration:
        return declare_spark_write(super().declare(), self.session_config(), self.sql, self.task_id)

    # ------------------------------------------------------------------ one attempt

    def write_target(self, declaration: WriteDeclaration, context: Any) -> SparkSubmitTarget:
        return SparkSubmitTarget(self.session_config(), declaration.table, self._run_driver)

    def _run_driver(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        self._attempt_state = {
            "declaration": declaration,
            "attempt": attempt.number,
            "path": None,
            "before_commit": attempt.before_commit,
            "fence": attempt.fence,
            "lease_live_until": attempt.lease_live_until,
            "window": None,
        }
        try:
            self.execute_resumable(
                attempt.user_context
            )  # submit, or reconnect to the driver a crashed try left
        finally:
            window = self._attempt_state["window"]
            if window is not None:  # the driver is done: the window closes (no later commit)
                window.__exit__(None, None, None)
        path = self._attempt_state["path"]
        outcome = read_outcome(path) if path else None
        if outcome is None:
            outcome = SubmittedJob.reconnect(path).wait(timeout=0)
        return outcome

    # ------------------------------------------------------------------ ResumableJobMixin

    def submit_job(self, context: Any) -> str:
        declaration: WriteDeclaration = self._attempt_state["declaration"]
        ti = context.get("ti")
        where = outcome_dir()
        if ti is not None:
            where = where / str(ti.dag_id) / _safe(str(ti.run_id)) / f"{ti.task_id}.{ti.map_index}"
        path = (
            where
            / f"try{getattr(ti, 'try_number', 0)}-attempt{self._attempt_state['attempt']}-{os.getpid()}.json"
        )
        config = self.session_config()
        job: Any = self.job
        if self.sql is not None:
            # The text the driver runs is the text checked (declare() checked it too).
            _, sql_catalog = spark_declaration(declaration, config)
            job = checked_sql(self.sql, declaration, sql_catalog, self.task_id)
        if isinstance(job, str) and self.sql is None:
            job = CallableJob.from_reference(job)
        params = {**partition_params(declaration), **{k: str(v) for k, v in self.job_params.items()}}
        if ti is not None:  # the application's name on the cluster says which task try it is
            config["app_name"] = _safe(f"occflow.{ti.dag_id}.{ti.task_id}.{ti.map_index}.try{ti.try_number}")
        # A new driver only while the lease is live and the write is not in the table yet.
        self._attempt_state["before_commit"]()
        fence = self._attempt_state["fence"]
        window = None
        if fence is not None:  # the driver checks the lease right before it commits (lease_window.py)
            window = WindowPublisher(
                window_path(path), fence, self._attempt_state["lease_live_until"]
            ).__enter__()
            self._attempt_state["window"] = window
        submitted = submit_driver(
            job,
            declaration.table,
            path,
            operation=declaration.operation,
            config=config,
            params=params,
            py_files=self.py_files,
            tag=submit_tag(),
            lease_window=None if window is None else (window.path, fence),
        )
        # The command names the files holding the conf and config, never a setting (submit_files.py).
        self.log.info("submitted driver pid %s, outcome %s, log %s: %s", submitted.pid, path, submitted.log_path,
                      shlex.join(submitted.command))
        self._attempt_state["path"] = str(path)
        return str(path)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        try:
            outcome = SubmittedJob.reconnect(str(external_id)).poll()
        except SubmitError:
            return FAILED
        if outcome is None:
            self._attempt_state["path"] = str(external_id)  # reconnecting: this is our attempt
            return RUNNING
        if outcome.committed:
            self._attempt_state["path"] = str(external_id)
            return SUCCEEDED
        return FAILED

    def is_job_active(self, status: str) -> bool:
        return status == RUNNING

    def is_job_succeeded(self, status: str) -> bool:
        return status == SUCCEEDED

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        # A lost commit is not an error here: the write flow classifies the outcome.
        SubmittedJob.reconnect(str(external_id)).wait(
            interval=self.poll_interval, master_gone_after=self.master_gone_seconds
        )

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        outcome = read_outcome(str(external_id))
        return None if outcome is None else outcome.to_json()

    def openlineage_location(self) -> tuple[str, str, tuple[str, str] | None]:
        return (*spark_table_location(self.session_config(), self.table), None)

    def session_config(self) -> dict[str, Any]:
        if self.spark_config is not None:
            mask_config_secrets(self.spark_config)
            return dict(self.spark_config)
        return OccflowSparkHook(self.occflow_spark_conn_id).session_config()

    def on_kill(self) -> None:
        # A durable driver outlives the task on purpose: the next try reconnects to it.
        if self.durable:
            return
        path = self._attempt_state.get("path")
        if path:
            SubmittedJob.reconnect(path).kill()


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", text)

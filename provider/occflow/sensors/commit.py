"""``TableCommitSensor``: waits for a commit on a table or a partition, deferrable.

What it waits for: a version (Delta version / Iceberg sequence number) at least ``min_version``,
a given Iceberg ``snapshot_id``, a commit touching ``partition``, or the commit an upstream
occflow write task made (read from that task's XCom report). The triggerer reads the table's log
from files (``occflow.triggers.commits``), so waiting holds no worker slot and no JVM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
from airflow.sdk import BaseSensorOperator

from ..core.declaration import partition_key, validate_table_identifier
from ..core.errors import InvalidDeclarationError
from ..hooks.spark import default_delta_location, embedded_home
from ..triggers.commits import FORMATS, CommitCondition, read_commits
from ..triggers.table import TableCommitTrigger


def default_location(table_format: str, table: str) -> str:
    """Where the embedded default keeps ``table`` (Delta path / Iceberg table folder)."""
    if table_format == "delta":
        return default_delta_location(table)
    parts = [p.strip("`") for p in table.split(".")]
    if len(parts) >= 3:
        parts = parts[-2:]  # catalog.db.table: the catalog is not a folder
    return str(Path(embedded_home(), "warehouse", *parts))


class TableCommitSensor(BaseSensorOperator):
    """Wait until a matching commit is in the table's log.

    :param table_format: ``delta`` or ``iceberg``.
    :param table: the table identifier (for the default location and messages).
    :param location: the table's path; default: where the embedded default keeps ``table``.
    :param min_version: wait for a commit with this version or later.
    :param snapshot_id: wait for this Iceberg snapshot.
    :param partition: only commits that touched this partition (``{"ds": "{{ ds }}"}``).
    :param upstream_task_id: wait for the commit this occflow write task made (its XCom report);
        ``upstream_dag_id`` for a task of another DAG (same run id unless ``upstream_run_id``).
    :param deferrable: wait in the triggerer (default) instead of poking from a worker slot.
    """

    template_fields: Sequence[str] = ("location", "partition", "min_version", "upstream_run_id")
    ui_color = "#e8f4fa"

    def __init__(
        self,
        *,
        table_format: str,
        table: str,
        location: str | None = None,
        min_version: int | None = None,
        snapshot_id: int | None = None,
        partition: Mapping[str, Any] | None = None,
        upstream_task_id: str | None = None,
        upstream_dag_id: str | None = None,
        upstream_run_id: str | None = None,
        deferrable: bool = True,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        if table_format not in FORMATS:
            raise InvalidDeclarationError(f"{self.task_id}: table_format must be one of {FORMATS}, got {table_format!r}")
        validate_table_identifier(table)
        if partition is not None:
            partition_key({k: "x" for k in partition})  # columns now, values after rendering
        if not any(v is not None for v in (min_version, snapshot_id, partition, upstream_task_id)):
            raise InvalidDeclarationError(
                f"{self.task_id}: say what to wait for: min_version, snapshot_id, partition or upstream_task_id"
            )
        self.table_format = table_format
        self.table = table
        self.location = location or default_location(table_format, table)
        self.min_version = min_version
        self.snapshot_id = snapshot_id
        self.partition = partition
        self.upstream_task_id = upstream_task_id
        self.upstream_dag_id = upstream_dag_id
        self.upstream_run_id = upstream_run_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval

    def condition(self, context: Any) -> CommitCondition | None:
        """The condition to wait for; ``None`` while the upstream task has not reported yet."""
        metadata: dict[str, str] = {}
        min_version = None if self.min_version is None else int(self.min_version)
        snapshot_id = self.snapshot_id
        if self.upstream_task_id is not None:
            ti = context["ti"]
            report = ti.xcom_pull(
                task_ids=self.upstream_task_id,
                dag_id=self.upstream_dag_id or ti.dag_id,
                run_id=self.upstream_run_id or ti.run_id,
            )
            if not report:
                return None
            if isinstance(report, list):  # a mapped upstream: wait for the last of its commits
                report = max(report, key=lambda r: r.get("version") or 0)
            if report.get("snapshot_id") is not None:
                snapshot_id = int(report["snapshot_id"])
            if report.get("version") is not None:
                min_version = int(report["version"])
            if self.table_format == "delta":
                # The operator wrote who made the commit into it: match exactly that commit.
                metadata = {
                    "occflow.dag_id": self.upstream_dag_id or ti.dag_id,
                    "occflow.task_id": self.upstream_task_id,
                    "occflow.run_id": self.upstream_run_id or ti.run_id,
                }
        partition = None if not self.partition else partition_key(self.partition)
        return CommitCondition(min_version, snapshot_id, partition, metadata)

    def poke(self, context: Any) -> bool | dict[str, Any]:
        condition = self.condition(context)
        if condition is None:
            self.log.info("upstream task %s has not reported a commit yet", self.upstream_task_id)
            return False
        found = condition.first_match(read_commits(self.table_format, self.location))
        if found is None:
            return False
        self.log.info("commit found on %s: %s", self.table, found.to_dict())
        return True

    def execute(self, context: Any, event: Any = None) -> dict[str, Any] | None:
        if not self.deferrable:
            super().execute(context)
            return None
        condition = self.condition(context)
        if condition is None:
            # The upstream has not reported: look again later without holding a slot.
            self.defer(trigger=TimeDeltaTrigger(timedelta(seconds=self.poll_interval)), method_name="execute")
        assert condition is not None
        found = condition.first_match(read_commits(self.table_format, self.location))
        if found is not None:
            return found.to_dict()
        self.defer(
            trigger=TableCommitTrigger(self.table_format, self.location, condition.to_dict(), self.poll_interval),
            method_name="execute_complete",
        )
        return None  # pragma: no cover - defer raises

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> dict[str, Any]:
        self.log.info("commit found on %s: %s", self.table, event.get("commit"))
        return dict(event["commit"])

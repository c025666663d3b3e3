"""``TableCommitSensor``: waits for a commit on a table or a partition, deferrable.

What it waits for: a version (Delta version / Iceberg sequence number) at least ``min_version``,
a given Iceberg ``snapshot_id``, a commit touching ``partition``, or the commit an upstream
occflow write task made (read from that task's XCom report). The triggerer reads the table's log
from files (``occflow.triggers.commits.read_commits``), so waiting holds no worker slot and no JVM;
``OutsideCommitTrigger``, the asset watcher for commits made outside Airflow, reads it with the
same reader, so both see the same commits and tell occflow's by the same tag.

MaxCompute tables (``table_format="maxcompute"``) are read through ``OccflowMaxComputeHook`` (the
operator's connection, or the stand-in): their two versions are ``min_id_version`` (every commit)
and ``min_time_version`` (only commits that change data: compaction and clustering have none,
spec 001); ``data_changes_only`` (the default for MaxCompute) does not count a compaction or a
clustering as the commit waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from ..core.declaration import partition_key, validate_table_identifier
from ..core.errors import InvalidDeclarationError
from ..engines.tags import KEYS
from ..hooks.maxcompute import DEFAULT_CONN_ID
from ..hooks.spark import default_delta_location, embedded_home
from ..triggers.commits import FORMATS, CommitCondition, maxcompute_location, read_commits
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

    :param table_format: ``delta``, ``iceberg`` or ``maxcompute``.
    :param table: the table identifier (for the default location and messages; on MaxCompute, the
        table whose commits are read).
    :param location: the table's path (Delta / Iceberg); default: where the embedded default keeps ``table``.
    :param min_version: wait for a commit with this version or later (Delta / Iceberg).
    :param snapshot_id: wait for this Iceberg snapshot.
    :param min_id_version: MaxCompute: wait for a commit with this ID version or later.
    :param min_time_version: MaxCompute: wait for a commit with this time version or later (a
        compaction or clustering has none, so never meets it).
    :param data_changes_only: MaxCompute (default ``True``): a compaction or clustering commit
        (no data change) is not the commit waited for.
    :param maxcompute_conn_id, project, endpoint, standin, standin_fallback: MaxCompute: where
        the client comes from, as for ``MaxComputeWriteOperator`` (``standin_fallback``: the
        stand-in only when the connection does not exist).
    :param partition: only commits that touched this partition (``{"ds": "{{ ds }}"}``).
    :param upstream_task_id: wait for the commit this occflow write task made (its XCom report);
        ``upstream_dag_id`` for a task of another DAG (same run id unless ``upstream_run_id``).
    :param deferrable: wait in the triggerer (default) instead of poking from a worker slot.
    """

    template_fields: Sequence[str] = (
        "location", "partition", "min_version", "min_id_version", "min_time_version", "upstream_run_id",
    )
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
        min_id_version: int | None = None,
        min_time_version: float | None = None,
        data_changes_only: bool | None = None,
        maxcompute_conn_id: str = DEFAULT_CONN_ID,
        project: str | None = None,
        endpoint: str | None = None,
        standin: str | None = None,
        standin_fallback: str | None = None,
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
        _check_targets(self.task_id, table_format, min_version=min_version, snapshot_id=snapshot_id,
                       location=location, min_id_version=min_id_version, min_time_version=min_time_version,
                       data_changes_only=data_changes_only, partition=partition, upstream_task_id=upstream_task_id)
        maxcompute = table_format == "maxcompute"
        self.table_format = table_format
        self.table = table
        if maxcompute:
            location = maxcompute_location(table, maxcompute_conn_id, project, endpoint, standin, standin_fallback)
        self.location = location or default_location(table_format, table)
        self.min_version = min_version
        self.min_id_version = min_id_version
        self.min_time_version = min_time_version
        self.data_changes_only = maxcompute if data_changes_only is None else bool(data_changes_only)
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
        maxcompute = self.table_format == "maxcompute"
        min_version = _version(self.task_id, "min_version", self.min_version, rendered=True)
        if maxcompute:
            min_version = _version(self.task_id, "min_id_version", self.min_id_version, rendered=True)
        min_time_version = _version(self.task_id, "min_time_version", self.min_time_version, rendered=True)
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
                    KEYS["dag_id"]: self.upstream_dag_id or ti.dag_id,
                    KEYS["task_id"]: self.upstream_task_id,
                    KEYS["run_id"]: self.upstream_run_id or ti.run_id,
                }
            if maxcompute:
                metadata = self._maxcompute_upstream(report)
        partition = None if not self.partition else partition_key(self.partition)
        return CommitCondition(min_version, snapshot_id, partition, metadata, min_time_version,
                               self.data_changes_only)

    def _maxcompute_upstream(self, report: Mapping[str, Any]) -> dict[str, str]:
        """Match exactly the instance the upstream MaxCompute write committed."""
        found = report.get("maxcompute") or {}
        if not found.get("instance_id"):
            raise AirflowFailException(
                f"{self.task_id}: upstream task {self.upstream_task_id} reported no MaxCompute instance "
                "(is it a MaxComputeWriteOperator?)"
            )
        if self.data_changes_only and found.get("data_change") is False:
            raise AirflowFailException(
                f"{self.task_id}: upstream task {self.upstream_task_id} committed a "
                f"{report.get('operation', 'compaction')} (no data change), which data_changes_only=True never "
                "counts; wait for it with data_changes_only=False"
            )
        return {"maxcompute.instance_id": str(found["instance_id"])}

    def poke(self, context: Any) -> bool:
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


def _version(task_id: str, name: str, value: Any, *, rendered: bool = False) -> Any:
    """A version bound: a number >= 0; a template is left for after rendering (``rendered``: now)."""
    if value is None or (isinstance(value, str) and not rendered and "{" in value):
        return value
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value) if name == "min_time_version" else int(value)
    except (TypeError, ValueError):
        raise InvalidDeclarationError(f"{task_id}: {name} must be a version number >= 0, got {value!r}") from None
    if number != number or number < 0:
        raise InvalidDeclarationError(f"{task_id}: {name} must be a version number >= 0, got {value!r}")
    return number


_MAXCOMPUTE_ONLY = ("min_id_version", "min_time_version", "data_changes_only")
_FILES_ONLY = ("min_version", "snapshot_id", "location")


def _check_targets(task_id: str, table_format: str, **given: Any) -> None:
    """Each parameter belongs to its format; versions are numbers >= 0; something is waited for."""
    for name in ("min_version", "min_id_version", "min_time_version"):
        _version(task_id, name, given[name])  # a template is checked once rendered
    maxcompute = table_format == "maxcompute"
    wrong = [name for name in (_FILES_ONLY if maxcompute else _MAXCOMPUTE_ONLY) if given[name] is not None]
    if wrong:
        raise InvalidDeclarationError(
            f"{task_id}: {', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to "
            f"table_format={table_format!r}; "
            + ("a MaxCompute table has min_id_version, min_time_version and data_changes_only, and is "
               "read through maxcompute_conn_id / standin" if maxcompute else
               "min_id_version, min_time_version and data_changes_only are MaxCompute's (table_format='maxcompute')")
        )
    targets = ("min_id_version", "min_time_version") if maxcompute else ("min_version", "snapshot_id")
    if all(given[name] is None for name in (*targets, "partition", "upstream_task_id")):
        raise InvalidDeclarationError(
            f"{task_id}: say what to wait for: {', '.join(targets)}, partition or upstream_task_id"
        )

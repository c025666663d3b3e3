"""Hourly writers and the nightly expire_snapshots on one Iceberg table through pyiceberg (no JVM).

Four mapped tasks each write one hour's partition of ``ops.hourly_metrics`` (an
``insert_overwrite`` of their ``hour``: a re-run replaces the hour, never doubles it), as a
late-running batch of hourly jobs does; at the same time the nightly maintenance expires the
table's old snapshots (``expire_snapshots``). All five take leases (admission is on, the default):
the hourly writes run side by side (disjoint hours, and pyiceberg validates an overwrite by its
filter), and the expire, which holds the whole table, waits until no hourly write is running, or
runs first and makes them wait: never beside one. Beside one, an expire that removes the snapshot
the writer started from fails the writer's commit ("Cannot find starting snapshot",
tests/engines/test_pyiceberg_maintenance.py reproduces it).

The expire keeps Iceberg's retention: snapshots younger than 5 days stay (the safe minimum; a
shorter ``older_than_hours`` is refused when the DAG is imported unless the task says
``allow_unsafe_retention=True``), and so do the 2 newest whatever their age. On the example's
fresh table nothing is that old yet, so it expires nothing; a nightly schedule expires what aged
out. The last task checks every hour's rows, that each hour's snapshot is still in the table's
log (nothing younger than the retention expired) and that the expire committed.

Each hour's rows take a few seconds to compute (``PREPARE_SECONDS``, or the run's
``prepare_seconds``), as a real aggregation would: the window in which the expire would strike.
The catalog is a SQL catalog on SQLite under the embedded home (``$OCCFLOW_HOME/pyiceberg``).
"""

from __future__ import annotations

import time

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.home import embedded_home
from occflow.engines.pyiceberg import CatalogConfig, PyIcebergTable
from occflow.operators.pyiceberg import PyIcebergWriteOperator

TABLE = "ops.hourly_metrics"
HOURS = ["00", "01", "02", "03"]
ROWS_PER_HOUR = 50
PREPARE_SECONDS = 3.0
#: Expire what is older than 5 days (Iceberg's history.expire.max-snapshot-age-ms default, the
#: floor occflow refuses to go below), keeping the 2 newest snapshots whatever their age.
RETENTION_HOURS = 120
RETAIN_LAST = 2
_ROOT = embedded_home() / "pyiceberg"
CATALOG = {"type": "sql", "uri": f"sqlite:///{_ROOT / 'catalog.db'}", "warehouse": (_ROOT / "warehouse").as_uri()}
CATALOG_NAME = "occflow_examples"


def hour_rows(context, snapshot) -> pa.Table:
    """One hour's metrics, computed after the attempt's snapshot was read."""
    hour = HOURS[int(context["ti"].map_index)]
    time.sleep(float((context["dag_run"].conf or {}).get("prepare_seconds", PREPARE_SECONDS)))
    ids = list(range(ROWS_PER_HOUR))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "hour": [hour] * len(ids),
            "value": pa.array([int(hour) * 1000 + i for i in ids], pa.int64()),
        }
    )


def table() -> PyIcebergTable:
    _ROOT.mkdir(parents=True, exist_ok=True)
    return PyIcebergTable(CatalogConfig(CATALOG_NAME, CATALOG), TABLE)


with DAG(
    "occflow_nightly_maintenance",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=6,
    tags=["occflow", "example", "iceberg", "maintenance"],
    doc_md=__doc__,
) as dag:

    @task
    def create_table() -> None:
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import LongType, NestedField, StringType

        target = table()
        target.catalog.create_namespace_if_not_exists("ops")
        if target.exists():
            target.catalog.drop_table(TABLE)  # each run starts from an empty table
        schema = Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "hour", StringType(), required=False),
            NestedField(3, "value", LongType(), required=False),
        )
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "hour"))
        target.catalog.create_table(TABLE, schema, partition_spec=spec)

    hourly = PyIcebergWriteOperator.partial(
        task_id="hourly_write",
        table=TABLE,
        operation="insert_overwrite",
        catalog=CATALOG,
        catalog_name=CATALOG_NAME,
        data=hour_rows,
    ).expand(partitions=[{"hour": h} for h in HOURS])

    nightly_expire = PyIcebergWriteOperator(
        task_id="nightly_expire_snapshots",
        table=TABLE,
        operation="expire_snapshots",
        catalog=CATALOG,
        catalog_name=CATALOG_NAME,
        older_than_hours=RETENTION_HOURS,
        retain_last=RETAIN_LAST,
    )

    @task
    def verify(reports: list[dict]) -> dict:
        from airflow.sdk import get_current_context

        expired = get_current_context()["ti"].xcom_pull(task_ids="nightly_expire_snapshots")
        if not expired or not expired["committed"]:
            raise ValueError(f"the nightly expire_snapshots of {TABLE} did not commit: {expired}")
        current = table().load()
        rows = current.scan().to_arrow().to_pylist()
        keys = [(r["hour"], r["id"]) for r in rows]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate rows in {TABLE}")
        expected = {(h, i): int(h) * 1000 + i for h in HOURS for i in range(ROWS_PER_HOUR)}
        if {(r["hour"], r["id"]): r["value"] for r in rows} != expected:
            raise ValueError(f"{TABLE} differs from the serial result ({len(rows)} rows, {len(expected)} expected)")
        # Every hour's snapshot is younger than the retention: the expire must have kept them all.
        logged = {entry.snapshot_id for entry in current.metadata.snapshot_log}
        gone = [r["snapshot_id"] for r in reports if r["snapshot_id"] not in logged]
        if gone:
            raise ValueError(f"the expire removed snapshots younger than its retention: {gone}")
        reports = [*reports, expired]
        summary = {
            "table": TABLE,
            "rows": len(rows),
            "expected_rows": len(expected),
            "attempts": sum(r["attempts"] for r in reports),
            "conflicts": [c["kind"] for r in reports for c in r["conflicts"]],
            "actions": [d["action"] for r in reports for d in r["decisions"]],
            "expired_snapshots": len(expired.get("expired_snapshots") or []),
        }
        print(f"occflow example summary: {summary}")
        return summary

    setup = create_table()
    setup >> [hourly, nightly_expire]
    checked = verify(hourly.output)
    nightly_expire >> checked

"""Conflicting MERGE writes spread over two Celery workers and a Spark standalone cluster.

Deployed mode only (``bash scripts/run.sh --deployed``): the writes are spark-submit drivers
sent to the ``spark://`` master of the ``occflow_spark_default`` connection, and the table is in
Iceberg's JDBC catalog on the deployment's PostgreSQL, which drivers and tasks both reach.

``BATCHES`` (default 6) MERGE tasks upsert distinct ids into one of two ``ds`` partitions of one table. Two
MERGEs of the same partition conflict (Iceberg serializable: the later one fails validation), so
admission runs them one after the other while the other partition's MERGE runs beside them; with
admission off (``OCCFLOW_DEPLOYED_ADMISSION=0`` when the DAG is parsed) they race and the losers
retry from a fresh snapshot, wasting executor time. Either way a serial run's result is
``BATCHES * ROWS`` rows with distinct ids, one commit per logical write: ``verify`` checks both.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from occflow.engines.tags import WRITE_ID
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import spark_engine
from occflow.operators.spark_submit import SparkSubmitWriteOperator

TABLE = "db.deployed_spread"
QUALIFIED = f"lake.{TABLE}"
PARTITIONS = ("a", "b")
#: ``OCCFLOW_DEPLOYED_BATCHES`` (``run_deployed.py --batches``): fewer writes for a quicker run.
BATCHES = int(os.environ.get("OCCFLOW_DEPLOYED_BATCHES", "6"))
ROWS = 100
ADMISSION = os.environ.get("OCCFLOW_DEPLOYED_ADMISSION", "1") != "0"


def local_session() -> Any:
    """A small in-task session on the connection's catalog (no executors needed to create or
    read a table); the writes themselves go to the cluster."""
    config = {**OccflowSparkHook().session_config(), "master": "local[1]", "app_name": "occflow-deployed-local"}
    return spark_engine(config).session()


def merge_sql(batch: int) -> str:
    ds = PARTITIONS[batch % len(PARTITIONS)]
    first = batch * ROWS
    return (
        f"MERGE INTO {QUALIFIED} t USING (SELECT id, '{ds}' AS ds, id * 10 AS amount FROM range({first}, "
        f"{first + ROWS})) s ON t.ds = '{ds}' AND t.id = s.id "
        # Columns named, the partition inserted as a literal: the MERGE stays in its own ds
        # (INSERT * / SET * would take ds from the source: the whole table, docs/derivation.md).
        "WHEN MATCHED THEN UPDATE SET t.amount = s.amount "
        f"WHEN NOT MATCHED THEN INSERT (id, ds, amount) VALUES (s.id, '{ds}', s.amount)"
    )


with DAG(
    "occflow_deployed_spread",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=8,
    tags=["occflow", "deployed", "iceberg", "spark-submit"],
    doc_md=__doc__,
) as dag:

    @task
    def create_table() -> None:
        spark = local_session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        spark.sql(f"DROP TABLE IF EXISTS {QUALIFIED} PURGE")
        spark.sql(f"CREATE TABLE {QUALIFIED} (id BIGINT, ds STRING, amount BIGINT) USING iceberg PARTITIONED BY (ds)")

    merges = [
        SparkSubmitWriteOperator(
            task_id=f"merge_{batch}",
            table=TABLE,
            table_format="iceberg",
            operation="merge",
            partitions={"ds": PARTITIONS[batch % len(PARTITIONS)]},
            job=merge_sql(batch),
            admission=ADMISSION,
            admission_poll_interval=1.0,
            retries=2,
            retry_delay=timedelta(seconds=2),
        )
        for batch in range(BATCHES)
    ]

    @task
    def verify(reports: list[dict[str, Any]]) -> dict[str, Any]:
        spark = local_session()
        spark.sql(f"REFRESH TABLE {QUALIFIED}")
        row = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS ids FROM {QUALIFIED}").collect()[0]
        commits: dict[str, int] = {}
        for snap in spark.sql(f"SELECT summary FROM {QUALIFIED}.snapshots").collect():
            write_id = (snap["summary"] or {}).get(WRITE_ID)
            if write_id:
                commits[write_id] = commits.get(write_id, 0) + 1
        summary = {
            "table": TABLE,
            "rows": int(row["n"]),
            "distinct_ids": int(row["ids"]),
            "expected_rows": BATCHES * ROWS,
            "admission": ADMISSION,
            "commits_per_write": commits,
            "attempts": sum(r["attempts"] for r in reports),
            "wasted_seconds": round(sum(r["wasted_seconds"] for r in reports), 1),
            "conflicts": [c["kind"] for r in reports for c in r["conflicts"]],
        }
        if summary["rows"] != summary["expected_rows"] or summary["distinct_ids"] != summary["rows"]:
            raise ValueError(f"{TABLE}: {row['n']} rows, {row['ids']} distinct ids; a serial run gives "
                             f"{summary['expected_rows']} distinct ids")
        if len(commits) != BATCHES or any(n != 1 for n in commits.values()):
            raise ValueError(f"{TABLE}: commits per write id {commits}; each of the {BATCHES} writes commits once")
        print(f"occflow deployed summary: {summary}")
        return summary

    reports = [m.output for m in merges]
    created = create_table()
    for m in merges:
        created >> m
    verify(reports)

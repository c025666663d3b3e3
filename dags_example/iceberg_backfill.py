"""A concurrent backfill: many mapped tasks overwrite one day each of a partitioned Iceberg table.

Every task declares ``insert_overwrite`` on its own ``ds`` partition, so admission lets them all
run at once (their footprints do not overlap). They still race on the table's metadata pointer:
the table is created with ``commit.retry.num-retries = 0`` so that Iceberg does not hide the
race, each lost race surfaces as ``CommitFailedException`` (``commit_failed``), and occflow's
policy retries the write in the task from a fresh snapshot. The final task checks that every
day holds exactly ``rows_per_day`` distinct rows: no day lost, none written twice.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine

TABLE = "db.events_backfill"
DAYS = [f"2024-01-{day:02d}" for day in range(1, 5)]
ROWS_PER_DAY = 200


def load_day(spark, job):
    """Recompute one day and overwrite its partition (idempotent: a retry gives the same rows)."""
    from pyspark.sql import functions as F

    ds = job.params["ds"]
    rows = int(job.params["rows_per_day"])
    frame = spark.range(rows).select(
        F.col("id"), F.lit(ds).alias("ds"), (F.col("id") * 10).alias("amount")
    )
    frame.writeTo(f"lake.{TABLE}").overwritePartitions()


with DAG(
    "occflow_iceberg_backfill",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=4,
    tags=["occflow", "example", "iceberg"],
    doc_md=__doc__,
) as dag:

    @task
    def create_table() -> None:
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        spark.sql(f"DROP TABLE IF EXISTS lake.{TABLE} PURGE")
        spark.sql(
            f"CREATE TABLE lake.{TABLE} (id BIGINT, ds STRING, amount BIGINT) USING iceberg "
            "PARTITIONED BY (ds) TBLPROPERTIES ('commit.retry.num-retries' = '0')"
        )

    backfill = SparkWriteOperator.partial(
        task_id="backfill_day",
        table=TABLE,
        table_format="iceberg",
        operation="insert_overwrite",
        job=load_day,
        job_params={"rows_per_day": str(ROWS_PER_DAY)},
    ).expand(partitions=[{"ds": day} for day in DAYS])

    @task
    def verify(reports: list[dict]) -> dict:
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        per_day = {
            r["ds"]: (r["n"], r["ids"])
            for r in spark.sql(
                f"SELECT ds, count(*) AS n, count(DISTINCT id) AS ids FROM lake.{TABLE} GROUP BY ds"
            ).collect()
        }
        expected = {day: (ROWS_PER_DAY, ROWS_PER_DAY) for day in DAYS}
        if per_day != expected:
            raise ValueError(f"{TABLE} per day (rows, distinct ids) is {per_day}, expected {expected}")
        summary = {
            "table": TABLE,
            "rows": sum(n for n, _ in per_day.values()),
            "expected_rows": ROWS_PER_DAY * len(DAYS),
            "attempts": sum(r["attempts"] for r in reports),
            "conflicts": [c["kind"] for r in reports for c in r["conflicts"]],
            "actions": [d["action"] for r in reports for d in r["decisions"]],
        }
        print(f"occflow example summary: {summary}")
        return summary

    create_table() >> backfill
    verify(backfill.output)

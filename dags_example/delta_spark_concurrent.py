"""Spark jobs writing one Delta table at once (delta-spark): a backfill, an upsert MERGE, an
OPTIMIZE and a schema change, all through ``SparkWriteOperator``.

The table ``shop.daily_sales`` is partitioned by ``ds`` and starts with four days of 40 rows
each, written as several small files. Then, in one DAG run:

- ``backfill_day`` (3 mapped tasks) recomputes days 1-3 and replaces each one
  (``replaceWhere``: ``insert_overwrite`` of its own ``ds``). Their footprints are disjoint, so
  admission lets them run together.
- ``upsert_day`` MERGEs 20 rows into day 4 (10 updated, 10 new); its ON condition names the
  day, so it runs beside the backfill too.
- ``compact`` OPTIMIZEs the whole table. It would make every writer on an overlapping file lose
  (or lose itself), so admission keeps it waiting (deferred, its worker slot free) until the
  backfill and the upsert have released their leases.
- ``add_channel_column`` (``ALTER TABLE ... ADD COLUMNS``) runs without a lease
  (``admission=False``), as a schema change made from outside the pipeline would: a backfill or
  upsert whose snapshot predates it loses with ``metadata_changed`` and the policy retries it in
  the task from a fresh snapshot (the backfill's rows leave the new column empty). A schema
  change that commits between a statement's analysis and its transaction raises
  ``DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS`` instead of ``MetadataChangedException``: the same race,
  classified as ``metadata_changed`` too.

Each backfill query takes a few seconds to compute (``PREPARE_SECONDS``, inside the write, after
Delta has read its snapshot), as a real transformation would: that is the window in which the
schema change commits. Whether a race is lost in a given run depends on timing; the final
check does not: every (day, id) once, the amounts a serial run gives, the new column present.

The Spark session is delta-spark's (``table_format="delta"``: its jars from the manifest or
``$OCCFLOW_DELTA_SPARK_JARS``). Spark's built-in catalog lives in each task's own process, so
every write task first registers the table over its location under ``$OCCFLOW_HOME``
(``register_table``, the tasks' ``pre_execute``).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, task

from occflow.hooks.spark import DEFAULT_CONN_ID, OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine

TABLE = "shop.daily_sales"
#: An ``occflow_spark`` connection with ``table_format: delta`` to run on (the deployed mode,
#: ``scripts/run_deployed.py``, names its Spark cluster's here); unset: the embedded local session.
CONN_ID = os.environ.get("OCCFLOW_EXAMPLE_DELTA_SPARK_CONN_ID") or None
#: The Spark session of every task of this DAG without a connection: delta-spark, local.
SPARK = None if CONN_ID else {"table_format": "delta", "app_name": "occflow-delta-spark-example"}
DAYS = [f"2024-01-{day:02d}" for day in range(1, 5)]
BACKFILL_DAYS = DAYS[:3]
UPSERT_DAY = DAYS[3]
INITIAL_PER_DAY = 40  # ids 0..39, amount = id, written as 4 small files per day
ROWS_PER_DAY = 50  # the backfill's ids 0..49, amount = id * 10
UPSERT_IDS = range(30, 50)  # 10 updated (30..39), 10 inserted (40..49), amount = 1000 + id
PREPARE_SECONDS = 4.0


def table_location() -> str:
    """Where the table's files live: ``$OCCFLOW_HOME/delta-spark/shop.db/daily_sales``."""
    from occflow.hooks.spark import embedded_home

    return str(embedded_home() / "delta-spark" / "shop.db" / "daily_sales")


def session():
    """This process's session: the one the write tasks' operators use (same config, same engine)."""
    config = dict(SPARK) if SPARK is not None else OccflowSparkHook(CONN_ID).session_config()
    return spark_engine(config).session()


def register_table(context=None) -> None:
    """Make ``shop.daily_sales`` known to this process's session (Spark's built-in catalog is
    in-memory): the Delta log at the location holds the schema, partitioning and data."""
    spark = session()
    location = table_location()
    spark.sql(f"CREATE DATABASE IF NOT EXISTS shop LOCATION '{location.rsplit('/', 1)[0]}'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {TABLE} USING delta LOCATION '{location}'")


def load_day(spark, job):
    """Recompute one day and replace its partition (idempotent: a retry gives the same rows)."""
    from pyspark.sql import functions as F

    ds = job.params["ds"]
    pause_ms = int(float(job.params["prepare_seconds"]) * 1000)
    # A transformation that takes a while, inside the write: a JVM-side sleep on the first row
    # (whatever reflect returns for the void method, times 0: the amount stays id * 10).
    pause = F.expr(f"reflect('java.lang.Thread', 'sleep', CAST(IF(id = 0, {pause_ms}, 0) AS BIGINT))")
    amount = F.col("id") * 10 + F.coalesce(F.length(pause) * 0, F.lit(0))
    frame = spark.range(0, ROWS_PER_DAY, 1, 1).select(F.col("id"), F.lit(ds).alias("ds"), amount.alias("amount"))
    # No channel column: Delta leaves a column the frame lacks empty (after the schema change).
    frame.write.format("delta").mode("overwrite").option("replaceWhere", f"ds = '{ds}'").saveAsTable(TABLE)


UPSERT = (
    f"MERGE INTO {TABLE} t "
    f"USING (SELECT id, 1000 + id AS amount FROM range({UPSERT_IDS.start}, {UPSERT_IDS.stop})) s "
    f"ON t.ds = '{UPSERT_DAY}' AND t.id = s.id "  # the day in ON: one partition read and written
    "WHEN MATCHED THEN UPDATE SET t.amount = s.amount "
    f"WHEN NOT MATCHED THEN INSERT (id, ds, amount) VALUES (s.id, '{UPSERT_DAY}', s.amount)"
)


def expected_rows() -> dict[tuple[str, int], int]:
    """(ds, id) -> amount, as a serial run of the DAG leaves the table (in any order)."""
    rows = {(ds, i): i * 10 for ds in BACKFILL_DAYS for i in range(ROWS_PER_DAY)}
    rows.update({(UPSERT_DAY, i): i for i in range(INITIAL_PER_DAY)})
    rows.update({(UPSERT_DAY, i): 1000 + i for i in UPSERT_IDS})
    return rows


with DAG(
    "occflow_delta_spark_concurrent",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_tasks=6,
    tags=["occflow", "example", "delta", "spark"],
    doc_md=__doc__,
) as dag:

    @task
    def create_table() -> None:
        import shutil

        spark = session()
        spark.sql(f"DROP TABLE IF EXISTS {TABLE}")  # only unregisters it: the table is external
        location = table_location()
        shutil.rmtree(location, ignore_errors=True)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS shop LOCATION '{location.rsplit('/', 1)[0]}'")
        spark.sql(
            f"CREATE TABLE {TABLE} (id BIGINT, ds STRING, amount BIGINT) USING delta PARTITIONED BY (ds) "
            f"LOCATION '{location}'"
        )
        for chunk in range(4):  # several small files per day: something for the compaction to do
            ids = f"range({chunk * 10}, {chunk * 10 + 10})"
            days = ", ".join(f"'{d}'" for d in DAYS)
            spark.sql(f"INSERT INTO {TABLE} SELECT r.id, d.ds, r.id FROM {ids} r CROSS JOIN (SELECT explode(array({days})) AS ds) d")

    writes = {
        "table": TABLE,
        "table_format": "delta",
        "spark_config": SPARK,
        "occflow_spark_conn_id": CONN_ID or DEFAULT_CONN_ID,
        "partition_columns": ["ds"],  # read from the table at run time; the hint is for occflow lint
        "pre_execute": register_table,
    }

    backfill = SparkWriteOperator.partial(
        task_id="backfill_day",
        operation="insert_overwrite",
        job=load_day,
        job_params={"prepare_seconds": str(PREPARE_SECONDS)},
        **writes,
    ).expand(partitions=[{"ds": day} for day in BACKFILL_DAYS])

    upsert = SparkWriteOperator(task_id="upsert_day", job=UPSERT, **writes)

    compact = SparkWriteOperator(task_id="compact", job=f"OPTIMIZE {TABLE}", **writes)

    add_column = SparkWriteOperator(
        task_id="add_channel_column",
        job=f"ALTER TABLE {TABLE} ADD COLUMNS (channel STRING)",
        admission=False,  # a schema change from outside the pipeline: the writers in flight lose
        **writes,
    )

    @task(trigger_rule="all_done")
    def verify(reports: list[dict]) -> dict:
        from airflow.sdk import get_current_context

        ti = get_current_context()["ti"]
        # The compaction pushes no report when its policy skipped it (it lost: nothing to redo).
        others = {name: ti.xcom_pull(task_ids=name) for name in ("upsert_day", "compact", "add_channel_column")}
        if not others["upsert_day"] or not others["add_channel_column"]:
            raise ValueError(f"a write of {TABLE} did not commit: {others}")
        reports = [*reports, *(r for r in others.values() if r)]

        register_table()
        spark = session()
        frame = spark.table(TABLE)
        rows = [r.asDict() for r in frame.collect()]
        keys = [(r["ds"], r["id"]) for r in rows]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate rows in {TABLE}")
        expected = expected_rows()
        actual = {(r["ds"], r["id"]): r["amount"] for r in rows}
        if actual != expected:
            missing = sorted(set(expected) - set(actual))[:5]
            extra = sorted(set(actual) - set(expected))[:5]
            wrong = sorted(k for k in expected if k in actual and actual[k] != expected[k])[:5]
            raise ValueError(f"{TABLE} differs from the serial result: missing {missing}, extra {extra}, wrong {wrong}")
        if "channel" not in frame.columns or any(r["channel"] is not None for r in rows):
            raise ValueError(f"{TABLE} lost the channel column (or filled it): {frame.columns}")
        history = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {TABLE}").collect()]
        summary = {
            "table": TABLE,
            "rows": len(rows),
            "expected_rows": len(expected),
            "attempts": sum(r["attempts"] for r in reports),
            "conflicts": [c["kind"] for r in reports for c in r["conflicts"]],
            "actions": [d["action"] for r in reports for d in r["decisions"]],
            "compaction": "committed" if others["compact"] else "skipped (lost to a writer)",
            "history": history[::-1],
        }
        print(f"occflow example summary: {summary}")
        return summary

    setup = create_table()
    setup >> [backfill, upsert, compact, add_column]
    checked = verify(backfill.output)
    [upsert, compact, add_column] >> checked

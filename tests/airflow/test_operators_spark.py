"""SparkWriteOperator on real Spark + Iceberg (JDBC catalog on SQLite), run by ``dag.test()``.

The races are real and deterministic: the job's own Spark stage passes a gate (a Python UDF)
that holds it after Spark planned the write on its snapshot; a second writer in another session
of the same Spark application appends to the same partition; then the gate opens and the job
commits. Iceberg's serializable check rejects the UPDATE and the MERGE (new files match their
filter: ``ValidationException``), occflow classifies the error as ``validation_conflict``, the
policy retries the job from a fresh snapshot, and the table ends as the serial run would.
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

# One embedded home for every Spark test in this process: a Spark application keeps the
# catalog it started with.
os.environ.setdefault("OCCFLOW_HOME", tempfile.mkdtemp(prefix="occflow-home-"))

RACE_DAG = '''
import pathlib, threading, time
import pendulum
from airflow.sdk import DAG, task
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine
from occflow.sensors.commit import TableCommitSensor

GATE = pathlib.Path({gate!r})
T = "lake.db.race_events"


def gated(spark, name, competitor_sql):
    """A UDF that, on the first attempt only, holds the job until a second writer has committed."""
    from pyspark.sql.types import LongType

    first = not (GATE / f"{{name}}.raced").exists()
    reached, done = str(GATE / f"{{name}}.reached"), str(GATE / f"{{name}}.done")
    if first:
        (GATE / f"{{name}}.raced").touch()

        def competitor():
            while not pathlib.Path(reached).exists():
                time.sleep(0.05)
            spark.newSession().sql(competitor_sql)
            pathlib.Path(done).touch()

        threading.Thread(target=competitor, daemon=True).start()

    def hold(value):
        if first:
            pathlib.Path(reached).touch()
            while not pathlib.Path(done).exists():
                time.sleep(0.05)
        return value

    spark.udf.register(f"gate_{{name}}", hold, LongType())


def update_day(spark, job):
    ds = job.params["ds"]
    gated(spark, "update", f"INSERT INTO {{T}} VALUES (999, '{{ds}}', 0)")
    spark.sql(f"UPDATE {{T}} SET amount = amount + 1 WHERE ds = '{{ds}}' AND gate_update(id) = id")


def upsert_day(spark, job):
    gated(spark, "merge", f"INSERT INTO {{T}} VALUES (5000, '{{job.params['ds']}}', 1)")
    spark.sql(
        f"MERGE INTO {{T}} t USING (SELECT gate_merge(id) AS id, '{{job.params['ds']}}' AS ds, 7 AS amount "
        "FROM range(5000, 5002, 1, 1)) s "
        f"ON t.id = s.id AND t.ds = s.ds AND t.ds = '{{job.params['ds']}}' "
        "WHEN MATCHED THEN UPDATE SET amount = s.amount WHEN NOT MATCHED THEN INSERT *"
    )


with DAG("iceberg_race", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):

    @task
    def create_table():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        spark.sql(f"DROP TABLE IF EXISTS {{T}} PURGE")
        spark.sql(
            f"CREATE TABLE {{T}} (id BIGINT, ds STRING, amount BIGINT) USING iceberg PARTITIONED BY (ds) "
            "TBLPROPERTIES ('commit.retry.num-retries' = '0', 'write.merge.isolation-level' = 'serializable')"
        )
        spark.sql(f"INSERT INTO {{T}} VALUES (1, '2024-01-02', 1)")
        spark.sql(f"INSERT INTO {{T}} SELECT id, '2024-01-01', id * 10 FROM range(0, 100, 1, 1)")

    update = SparkWriteOperator(
        task_id="update_day", table="db.race_events", table_format="iceberg",
        operation="update", partitions={{"ds": "2024-01-01"}}, job=update_day,
    )
    upsert = SparkWriteOperator(
        task_id="upsert_day", table="db.race_events", table_format="iceberg",
        operation="merge", partitions={{"ds": "2024-01-02"}}, job=upsert_day,
    )

    @task
    def table_content():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        rows = spark.sql(f"SELECT id, ds, amount FROM {{T}}").collect()
        snapshots = spark.sql(f"SELECT snapshot_id, operation FROM {{T}}.snapshots ORDER BY committed_at").collect()
        return {{
            "rows": sorted([r["id"], r["ds"], r["amount"]] for r in rows),
            "operations": [r["operation"] for r in snapshots],
            "snapshot_ids": [r["snapshot_id"] for r in snapshots],
        }}

    # Reads the Iceberg metadata files (no JVM) for the snapshot the MERGE task committed.
    merged = TableCommitSensor(
        task_id="wait_for_merge", table_format="iceberg", table="db.race_events",
        upstream_task_id="upsert_day", poll_interval=0.5,
    )

    create_table() >> update >> upsert >> merged >> table_content()
'''


def test_iceberg_writers_that_lose_a_real_race_are_retried_to_the_serial_result(run_dag, tmp_path):
    run = run_dag(RACE_DAG.format(gate=str(tmp_path)))
    assert run.state == "success", {k: v.state for k, v in run.tasks.items()}

    update = run.task("update_day").xcom["return_value"]
    assert update["attempts"] == 2
    assert [c["kind"] for c in update["conflicts"]] == ["validation_conflict"]
    assert [d["action"] for d in update["decisions"]] == ["retry"]
    assert update["wasted_seconds"] > 0 and update["snapshot_id"]

    upsert = run.task("upsert_day").xcom["return_value"]
    assert upsert["attempts"] == 2
    assert [c["kind"] for c in upsert["conflicts"]] == ["validation_conflict"]
    assert [d["action"] for d in upsert["decisions"]] == ["retry"]

    found = run.task("wait_for_merge").xcom["return_value"]
    assert found["snapshot_id"] == upsert["snapshot_id"]
    assert found["operation"] == "overwrite"  # a copy-on-write MERGE commits an overwrite snapshot

    content = run.task("table_content").xcom["return_value"]
    # Serial result: the competitor's row 999 is updated with the rest of 2024-01-01; the
    # competitor's 5000 is then updated by the MERGE and 5001 inserted, once each.
    expected = sorted(
        [[i, "2024-01-01", i * 10 + 1] for i in range(100)]
        + [[999, "2024-01-01", 1]]
        + [[1, "2024-01-02", 1], [5000, "2024-01-02", 7], [5001, "2024-01-02", 7]]
    )
    assert content["rows"] == expected
    # Both competitors really committed (two appends besides the two seed inserts).
    assert content["operations"].count("append") == 4
    # Each lost attempt names its winner: the competitor's append, a snapshot of the table that
    # came right after the seed (the 3rd and 4th appends as the table's own history lists them).
    by_id = dict(zip(content["snapshot_ids"], content["operations"], strict=True))
    for report in (update, upsert):
        winner = report["conflicts"][0]["winning_commit"]
        assert winner["snapshot_id"] in by_id and by_id[winner["snapshot_id"]] == "append", winner
        assert winner["snapshot_id"] != report["snapshot_id"]
    assert update["conflicts"][0]["winning_commit"]["snapshot_id"] != upsert["conflicts"][0]["winning_commit"]["snapshot_id"]


INJECTION_DAG = '''
import pendulum
from airflow.sdk import DAG, task
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine

PARAMS = {"good": "2024-01-01", "bad": "x'; DROP TABLE lake.db.other; --"}

with DAG("sql_injection", schedule=None, start_date=pendulum.datetime(2024, 1, 1), params=PARAMS):

    @task
    def create_tables():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        for name in ("target", "other"):
            spark.sql(f"DROP TABLE IF EXISTS lake.db.{name} PURGE")
            spark.sql(f"CREATE TABLE lake.db.{name} (id BIGINT, ds STRING) USING iceberg")
            spark.sql(f"INSERT INTO lake.db.{name} VALUES (1, '2024-01-01'), (2, '2024-01-02')")

    injected = SparkWriteOperator(
        task_id="injected", table="db.target", table_format="iceberg", operation="delete", retries=2,
        job="DELETE FROM lake.db.target WHERE ds = '{{ params.bad }}'",
    )
    honest = SparkWriteOperator(
        task_id="honest", table="db.target", table_format="iceberg", operation="delete",
        job="DELETE FROM lake.db.target WHERE ds = '{{ params.good }}'",
    )

    @task(trigger_rule="all_done")
    def tables():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        names = [r["tableName"] for r in spark.sql("SHOW TABLES IN lake.db").collect()]
        return {
            "tables": sorted(names),
            "target": sorted(r["id"] for r in spark.sql("SELECT id FROM lake.db.target").collect()),
            "other": sorted(r["id"] for r in spark.sql("SELECT id FROM lake.db.other").collect()),
        }

    created, found = create_tables(), tables()
    created >> [injected, honest] >> found
'''


def test_a_rendered_value_that_adds_a_statement_is_refused_and_the_other_table_survives(run_dag):
    run = run_dag(INJECTION_DAG)
    injected = run.task("injected")
    assert injected.state == "failed" and len(injected.tries) == 1  # refused for good, not retried
    assert run.task("honest").state == "success"  # the same template with an honest value runs
    found = run.task("tables").xcom["return_value"]
    assert "other" in found["tables"] and found["other"] == [1, 2]
    assert found["target"] == [2]  # only the honest delete ran

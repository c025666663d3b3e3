"""Declarations derived from the SQL and the table (issue 12): a SQL job needs no hand-written
operation / partitions, a disagreeing declaration fails the DAG import (or the task, before it
writes, when its values are templates), and a declared profile the table's facts contradict is
refused with the reason (Spark + Iceberg and delta-rs, real tables)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.core.errors import InvalidDeclarationError

pytestmark = pytest.mark.airflow

# One embedded home for every Spark test in this process (as test_operators_spark.py).
os.environ.setdefault("OCCFLOW_HOME", tempfile.mkdtemp(prefix="occflow-home-"))


def spark_write(job, **kwargs):
    from occflow.operators.spark import SparkWriteOperator

    return SparkWriteOperator(job=job, **{"task_id": "t", "table": "db.events", "table_format": "iceberg", **kwargs})


# ------------------------------------------------------------------------ DAG parse time (no Spark)


def test_a_sql_job_without_an_operation_gets_the_one_its_sql_performs() -> None:
    assert spark_write("DELETE FROM lake.db.events WHERE ds = 'a'").occflow_write.operation.value == "delete"
    # Spec 004, note (1): an INSERT reading its own target is a merge.
    op = spark_write("INSERT INTO lake.db.events SELECT * FROM lake.db.events WHERE ds = 'a'")
    assert op.operation == "merge"
    # A template inside a string literal reads as that literal.
    assert spark_write("UPDATE lake.db.events SET v = 1 WHERE ds = '{{ ds }}'").operation == "update"
    with pytest.raises(InvalidDeclarationError, match="operation is required unless the job is SQL"):
        spark_write(lambda spark, job: None)
    with pytest.raises(InvalidDeclarationError, match="cannot be derived from the SQL job .it holds a template"):
        spark_write("DELETE FROM {{ params.table }} WHERE ds = 'a'")


@pytest.mark.parametrize(
    ("job", "declared", "difference"),
    [
        ("UPDATE lake.db.events SET v = 1 WHERE ds = 'a'", {"operation": "delete"},
         "is a update but the task declares delete"),
        ("INSERT INTO lake.db.events SELECT * FROM lake.db.events", {"operation": "insert_into"},
         "is a merge but the task declares insert_into"),
        # With the session's config known when the DAG is parsed, partition values are compared too.
        ("DELETE FROM lake.db.events WHERE ds = 'b'",
         {"operation": "delete", "partitions": {"ds": "a"}, "spark_config": {"table_format": "iceberg"}},
         "may touch ds=b"),
        ("DELETE FROM lake.db.events WHERE id = 1", {"operation": "delete", "partitions": {"ds": "a"}},
         "may write any partition|reads the whole table"),
        # Templated: the operation is still compared when the DAG is parsed.
        ("UPDATE lake.db.events SET v = 1 WHERE ds = '{{ ds }}'", {"operation": "delete"},
         "is a update but the task declares delete"),
    ],
)
def test_a_declaration_that_disagrees_with_its_sql_fails_the_dag_import(job, declared, difference) -> None:
    with pytest.raises(InvalidDeclarationError, match=difference):
        spark_write(job, **declared)


def test_a_partition_hint_derives_a_sql_jobs_partitions_at_parse_time() -> None:
    """Issue 26: ``partition_columns`` (or ``create_if_missing``'s ``partition_by``) lets the
    DAG parse know a SQL-only write's partitions; without it they are the whole table."""
    sql = "MERGE INTO lake.db.events t USING s ON t.id = s.id AND t.ds = 'a' WHEN MATCHED THEN DELETE"
    assert spark_write(sql).occflow_write.partitions is None
    assert spark_write(sql, partition_columns=["ds"]).occflow_write.partition_keys() == frozenset({"ds=a"})
    created = spark_write(sql, create_if_missing=True, schema={"id": "bigint", "ds": "string"}, partition_by=["ds"])
    assert created.occflow_write.partition_keys() == frozenset({"ds=a"})
    # A hint never narrows what the SQL may touch: a MERGE that reads any day stays whole-table.
    wide = "MERGE INTO lake.db.events t USING s ON t.id = s.id WHEN MATCHED THEN DELETE"
    assert spark_write(wide, partition_columns=["ds"]).occflow_write.partitions is None
    with pytest.raises(InvalidDeclarationError, match="partition_columns must be a list of column names"):
        spark_write(sql, partition_columns="ds")


# ------------------------------------------------------------------------------- delta-rs, real table


def _delta_table(path: Path, **configuration: str) -> str:
    rows = pa.table({"id": [1, 2, 3], "ds": ["a", "a", "b"], "v": [0, 0, 0]})
    write_deltalake(str(path), rows, partition_by=["ds"], configuration=configuration or None)
    return str(path)


def test_a_databricks_profile_for_a_delta_rs_write_is_refused_before_writing(tmp_path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from occflow.core.declaration import EngineProfileWarning
    from occflow.operators.delta import DeltaWriteOperator

    path = _delta_table(tmp_path / "events", **{"delta.isolationLevel": "Serializable"})
    common = {"table": "db.events", "path": path, "operation": "delete", "partitions": {"ds": "a"}}
    with pytest.warns(EngineProfileWarning):  # the DAG still imports, with a warning
        op = DeltaWriteOperator(task_id="t", profile="delta-serializable", **common)
    with pytest.raises(AirflowFailException, match="committed by delta-rs.*its matrix is 'delta-rs'.*nothing was written"):
        op.declare()
    assert DeltaTable(path).version() == 0  # nothing was written
    # The DAG's explicit opt-in runs it (admission still keeps apart what delta-rs's matrix says).
    with pytest.warns(EngineProfileWarning):
        opted = DeltaWriteOperator(task_id="t", profile="delta-serializable", allow_unsafe_concurrency=True, **common)
    assert opted.declare().engine_profile == "delta-rs"
    # The default profile is what the table's facts say.
    assert DeltaWriteOperator(task_id="t", **common).declare().profile.name == "delta-rs"


# ----------------------------------------------------------------------------- Spark + Iceberg, real

DERIVED_DAG = '''
import pendulum
from airflow.sdk import DAG, task
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine

T = "lake.db.derived_events"

with DAG("derived_sql", schedule=None, start_date=pendulum.datetime(2024, 1, 1),
         params={"ds": "2024-01-01", "other": "2024-01-02"}):

    @task
    def create_table():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        spark.sql(f"DROP TABLE IF EXISTS {T} PURGE")
        spark.sql(f"CREATE TABLE {T} (id BIGINT, ds STRING, v BIGINT) USING iceberg PARTITIONED BY (ds) "
                  "TBLPROPERTIES ('write.merge.isolation-level' = 'snapshot')")
        spark.sql(f"INSERT INTO {T} VALUES (1, '2024-01-01', 0), (2, '2024-01-01', 0), (3, '2024-01-02', 0)")

    delete_day = SparkWriteOperator(
        task_id="delete_day", table="db.derived_events", table_format="iceberg",
        job="DELETE FROM lake.db.derived_events WHERE ds = '{{ params.ds }}' AND id = 1",
    )
    merge_day = SparkWriteOperator(
        task_id="merge_day", table="db.derived_events", table_format="iceberg",
        job="MERGE INTO lake.db.derived_events t USING (SELECT 2 AS id) s "
            "ON t.id = s.id AND t.ds = '{{ params.ds }}' WHEN MATCHED THEN UPDATE SET v = 7",
    )
    wrong_profile = SparkWriteOperator(
        task_id="wrong_profile", table="db.derived_events", profile="iceberg-serializable",
        job="MERGE INTO lake.db.derived_events t USING (SELECT 3 AS id) s "
            "ON t.id = s.id AND t.ds = '{{ params.other }}' WHEN MATCHED THEN DELETE",
    )
    wrong_partition = SparkWriteOperator(
        task_id="wrong_partition", table="db.derived_events", table_format="iceberg",
        partitions={"ds": "{{ params.ds }}"},
        job="DELETE FROM lake.db.derived_events WHERE ds = '{{ params.other }}'",
    )
    wrong_hint = SparkWriteOperator(
        task_id="wrong_hint", table="db.derived_events", table_format="iceberg",
        partition_columns=["region"], job="DELETE FROM lake.db.derived_events WHERE ds = '2024-01-02'",
    )

    @task(trigger_rule="all_done")
    def table_content():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        return sorted([r["id"], r["ds"], r["v"]] for r in spark.sql(f"SELECT * FROM {T}").collect())

    create_table() >> delete_day >> merge_day >> [wrong_profile, wrong_partition, wrong_hint] >> table_content()
'''


@pytest.mark.spark
@pytest.mark.slow  # a Spark session and a six-task dag.test(): about a minute
def test_a_sql_job_runs_on_the_declaration_its_sql_and_table_give(run_dag) -> None:
    run = run_dag(DERIVED_DAG)
    delete = run.task("delete_day").xcom["return_value"]
    assert (delete["operation"], delete["partitions"], delete["profile"]) == (
        "delete", [{"ds": "2024-01-01"}], "iceberg-serializable")
    merge = run.task("merge_day").xcom["return_value"]
    # The table says write.merge.isolation-level = snapshot: the MERGE follows that matrix.
    assert (merge["operation"], merge["partitions"], merge["profile"]) == ("merge", [{"ds": "2024-01-01"}], "iceberg-snapshot")
    # A declared profile the table contradicts, and declared partitions the rendered SQL leaves:
    # each task fails once, before it writes.
    for refused in ("wrong_profile", "wrong_partition", "wrong_hint"):
        assert run.task(refused).state == "failed" and len(run.task(refused).tries) == 1
    assert run.task("table_content").xcom["return_value"] == [[2, "2024-01-01", 7], [3, "2024-01-02", 0]]

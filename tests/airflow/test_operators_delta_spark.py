"""SparkWriteOperator on real delta-spark, run by ``dag.test()`` with the Spark session in the
task's own process (issue 34): a real race is classified and its derived policy applied.

- An UPDATE that loses to a concurrent UPDATE of its partition gets Delta's
  ``ConcurrentAppendException`` (``DELTA_CONCURRENT_APPEND``): ``concurrent_append``, retried in
  the task from a fresh snapshot, and the table ends as the serial run would.
- A write whose Delta transaction id (occflow's ``txnAppId`` for the write) another writer
  misuses gets ``ConcurrentTransactionException``: ``concurrent_transaction``, which is not
  retry-safe, so the task fails fast and leaves its Airflow retries unused.

The race is deterministic, as in ``test_operators_spark.py``: the job's Spark stage passes a
gate (a Python UDF) after Delta started its transaction; the competitor commits from another
session of the same application; then the gate opens.

DAGs run in a ``spawn`` worker process that holds the Delta session (one JVM holds one set of
jars and extensions; this test process's JVM is the Iceberg one), with this run's Airflow home.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the worker imports delta_spark_dags from here
import delta_spark_dags  # noqa: E402

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
]

GATED = '''
import pathlib, threading, time
import pendulum
from airflow.sdk import DAG, task
from occflow.operators.spark import SparkWriteOperator, spark_engine

CONFIG = {config!r}
GATE = pathlib.Path({gate!r})
T = "default.{table}"


def gated(spark, competitor):
    """On the first attempt only: hold the job in its UDF until ``competitor`` has committed."""
    from pyspark.sql.types import LongType

    first = not (GATE / "raced").exists()
    reached, done = str(GATE / "reached"), str(GATE / "done")
    if first:
        (GATE / "raced").touch()

        def run():
            while not pathlib.Path(reached).exists():
                time.sleep(0.02)
            try:
                competitor(spark, spark.newSession())
            finally:
                pathlib.Path(done).touch()

        threading.Thread(target=run, daemon=True).start()

    def hold(value):
        if first:
            pathlib.Path(reached).touch()
            deadline = time.monotonic() + 60
            while not pathlib.Path(done).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return value

    spark.udf.register("gate", hold, LongType())


@task
def create_table():
    spark = spark_engine(CONFIG).session()
    spark.sql(f"CREATE TABLE {{T}} (id BIGINT, ds STRING, amount BIGINT) USING delta PARTITIONED BY (ds)")
    spark.sql(f"INSERT INTO {{T}} VALUES (1, '2024-01-01', 1), (2, '2024-01-01', 2), (3, '2024-01-02', 3)")


@task(trigger_rule="all_done")
def table_content():
    spark = spark_engine(CONFIG).session()
    history = spark.sql(f"DESCRIBE HISTORY {{T}}").collect()
    return {{
        "rows": sorted([r["id"], r["ds"], r["amount"]] for r in spark.sql(f"SELECT * FROM {{T}}").collect()),
        "history": sorted([r["version"], r["operation"], r["userMetadata"]] for r in history),
    }}
'''

RETRY_DAG = GATED + '''

def competing_update(spark, other):
    other.sql(f"UPDATE {{T}} SET amount = amount * 10 WHERE ds = '2024-01-01'")


def update_day(spark, job):
    gated(spark, competing_update)
    spark.sql(f"UPDATE {{T}} SET amount = gate(amount) + 100 WHERE ds = '{{job.params['ds']}}'")


with DAG("delta_spark_retry", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    update = SparkWriteOperator(
        task_id="update_day", table="default.{table}", table_format="delta",
        spark_config=CONFIG, operation="update", partitions={{"ds": "2024-01-01"}}, job=update_day,
    )
    create_table() >> update >> table_content()
'''

FAIL_DAG = GATED + '''

def same_transaction_id(spark, other):
    # Another job writes with this write's Delta transaction id (the one occflow set for it).
    for key in ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"):
        other.conf.set(key, spark.conf.get(key))
    other.sql(f"INSERT INTO {{T}} VALUES (50, '2024-01-02', 5)")


def append_day(spark, job):
    gated(spark, same_transaction_id)
    spark.sql(f"INSERT INTO {{T}} SELECT gate(id) + 60, ds, amount FROM {{T}} WHERE ds = '{{job.params['ds']}}'")


with DAG("delta_spark_fail_fast", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    append = SparkWriteOperator(
        task_id="append_day", table="default.{table}", table_format="delta", spark_config=CONFIG,
        operation="insert_into", partitions={{"ds": "2024-01-02"}}, job=append_day, retries=3,
    )
    create_table() >> append >> table_content()
'''


FEATURE_DAG = GATED + '''

@task
def require_a_future_feature():
    # The table's protocol, committed by hand into its own log: a writer feature no delta-spark has.
    import delta_spark_submit_jobs as jobs

    spark = spark_engine(CONFIG).session()
    location = spark.sql(f"DESCRIBE DETAIL {{T}}").collect()[0]["location"]
    jobs.require_future_writer_feature(location.removeprefix("file:"))


def append_day(spark, job):
    spark.sql(f"INSERT INTO {{T}} VALUES (70, '{{job.params['ds']}}', 7)")


with DAG("delta_spark_future_feature", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    append = SparkWriteOperator(
        task_id="append_day", table="default.{table}", table_format="delta", spark_config=CONFIG,
        operation="insert_into", partitions={{"ds": "2024-01-02"}}, job=append_day, retries=3,
    )
    create_table() >> require_a_future_feature() >> append >> table_content()
'''


VACUUM_DAG = GATED + '''

@task
def rewrite_and_set_floor():
    # An UPDATE leaves the files it rewrote behind (removed in the log, still on disk), and the
    # table's own floor is 30 days: above the 7 days occflow knows without reading the table.
    spark = spark_engine(CONFIG).session()
    spark.sql(f"UPDATE {{T}} SET amount = amount + 1 WHERE ds = '2024-01-01'")
    spark.sql(f"ALTER TABLE {{T}} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 30 days')")


@task(trigger_rule="all_done")
def files():
    spark = spark_engine(CONFIG).session()
    location = spark.sql(f"DESCRIBE DETAIL {{T}}").collect()[0]["location"].removeprefix("file:")
    on_disk = sorted(str(p) for p in pathlib.Path(location).rglob("*.parquet"))
    live = sorted(f.removeprefix("file:") for f in spark.table(T).inputFiles())
    return {{"on_disk": on_disk, "live": live}}


with DAG("delta_spark_vacuum", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    # 200 hours passes the parse-time check (7 days) but not the table's 30 days: refused at run time.
    short = SparkWriteOperator(
        task_id="vacuum_below_table_floor", table=T, table_format="delta", spark_config=CONFIG,
        job=f"VACUUM {{T}} RETAIN 200 HOURS", retries=2,
    )
    unsafe = SparkWriteOperator(
        task_id="vacuum_unsafe", table=T, table_format="delta", spark_config=CONFIG,
        job=f"VACUUM {{T}} RETAIN 0 HOURS", allow_unsafe_retention=True, trigger_rule="all_done",
    )
    before, between, after = (files.override(task_id=t)() for t in ("before", "between", "after"))
    create_table() >> rewrite_and_set_floor() >> before >> short >> between >> unsafe >> after >> table_content()
'''


@pytest.fixture(scope="module")
def delta_dags(airflow_home: Path, dag_folder: Path) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        pool.submit(delta_spark_dags.start).result(timeout=300)
        config = pool.submit(delta_spark_dags.delta_config).result(timeout=60)

        def run(template: str, tmp_path: Path, table: str) -> dict[str, Any]:
            source = template.format(config=config, gate=str(tmp_path), table=table)
            return pool.submit(delta_spark_dags.run_dag, source, str(dag_folder)).result(timeout=600)

        yield run
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def test_an_update_that_loses_a_real_delta_race_is_retried_to_the_serial_result(delta_dags, tmp_path) -> None:
    run = delta_dags(RETRY_DAG, tmp_path, "retried_events")
    assert run["state"] == "success", run
    report = run["tasks"]["update_day"]["xcom"]["return_value"]
    assert report["attempts"] == 2
    conflict = report["conflicts"][0]
    assert conflict["kind"] == "concurrent_append"
    assert "io.delta.exceptions.ConcurrentAppendException" in str(conflict["error"]), conflict
    assert "DELTA_CONCURRENT_APPEND" in str(conflict["error"])
    assert [d["action"] for d in report["decisions"]] == ["retry"]
    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    # Serial: the competitor's amount * 10, then the job's + 100, on 2024-01-01 only.
    assert content["rows"] == [[1, "2024-01-01", 110], [2, "2024-01-01", 120], [3, "2024-01-02", 3]]
    versions = {v: (op, meta) for v, op, meta in content["history"]}
    # The winner by version: the competitor's UPDATE (version 2), untagged; the job's retry is
    # version 3 and carries occflow's tag in its commitInfo.userMetadata.
    winner = conflict["winning_commit"]
    assert winner["version"] == 2 and versions[2] == ("UPDATE", None) and not winner["tagged"]
    assert report["version"] == 3 and versions[3][0] == "UPDATE"
    assert '"update_day"' in (versions[3][1] or "")


def test_a_misused_delta_transaction_id_fails_fast_without_airflow_retries(delta_dags, tmp_path) -> None:
    run = delta_dags(FAIL_DAG, tmp_path, "failed_events")
    task = run["tasks"]["append_day"]
    assert task["state"] == "failed" and task["tries"] == 1, run  # the 3 retries were not used
    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    assert [50, "2024-01-02", 5] in content["rows"]
    assert not any(r[0] >= 60 for r in content["rows"])  # the job's rows never landed
    report = task["xcom"].get("occflow_report")
    assert report is not None, task["xcom"]
    conflict = report["conflicts"][0]
    assert conflict["kind"] == "concurrent_transaction"
    assert "io.delta.exceptions.ConcurrentTransactionException" in str(conflict["error"]), conflict
    assert [d["action"] for d in report["decisions"]] == ["fail"]


def test_an_in_process_write_to_a_table_needing_a_feature_the_jar_lacks_fails_fast_naming_it(
    delta_dags, tmp_path
) -> None:
    """Bad input, in-process (``SparkWriteOperator``): delta-spark refuses the write
    (``DELTA_UNSUPPORTED_FEATURES_FOR_WRITE``); the task fails on its first try with its 3
    retries unused, names the feature, and nothing is added to the table's log."""
    import delta_spark_submit_jobs

    run = delta_dags(FEATURE_DAG, tmp_path, "future_events")
    task = run["tasks"]["append_day"]
    assert task["state"] == "failed" and task["tries"] == 1, run
    report = task["xcom"].get("occflow_report")
    assert report is not None, task["xcom"]
    assert report["attempts"] == 1 and not report["conflicts"], report
    assert delta_spark_submit_jobs.FUTURE_FEATURE in report["error"] and "a retry cannot change that" in report["error"]
    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    assert [(v, op) for v, op, _ in content["history"]] == [(0, "CREATE TABLE"), (1, "WRITE"), (2, "UPGRADE PROTOCOL")]
    assert not any(r[0] == 70 for r in content["rows"])


def test_a_vacuum_below_the_tables_floor_is_refused_and_an_allowed_one_deletes_only_unreferenced_files(
    delta_dags, tmp_path
) -> None:
    """delta-spark VACUUM through ``SparkWriteOperator`` (issue 36): the table's own retention
    (30 days) refuses a 200-hour VACUUM before anything runs (first try, retries unused, not a
    file gone); ``allow_unsafe_retention=True`` runs ``RETAIN 0 HOURS`` with Delta's own check
    off for that statement, and it deletes exactly the files no live version references. The
    oracle is the table's directory on disk and Spark's own list of the files it reads."""
    run = delta_dags(VACUUM_DAG, tmp_path, "vacuumed_events")
    tasks = run["tasks"]
    short = tasks["vacuum_below_table_floor"]
    assert short["state"] == "failed" and short["tries"] == 1, run
    before = tasks["before"]["xcom"]["return_value"]
    between = tasks["between"]["xcom"]["return_value"]
    after = tasks["after"]["xcom"]["return_value"]
    assert len(before["on_disk"]) > len(before["live"])  # the UPDATE's rewritten files are still there
    assert between == before  # the refused VACUUM deleted nothing
    assert tasks["vacuum_unsafe"]["state"] == "success", run
    assert after["live"] == before["live"] and after["on_disk"] == after["live"]
    content = tasks["table_content"]["xcom"]["return_value"]
    assert content["rows"] == [[1, "2024-01-01", 2], [2, "2024-01-01", 3], [3, "2024-01-02", 3]]
    assert [op for _, op, _ in content["history"]].count("VACUUM END") == 1

"""The spark-submit channel: a driver in another process runs the job and leaves its outcome as
JSON; the caller reads it, reconnects to it, and classifies its conflicts exactly as in-process.

The drivers share the session fixture's SQLite catalog and warehouse, so what a driver commits
is checked from this process's own session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from occflow.core.kinds import ConflictKind
from occflow.engines.spark import ApplicationJob, CallableJob, JobContext, SparkConfig, SparkEngine
from occflow.engines.spark.iceberg import current_snapshot, pinned_session
from occflow.engines.spark.submit import SubmitError, SubmittedJob, read_outcome, submit_job
from occflow.engines.tags import CommitTag

pytestmark = pytest.mark.spark

DRIVER_TIMEOUT = 600  # a driver starts a JVM; on a loaded 2-core machine that takes a while


def update_then_stale_delete(spark: Any, context: JobContext) -> None:
    """A real Iceberg conflict inside one job: a DELETE planned on snapshot S0 commits after an
    UPDATE of the same partition committed S1.

    The ``pinned`` session caches the table (so its DELETE plans on S0), the ``fresh`` one does
    not (so its UPDATE commits S1 first).
    """
    pinned = pinned_session(spark, "lake")
    fresh = spark.newSession()
    pinned.sql(f"SELECT count(*) FROM {context.table}").collect()
    fresh.sql(f"UPDATE {context.table} SET v = v + 1 WHERE ds = 'a'")
    pinned.sql(f"DELETE FROM {context.table} WHERE ds = 'a' AND v % 2 = 0")


def _new_table(engine: SparkEngine, name: str) -> str:
    spark = engine.session()
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, ds STRING, v INT) USING iceberg PARTITIONED BY (ds) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'a', 3), (4, 'b', 4)")
    return name


def _config(spark_home: Path) -> SparkConfig:
    return SparkConfig(home=str(spark_home), app_name="occflow-submit-test", conf={"spark.driver.memory": "768m"})


def test_sql_job_in_a_spark_submit_driver_commits_and_the_caller_reads_its_snapshot(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    path = tmp_path / "outcome.json"
    job = submit_job(
        f"INSERT INTO {iceberg_table} VALUES (50, 'c', 1), (51, 'c', 2)", iceberg_table, path, config=_config(spark_home)
    )
    assert job.operation == "insert_into"
    outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert outcome.committed, (outcome.error, job.log_tail())
    now = current_snapshot(iceberg_engine.session(), iceberg_table)
    assert now is not None
    assert outcome.snapshot_id == now.snapshot_id
    assert outcome.version == now.sequence_number
    assert outcome.rows == 2
    data = json.loads(path.read_text())
    assert data["driver"]["pid"] != os.getpid()  # another process wrote it
    assert iceberg_engine.session().sql(f"SELECT count(*) FROM {iceberg_table} WHERE ds = 'c'").collect()[0][0] == 2


def test_conflict_in_a_spark_submit_driver_is_classified_the_same_as_in_process(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    in_process = iceberg_engine.run(update_then_stale_delete, iceberg_table, "delete")
    assert not in_process.committed
    assert in_process.classification is not None
    assert in_process.classification.kind is ConflictKind.VALIDATION_CONFLICT

    other = _new_table(iceberg_engine, iceberg_table + "_submitted")
    job = submit_job(
        CallableJob(update_then_stale_delete),
        other,
        tmp_path / "outcome.json",
        operation="delete",
        config=_config(spark_home),
        py_files=[__file__],  # the driver imports this module's job by name
    )
    submitted = job.wait(timeout=DRIVER_TIMEOUT)
    assert not submitted.committed, job.log_tail()
    assert submitted.error is not None and in_process.error is not None
    assert submitted.error.exception_class == in_process.error.exception_class
    assert submitted.error.cause_classes == in_process.error.cause_classes
    assert submitted.error.error_class == in_process.error.error_class
    assert submitted.classification is not None
    assert submitted.classification.kind is in_process.classification.kind
    assert submitted.classification.retry_safe == in_process.classification.retry_safe
    # the caller re-classifies the driver's error text to the same kind
    from occflow.engines.spark import classify_error

    again = classify_error(submitted.error)
    assert again is not None and again.kind is ConflictKind.VALIDATION_CONFLICT


def test_reconnecting_by_outcome_path_finds_the_running_driver_and_its_outcome(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    app = tmp_path / "slow_app.py"
    app.write_text(
        "import sys, time\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "time.sleep(3)\n"
        "spark.sql(f\"INSERT INTO {sys.argv[1]} VALUES (60, 'd', 1)\")\n"
    )
    path = tmp_path / "outcome.json"
    started = submit_job(ApplicationJob(str(app), (iceberg_table,)), iceberg_table, path, "insert_into", _config(spark_home))
    again = SubmittedJob.reconnect(path)  # what a resumed Airflow task does
    assert again == started
    assert again.running()
    assert again.poll() is None
    outcome = again.wait(timeout=DRIVER_TIMEOUT)
    assert outcome.committed, again.log_tail()
    assert again.join(timeout=120), "the driver wrote its outcome but did not exit"
    assert not again.running()
    assert read_outcome(path) == outcome
    with pytest.raises(SubmitError, match="already holds an outcome"):
        submit_job(ApplicationJob(str(app), (iceberg_table,)), iceberg_table, path, "insert_into", _config(spark_home))


def test_driver_that_dies_without_an_outcome_is_a_failed_outcome_not_a_conflict(
    spark_home: Path, tmp_path: Path
) -> None:
    app = tmp_path / "dies.py"
    app.write_text("import os\nos._exit(3)\n")
    job = submit_job(ApplicationJob(str(app)), "lake.db.nothing", tmp_path / "o.json", "insert_into", _config(spark_home))
    outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert not outcome.committed
    assert outcome.error is not None
    assert outcome.error.exception_class == "occflow.engines.spark.submit.DriverExited"
    assert outcome.classification is not None
    assert outcome.classification.kind is ConflictKind.NOT_A_CONFLICT


def test_reconnecting_to_a_path_no_job_writes_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match="no submitted job writes"):
        SubmittedJob.reconnect(tmp_path / "nothing.json")


def test_lambda_jobs_cannot_be_submitted_to_another_process(spark_home: Path, tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match="importable 'module:function'"):
        submit_job(lambda spark, ctx: None, "lake.db.t", tmp_path / "o.json", "insert_into", _config(spark_home))


def test_driver_rejects_bad_arguments_with_exit_status_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "occflow.engines.spark.driver", "--outcome", str(tmp_path / "o.json"), "--table",
         "lake.db.t; drop", "--sql", "INSERT INTO t VALUES (1)", "--config", '{"master": "local[1]"}'],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "bad table identifier" in proc.stderr
    assert not (tmp_path / "o.json").exists()


def _tag() -> CommitTag:
    return CommitTag.create("dag_submit", "write", "run_1", "insert_into", logical_date="2024-01-01T00:00:00+00:00",
                            partitions={"ds": "t"}, try_number=1, fence=7)


def test_submit_ledger_reads_the_tags_spark_reads_without_a_session(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path
) -> None:
    """The caller-side ledger reads the JDBC catalog and the metadata file directly; Iceberg's
    own ``snapshots`` table, read through Spark (``IcebergLedger``), is the oracle."""
    from occflow.engines.spark.iceberg import iceberg_commit_properties
    from occflow.engines.spark.submit_ledger import SubmitLedger

    spark = iceberg_engine.session()
    tag = _tag()
    with iceberg_commit_properties(spark, tag):
        spark.sql(f"INSERT INTO {iceberg_table} VALUES (60, 't', 1)")
    ledger = SubmitLedger(_config(spark_home), iceberg_table.removeprefix("lake."))
    found = ledger.find_commit(tag)
    oracle = iceberg_engine.format.commit_ledger(spark, iceberg_table).find_commit(tag)
    assert found is not None and oracle is not None
    assert (found.snapshot_id, found.version, found.tag.fence) == (oracle.snapshot_id, oracle.version, 7)
    assert [c.snapshot_id for c in ledger.tagged_commits()] == [oracle.snapshot_id]
    other = CommitTag.create("dag_submit", "other", "run_1", "insert_into")
    assert ledger.find_commit(other) is None
    assert list(SubmitLedger(_config(spark_home), "db.no_such_table").tagged_commits()) == []


@pytest.mark.slow
def test_tagged_driver_tags_its_commit_and_a_second_driver_of_the_same_write_does_not_commit(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    tag = _tag()
    sql = f"INSERT INTO {iceberg_table} VALUES (70, 't', 1), (71, 't', 2)"
    first = submit_job(sql, iceberg_table, tmp_path / "one.json", config=_config(spark_home), tag=tag)
    done = first.wait(timeout=DRIVER_TIMEOUT)
    assert done.committed and "exactly_once" not in done.tag, (done.error, first.log_tail())
    assert first.application() is not None and first.application()["application_id"].startswith("local-")
    summary = iceberg_engine.session().sql(
        f"SELECT summary FROM {iceberg_table}.snapshots WHERE snapshot_id = {done.snapshot_id}"
    ).collect()[0][0]
    assert summary["occflow.write-id"] == tag.write_id and summary["occflow.fence"] == "7"
    # A second driver of the same logical write (a retry that could not reconnect) finds the commit.
    second = submit_job(sql, iceberg_table, tmp_path / "two.json", config=_config(spark_home), tag=tag)
    again = second.wait(timeout=DRIVER_TIMEOUT)
    assert again.committed and again.snapshot_id == done.snapshot_id, (again, second.log_tail())
    assert "already committed" in again.tag["exactly_once"]
    rows = iceberg_engine.session().sql(f"SELECT count(*) FROM {iceberg_table} WHERE ds = 't'").collect()[0][0]
    assert rows == 2  # written once

"""A whole-table Iceberg compaction that loses to one partition's DELETE retries what is left
(issue 23), on real Spark + Iceberg run by ``dag.test()``.

The race is deterministic: the first attempt plans the rewrite on a session whose catalog still
holds the table at the snapshot before a DELETE of one row in partition ``b`` (``pinned_session``);
Iceberg fails its commit ("Missing required files to delete"). The policy of a compaction wider
than one partition retries from a fresh snapshot, and the oracle is the engine's own record: the
``files`` and ``partitions`` metadata tables show every partition compacted, and the ``replace``
snapshot's summary carries the task's tag, which ``TableCommitSensor`` finds.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.policy import Action
from occflow.core.report import WriteReport, WriteStatus

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

# One embedded home for every Spark test in this process: a Spark application keeps its catalog.
os.environ.setdefault("OCCFLOW_HOME", tempfile.mkdtemp(prefix="occflow-home-"))

DAG_SOURCE = '''
import pathlib
import threading
import pendulum
from airflow.sdk import DAG, task
from occflow.engines.spark.iceberg import pinned_session
from occflow.engines.spark.iceberg_rewrite import run_statement
from occflow.hooks.spark import OccflowSparkHook
from occflow.operators.spark import SparkWriteOperator, spark_engine
from occflow.sensors.commit import TableCommitSensor

MARK = pathlib.Path({mark!r})
T = "lake.db.compact_all"
CALL = "CALL lake.system.rewrite_data_files(table => 'db.compact_all', options => map('min-input-files', '2'))"


def compact(spark, job):
    session = spark
    if not MARK.exists():
        # First attempt: plan on the snapshot before a DELETE of one row of ds=b commits.
        MARK.touch()
        session = pinned_session(spark, "lake")
        session.sql(f"SELECT count(*) FROM {{T}}").collect()
        # Another writer, on its own thread: this one carries the task's commit tag.
        other = threading.Thread(target=lambda: spark.newSession().sql(f"DELETE FROM {{T}} WHERE ds = 'b' AND id = 1"))
        other.start()
        other.join()
    run_statement(session, CALL)  # a callable job's CALL, tagged like a SQL job's


with DAG("iceberg_compaction_retry", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):

    @task
    def create_table():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
        spark.sql(f"DROP TABLE IF EXISTS {{T}} PURGE")
        spark.sql(f"CREATE TABLE {{T}} (id INT, ds STRING) USING iceberg PARTITIONED BY (ds) "
                  "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='0')")
        for i in range(3):
            spark.sql(f"INSERT INTO {{T}} VALUES ({{i}}, 'a'), ({{i}}, 'b'), ({{i}}, 'c'), ({{i}}, 'd')")

    compaction = SparkWriteOperator(
        task_id="compact", table="db.compact_all", table_format="iceberg", operation="optimize", job=compact,
    )
    found = TableCommitSensor(
        task_id="wait_for_compaction", table_format="iceberg", table="db.compact_all",
        upstream_task_id="compact", poll_interval=0.5, timeout=60,
    )

    @task
    def engine_record():
        spark = spark_engine(OccflowSparkHook().session_config()).session()
        files = spark.sql(f"SELECT partition.ds AS ds, count(*) AS n FROM {{T}}.files GROUP BY 1").collect()
        parts = spark.sql(f"SELECT partition.ds AS ds, file_count, record_count FROM {{T}}.partitions").collect()
        snaps = spark.sql(f"SELECT snapshot_id, operation, summary FROM {{T}}.snapshots ORDER BY committed_at").collect()
        return {{
            "files": {{r["ds"]: r["n"] for r in files}},
            "partitions": {{r["ds"]: [r["file_count"], r["record_count"]] for r in parts}},
            "snapshots": [[r["snapshot_id"], r["operation"], dict(r["summary"])] for r in snaps],
        }}

    create_table() >> compaction >> found >> engine_record()
'''


def test_a_whole_table_compaction_that_lost_to_one_partitions_delete_retries_and_compacts_every_partition(
    run_dag, tmp_path
):
    run = run_dag(DAG_SOURCE.format(mark=str(tmp_path / "raced")))
    assert run.state == "success", {k: v.state for k, v in run.tasks.items()}

    report = WriteReport.from_dict(run.task("compact").xcom["occflow_report"])
    assert report.status is WriteStatus.COMMITTED and report.attempts == 2
    [lost] = report.lost
    assert lost.kind is ConflictKind.VALIDATION_CONFLICT and lost.action is Action.RETRY, lost
    assert "still uncompacted" in lost.decision_reason

    record = run.task("engine_record").xcom["return_value"]
    # Every partition compacted into one file, ds=b without the deleted row.
    assert record["files"] == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert record["partitions"] == {"a": [1, 3], "b": [1, 2], "c": [1, 3], "d": [1, 3]}
    snapshots = record["snapshots"]
    operations = [op for _, op, _ in snapshots]
    assert operations == ["append"] * 3 + ["delete", "replace"]  # seeds, the DELETE, one compaction
    delete_id, _, delete_summary = snapshots[3]
    assert "occflow.write-id" not in delete_summary  # the other writer's commit is not the task's
    compaction_id, _, summary = snapshots[4]
    assert lost.winner is not None and lost.winner.snapshot_id == delete_id
    assert summary["changed-partition-count"] == "4"
    # The replace snapshot carries the task's tag: the ledger's and the sensor's key.
    assert summary["occflow.dag-id"] == "iceberg_compaction_retry" and summary["occflow.task-id"] == "compact"
    assert report.snapshot_id == compaction_id
    assert run.task("wait_for_compaction").xcom["return_value"]["snapshot_id"] == compaction_id

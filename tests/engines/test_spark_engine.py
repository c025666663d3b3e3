"""The Spark engine on real Spark + Iceberg: every job shape commits, failures keep the Java chain,
and real concurrent conflicts come back as failed outcomes with the right ConflictKind."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.engines.outcome import WriteOutcome
from occflow.engines.spark import (
    ApplicationJob,
    JobContext,
    NoConflictDetectionWarning,
    SparkConfig,
    SparkEngine,
)
from occflow.engines.spark.iceberg import current_snapshot, set_commit_retries

pytestmark = pytest.mark.spark


def _count(engine: SparkEngine, table: str, where: str = "true") -> int:
    return int(engine.session().sql(f"SELECT count(*) FROM {table} WHERE {where}").collect()[0][0])


def test_sql_job_commits_and_reports_its_snapshot_sequence_number_and_rows(
    iceberg_engine: SparkEngine, iceberg_table: str
) -> None:
    before = current_snapshot(iceberg_engine.session(), iceberg_table)
    outcome = iceberg_engine.run(f"INSERT INTO {iceberg_table} VALUES (10, 'c', 1), (11, 'c', 2)", iceberg_table)
    now = current_snapshot(iceberg_engine.session(), iceberg_table)
    assert outcome.committed and outcome.error is None
    assert outcome.operation is Operation.INSERT_INTO
    assert outcome.engine == "spark-iceberg"
    assert now is not None and before is not None
    assert outcome.snapshot_id == now.snapshot_id != before.snapshot_id
    assert outcome.version == now.sequence_number == (before.sequence_number or 0) + 1
    assert outcome.rows == 2
    assert outcome.seconds > 0
    assert _count(iceberg_engine, iceberg_table) == 6


def test_multi_statement_sql_runs_every_statement_and_takes_the_first_write_as_operation(
    iceberg_engine: SparkEngine, iceberg_table: str
) -> None:
    outcome = iceberg_engine.run(
        f"SET spark.sql.shuffle.partitions = 2; UPDATE {iceberg_table} SET v = 0 WHERE ds = 'a';"
        f" DELETE FROM {iceberg_table} WHERE id = 4",
        iceberg_table,
    )
    assert outcome.committed, outcome.error
    assert outcome.operation is Operation.UPDATE
    assert _count(iceberg_engine, iceberg_table, "v = 0") == 3
    assert _count(iceberg_engine, iceberg_table) == 3


def test_callable_job_gets_the_session_and_its_context(iceberg_engine: SparkEngine, iceberg_table: str) -> None:
    seen: list[JobContext] = []

    def job(spark: Any, context: JobContext) -> None:
        seen.append(context)
        spark.sql(f"INSERT INTO {context.table} VALUES (20, {_lit(context.params['ds'])}, 1)")

    outcome = iceberg_engine.run(job, iceberg_table, "insert_into", params={"ds": "z"})
    assert outcome.committed and outcome.rows == 1
    assert seen[0].table == iceberg_table and seen[0].operation is Operation.INSERT_INTO
    assert _count(iceberg_engine, iceberg_table, "ds = 'z'") == 1


def _lit(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def test_application_file_runs_in_the_engine_session_with_its_arguments(
    iceberg_engine: SparkEngine, iceberg_table: str, tmp_path: Path
) -> None:
    app = tmp_path / "app.py"
    app.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "table, ds = sys.argv[1], sys.argv[2]\n"
        "spark.sql(f\"INSERT INTO {table} VALUES (30, '{ds}', 1), (31, '{ds}', 2), (32, '{ds}', 3)\")\n"
    )
    outcome = iceberg_engine.run(ApplicationJob(str(app), (iceberg_table, "app")), iceberg_table, "insert_into")
    assert outcome.committed, outcome.error
    assert outcome.rows == 3
    assert _count(iceberg_engine, iceberg_table, "ds = 'app'") == 3


def test_failed_job_keeps_exception_class_error_class_and_is_not_a_conflict(
    iceberg_engine: SparkEngine, iceberg_table: str
) -> None:
    outcome = iceberg_engine.run(f"UPDATE {iceberg_table} SET no_such_column = 1", iceberg_table)
    assert not outcome.committed
    assert outcome.error is not None
    assert outcome.error.exception_class.startswith("org.apache.spark.sql")
    assert outcome.error.error_class is not None and outcome.error.error_class.startswith("UNRESOLVED_COLUMN")
    assert "no_such_column" in outcome.error.text
    assert outcome.classification is not None
    assert outcome.classification.kind is ConflictKind.NOT_A_CONFLICT


def _race(engine: SparkEngine, jobs: list[tuple[str, str]], table: str) -> list[WriteOutcome]:
    """Run the jobs in threads released together by a barrier; outcomes in job order."""
    barrier = threading.Barrier(len(jobs))
    outcomes: list[WriteOutcome | None] = [None] * len(jobs)

    def run(i: int, sql: str, op: str) -> None:
        barrier.wait()
        outcomes[i] = engine.run(sql, table, op)

    threads = [threading.Thread(target=run, args=(i, sql, op)) for i, (sql, op) in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


def test_overlapping_update_and_delete_in_two_threads_produce_a_real_validation_conflict(
    iceberg_engine: SparkEngine, iceberg_table: str
) -> None:
    failures: list[WriteOutcome] = []
    for _ in range(6):  # the race is real: both must plan before either commits
        outcomes = _race(
            iceberg_engine,
            [
                (f"UPDATE {iceberg_table} SET v = v + 1 WHERE ds = 'a'", "update"),
                (f"DELETE FROM {iceberg_table} WHERE ds = 'a' AND v % 2 = 0", "delete"),
            ],
            iceberg_table,
        )
        failures = [o for o in outcomes if not o.committed]
        assert len(failures) < 2, "one of two writers always commits"
        if failures:
            break
        iceberg_engine.run(f"INSERT INTO {iceberg_table} VALUES (1, 'a', 1), (2, 'a', 2)", iceberg_table)
    assert failures, "no conflict in 6 rounds of overlapping UPDATE and DELETE"
    lost = failures[0]
    assert lost.error is not None
    assert "org.apache.iceberg.exceptions.ValidationException" in (lost.error.exception_class, *lost.error.cause_classes)
    assert lost.classification is not None
    assert lost.classification.kind is ConflictKind.VALIDATION_CONFLICT
    assert lost.classification.retry_safe


def test_zero_commit_retries_turn_a_lost_commit_race_into_commit_failed(
    iceberg_engine: SparkEngine, iceberg_table: str
) -> None:
    set_commit_retries(iceberg_engine.session(), iceberg_table, 0)
    failures: list[WriteOutcome] = []
    for round_ in range(10):  # appends never fail validation: only the metadata swap can lose
        outcomes = _race(
            iceberg_engine,
            [(f"INSERT INTO {iceberg_table} VALUES ({100 + 10 * round_ + i}, 'a', 0)", "insert_into") for i in range(3)],
            iceberg_table,
        )
        failures = [o for o in outcomes if not o.committed]
        if failures:
            break
    assert failures, "no lost commit race in 10 rounds of three concurrent appends"
    lost = failures[0]
    assert lost.error is not None
    assert "org.apache.iceberg.exceptions.CommitFailedException" in (lost.error.exception_class, *lost.error.cause_classes)
    assert lost.classification is not None
    assert lost.classification.kind is ConflictKind.COMMIT_FAILED


def test_plain_parquet_tables_commit_with_a_warning_that_only_admission_control_protects_them(
    iceberg_engine: SparkEngine, tmp_path: Path
) -> None:
    iceberg_engine.session()  # the plain engine shares the running session (no extra jars)
    plain = SparkEngine(SparkConfig(table_format="parquet", home=str(tmp_path)))
    spark = plain.session()
    spark.sql(f"CREATE TABLE plain_events (id INT, ds STRING) USING parquet LOCATION '{tmp_path / 'plain'}'")
    try:
        with pytest.warns(NoConflictDetectionWarning, match="only occflow's admission control protects it"):
            outcome = plain.run("INSERT INTO plain_events VALUES (1, 'a')", "plain_events")
        assert outcome.committed and outcome.engine == "spark-parquet"
        assert outcome.tag["conflict_detection"] == "none"
        assert spark.sql("SELECT count(*) FROM plain_events").collect()[0][0] == 1
    finally:
        spark.sql("DROP TABLE IF EXISTS plain_events")

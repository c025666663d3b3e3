"""Exactly-once writes on real Spark + Iceberg: snapshot-summary tags, verify-before-retry, faults.

The tags are put on SQL commits through Iceberg's ``CommitMetadata`` commit properties and read
back from the ``snapshots`` metadata table. Faults are injected around the real engine call
(``fault_injection.with_fault``); the kill test SIGKILLs a real Spark driver process right after
its Iceberg commit returned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fault_injection import (
    KILLED,
    ROWS_PER_WRITE,
    InjectedCrash,
    count,
    iceberg_rows,
    iceberg_try,
    session_config,
    tag_of,
)

from occflow.engines.ledger import AlreadyCommitted, StaleOverwriteError
from occflow.engines.spark import IcebergLedger
from occflow.engines.tags import FENCE, WRITE_ID, CommitTag
from occflow.operators.exactly_once import ExactlyOnce

pytestmark = pytest.mark.spark
SCRIPT = Path(__file__).with_name("fault_injection.py")


def _snapshots(spark: Any, table: str) -> list[dict[str, Any]]:
    rows = spark.sql(f"SELECT snapshot_id, operation, summary FROM {table}.snapshots ORDER BY committed_at").collect()
    return [{"id": r[0], "operation": r[1], "summary": dict(r[2])} for r in rows]


def test_sql_commits_inside_tagging_carry_the_tag_in_the_snapshot_summary(eo_spark: Any, eo_table: str) -> None:
    spark = eo_spark.session()
    tag = tag_of(1)
    ledger = IcebergLedger(spark, eo_table)
    assert ledger.find_commit(tag) is None
    outcome = ExactlyOnce(ledger, tag).run(lambda: eo_spark.run(f"INSERT INTO {eo_table} VALUES (100, 1)", eo_table),
                                           verify_first=True)
    assert outcome.committed and outcome.snapshot_id is not None
    eo_spark.run(f"INSERT INTO {eo_table} VALUES (200, 2)", eo_table)  # untagged: outside tagging
    snapshots = _snapshots(spark, eo_table)
    assert [s["summary"].get(WRITE_ID) for s in snapshots] == [tag.write_id, None]
    found = ledger.find_commit(tag)
    assert found is not None and found.snapshot_id == outcome.snapshot_id and found.tag == tag
    assert found.version is not None  # the snapshot's sequence number
    assert ledger.find_commit(tag_of(2)) is None


def test_the_fence_and_the_try_are_stamped_into_the_snapshot_summary(eo_spark: Any, eo_table: str) -> None:
    tag = CommitTag.create("d", "t", "r1", "insert_into", try_number=2, fence=41)
    ledger = IcebergLedger(eo_spark.session(), eo_table)
    outcome = ExactlyOnce(ledger, tag).run(lambda: eo_spark.run(f"INSERT INTO {eo_table} VALUES (1, 1)", eo_table),
                                           verify_first=False)
    assert outcome.committed
    summary = _snapshots(eo_spark.session(), eo_table)[-1]["summary"]
    assert summary[FENCE] == "41" and summary["occflow.try-number"] == "2"
    found = ledger.find_commit(tag)
    assert found is not None and found.tag.fence == 41 and found.by == "try 2"


def test_before_commit_runs_right_before_the_write_statement_and_its_refusal_commits_nothing(
    eo_spark: Any, eo_table: str,
) -> None:
    spark = eo_spark.session()
    seen: list[int] = []

    def check() -> None:
        seen.append(spark.sql("SELECT * FROM adversarial_source").count())  # the statement before ran
        raise AlreadyCommitted("another try committed this write")

    sql = f"CREATE OR REPLACE TEMPORARY VIEW adversarial_source AS SELECT 1 AS id, 1 AS w; " \
          f"INSERT INTO {eo_table} SELECT * FROM adversarial_source"
    with pytest.raises(AlreadyCommitted):
        eo_spark.run(sql, eo_table, "insert_into", before_commit=check)
    assert seen == [1] and _snapshots(spark, eo_table) == []
    # A callable's commits happen in code occflow does not see: the check runs before it starts.
    with pytest.raises(AlreadyCommitted):
        eo_spark.run(lambda s, ctx: seen.append(-1), eo_table, "insert_into", before_commit=check)
    assert seen[-1] != -1 and _snapshots(spark, eo_table) == []


def test_merge_commits_are_tagged_too(eo_spark: Any, eo_table: str) -> None:
    tag = tag_of(5, "merge")
    sql = f"MERGE INTO {eo_table} t USING (SELECT 500 AS id, 5 AS w) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *"
    outcome = ExactlyOnce(IcebergLedger(eo_spark.session(), eo_table), tag).run(lambda: eo_spark.run(sql, eo_table),
                                                                                 verify_first=False)
    assert outcome.committed
    assert _snapshots(eo_spark.session(), eo_table)[-1]["summary"][WRITE_ID] == tag.write_id


def test_commit_state_unknown_after_the_commit_landed_is_verified_not_retried(eo_spark: Any, eo_table: str) -> None:
    result = iceberg_try(eo_spark, eo_table, 1, 1, "unknown_after")
    assert result.committed and result.verified and result.attempts == 1
    assert iceberg_rows(eo_spark.session(), eo_table) == [1] * ROWS_PER_WRITE
    assert len(_snapshots(eo_spark.session(), eo_table)) == 1


def test_commit_state_unknown_for_a_commit_that_never_landed_is_retried_once_verified(eo_spark: Any, eo_table: str) -> None:
    result = iceberg_try(eo_spark, eo_table, 1, 1, "unknown_before")
    assert result.committed and not result.verified and result.attempts == 2
    assert iceberg_rows(eo_spark.session(), eo_table) == [1] * ROWS_PER_WRITE


def test_a_spark_driver_killed_right_after_the_commit_is_not_written_again(eo_spark: Any, eo_table: str) -> None:
    config = json.dumps(session_config(eo_spark.session()))
    killed = subprocess.run([sys.executable, str(SCRIPT), "iceberg", config, eo_table, "1", "1", "kill"],
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == KILLED, killed.stderr[-3000:]
    spark = eo_spark.session()
    assert iceberg_rows(spark, eo_table) == [1] * ROWS_PER_WRITE  # committed before the kill
    second = iceberg_try(eo_spark, eo_table, 1, 2, None)
    assert second.committed and second.verified
    assert iceberg_rows(spark, eo_table) == [1] * ROWS_PER_WRITE
    assert len(_snapshots(spark, eo_table)) == 1


def test_a_slow_backfill_overwrite_does_not_clobber_a_newer_logical_dates_overwrite(eo_spark: Any) -> None:
    spark = eo_spark.session()
    table = "lake.eo.snapshot_by_region"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(f"CREATE TABLE {table} (region STRING, v INT) USING iceberg PARTITIONED BY (region)")

    def overwrite(day: str, value: int) -> Any:
        tag = CommitTag.create("daily", "snapshot", f"scheduled__{day}", "insert_overwrite",
                               logical_date=f"{day}T00:00:00+00:00", partitions={"region": "eu"})
        sql = f"INSERT OVERWRITE {table} VALUES ('eu', {int(value)})"
        return ExactlyOnce(IcebergLedger(spark, table), tag).run(lambda: eo_spark.run(sql, table), verify_first=True)

    assert overwrite("2024-01-02", 2).committed
    with pytest.raises(StaleOverwriteError, match="later logical date"):
        overwrite("2024-01-01", 1)
    assert [tuple(r) for r in spark.sql(f"SELECT region, v FROM {table}").collect()] == [("eu", 2)]


def test_five_faults_in_a_row_leave_no_duplicate_and_no_lost_write(eo_spark: Any, eo_table: str) -> None:
    faults = ["unknown_after", "unknown_before", "timeout_after", "crash_after", "unknown_after"]
    for write_no, fault in enumerate(faults, start=1):
        try:
            first = iceberg_try(eo_spark, eo_table, write_no, 1, fault)
        except InjectedCrash:
            first = None
        if first is None or not first.committed:
            assert iceberg_try(eo_spark, eo_table, write_no, 2, None).committed
    counted = count(iceberg_rows(eo_spark.session(), eo_table), range(1, len(faults) + 1))
    assert counted["duplicated_writes"] == [] and counted["lost_writes"] == [], counted
    assert counted["rows"] == len(faults) * ROWS_PER_WRITE

"""ConflictRetryPolicy on operators occflow does not own, under real Airflow ``dag.test()``.

The conflicts are real: two delta-rs writers race on one partition inside the task (the task's
snapshot goes stale because another writer commits first), or a spark-submit-like job prints
Delta's own exception text and exits non-zero. The policy's decision is checked in what Airflow
recorded: the try count, the retry reason, and the gap between tries (the derived delay).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

pytestmark = pytest.mark.airflow

# Short waits so the real retries take seconds: 2 s exponential base plus up to 1 s of jitter.
QUICK_RETRY = {
    "action": "retry",
    "wait": {"type": "sum", "parts": [{"type": "exponential", "multiplier": 2, "max": 10}, {"type": "random", "min": 0, "max": 1}]},
    "stop": {"type": "after_attempt", "attempts": 3},
}


def _partitioned_table(path: Path) -> str:
    write_deltalake(str(path), pa.table({"ds": ["a", "a", "b"], "v": [1, 2, 3]}), partition_by=["ds"])
    return str(path)


def _rows(path: str) -> list[tuple[str, int]]:
    table = DeltaTable(path).to_pyarrow_table()
    return sorted(zip(table.column("ds").to_pylist(), table.column("v").to_pylist(), strict=True))


DELTA_DAG = """
    from pathlib import Path
    from airflow.sdk import DAG
    from airflow.providers.standard.operators.python import PythonOperator
    from occflow.policies import ConflictRetryPolicy

    TABLE = {table!r}
    MARKER = Path({marker!r})

    def delete_row():
        from deltalake import DeltaTable
        mine = DeltaTable(TABLE)  # this try's snapshot
        if not MARKER.exists():
            MARKER.touch()
            # A concurrent writer commits on the same partition before this task does.
            {winner}
        mine.{loser}

    policy = ConflictRetryPolicy(
        "delta-rs", "{operation}", table="lake.events", overrides={overrides!r}
    )
    with DAG("{dag_id}", schedule=None):
        PythonOperator(task_id="write", python_callable=delete_row, retries=policy.retries,
                       retry_policy=policy)
"""


def test_real_delta_rs_conflict_is_retried_with_the_derived_delay(run_dag, tmp_path, stats_capture):
    table = _partitioned_table(tmp_path / "events")
    run = run_dag(
        DELTA_DAG.format(
            table=table,
            marker=str(tmp_path / "first-try"),
            winner="DeltaTable(TABLE).delete(\"ds = 'a' and v = 1\")",
            loser="delete(\"ds = 'a' and v = 2\")",
            operation="delete",
            overrides={"concurrent_append": QUICK_RETRY},
            dag_id="retry_policy_delta_conflict",
        )
    )
    write = run.task("write")
    assert write.state == "success"
    assert write.try_number == 2
    first = write.tries[0]
    assert first.state in ("up_for_retry", "failed")
    assert first.retry_reason is not None and "concurrent_append" in first.retry_reason
    # Derived delay for the first attempt: 2 s * 2^0 plus 0-1 s of jitter.
    assert first.retry_delay_override is not None and 2.0 <= first.retry_delay_override <= 3.0
    assert write.gap_before_try(2) >= 2.0
    # Both deletes landed once: the winner's and the retried one. Nothing lost, nothing twice.
    assert _rows(table) == [("b", 3)]
    conflicts = stats_capture.named("occflow.conflicts.concurrent_append.lake__events")
    retries = stats_capture.named("occflow.retries.concurrent_append.lake__events")
    assert [c.tags["table"] for c in conflicts] == ["lake.events"]
    assert len(retries) == 1 and retries[0].tags["operation"] == "delete"


def test_protocol_change_fails_without_retry(run_dag, tmp_path, stats_capture):
    table = _partitioned_table(tmp_path / "events")
    run = run_dag(
        DELTA_DAG.format(
            table=table,
            marker=str(tmp_path / "first-try"),
            # The winner upgrades the table's protocol (writer version 2 -> 4).
            winner="DeltaTable(TABLE).alter.set_table_properties({'delta.enableChangeDataFeed': 'true'})",
            loser="delete(\"ds = 'a' and v = 2\")",
            operation="delete",
            overrides={},
            dag_id="retry_policy_protocol_changed",
        )
    )
    write = run.task("write")
    assert write.state == "failed"
    assert write.try_number == 1  # retries were allowed (policy.retries > 0) but not used
    assert _rows(table) == [("a", 1), ("a", 2), ("b", 3)]
    assert stats_capture.named("occflow.failures.protocol_changed.lake__events")
    assert not stats_capture.named("occflow.retries.")


def test_an_ordinary_error_runs_one_try_plus_non_conflict_retries_while_a_conflict_is_retried(
    run_dag, tmp_path, stats_capture
):
    """``retries=policy.retries`` sizes the task's retries for conflicts (13 here): an ordinary
    bug under the same policy runs ``1 + non_conflict_retries`` tries, not 14, while a real
    delta-rs conflict in a task of the same run is still retried."""
    from occflow.policies import ConflictRetryPolicy

    assert ConflictRetryPolicy("delta-rs", "insert_into").retries > 3  # what Airflow alone would allow
    table = _partitioned_table(tmp_path / "events")
    run = run_dag(
        f"""
        from pathlib import Path
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.policies import ConflictRetryPolicy

        TABLE = {table!r}
        MARKER = Path({str(tmp_path / "first-try")!r})

        def broken():
            # Mentions commits and conflicts, but is no engine's conflict error.
            raise ValueError("could not parse the commit message: conflict markers <<<<<<< in file")

        def delete_row():
            from deltalake import DeltaTable
            mine = DeltaTable(TABLE)  # this try's snapshot
            if not MARKER.exists():
                MARKER.touch()
                DeltaTable(TABLE).delete("ds = 'a' and v = 1")  # a concurrent writer commits first
            mine.delete("ds = 'a' and v = 2")

        bug = ConflictRetryPolicy("delta-rs", "insert_into", table="lake.events")
        flaky = ConflictRetryPolicy("delta-rs", "insert_into", table="lake.events", non_conflict_retries=2)
        racing = ConflictRetryPolicy("delta-rs", "delete", table="lake.events",
                                     overrides={{"concurrent_append": {QUICK_RETRY!r}}})
        with DAG("retry_policy_not_a_conflict", schedule=None):
            PythonOperator(task_id="bug", python_callable=broken, retries=bug.retries, retry_policy=bug)
            PythonOperator(task_id="flaky", python_callable=broken, retries=flaky.retries, retry_policy=flaky)
            PythonOperator(task_id="conflict", python_callable=delete_row, retries=racing.retries,
                           retry_policy=racing)
        """
    )
    bug, flaky, conflict = run.task("bug"), run.task("flaky"), run.task("conflict")
    # non_conflict_retries=0 (the default): one try, although retries=13 allowed more.
    assert bug.state == "failed" and bug.try_number == 1
    # non_conflict_retries=2: Airflow's ordinary retries, no occflow reason or delay, then fail.
    assert flaky.state == "failed" and flaky.try_number == 3
    assert [t.retry_reason for t in flaky.tries[:-1]] == [None, None]
    assert [t.retry_delay_override for t in flaky.tries[:-1]] == [None, None]
    # A conflict under a policy with non_conflict_retries=0 is still retried, by the policy.
    assert conflict.state == "success" and conflict.try_number == 2
    assert "concurrent_append" in (conflict.tries[0].retry_reason or "")
    assert _rows(table) == [("b", 3)]
    assert "occflow_conflict" not in bug.xcom and "occflow_conflict" not in flaky.xcom
    assert not stats_capture.named("occflow.conflicts.not_a_conflict")


def test_non_conflict_retries_is_checked_and_serialized():
    from occflow.core.errors import InvalidDeclarationError
    from occflow.policies import ConflictRetryPolicy

    policy = ConflictRetryPolicy("delta-rs", "merge", non_conflict_retries=20)
    assert policy.retries == 20  # retries=policy.retries lets the larger of the two run
    again = ConflictRetryPolicy.deserialize(json.loads(json.dumps(policy.serialize())))
    assert again == policy and again.non_conflict_retries == 20
    bug = ValueError("no such column: amount")
    assert policy.evaluate(bug, 20, 21).action.value == "default"  # 19 retries made: one more
    decided = policy.evaluate(bug, 21, 21)
    assert decided.action.value == "fail" and "non_conflict_retries=20 (20 retries made)" in (decided.reason or "")
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(InvalidDeclarationError, match="non_conflict_retries must be"):
            ConflictRetryPolicy("delta-rs", "merge", non_conflict_retries=bad)


def test_conflict_text_in_the_log_of_a_foreign_job_is_classified(run_dag, tmp_path):
    """A BashOperator standing in for SparkSubmitOperator: the conflict is only in the job's output."""
    job = tmp_path / "job.py"
    marker = tmp_path / "first-try"
    # Text copied from Delta Lake's ConcurrentAppendException as Spark prints it through Py4J.
    job.write_text(
        "import pathlib, sys\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    print('py4j.protocol.Py4JJavaError: An error occurred while calling o123.sql.', file=sys.stderr)\n"
        "    print(': io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] "
        "ConcurrentAppendException: Files were added to partition [ds=2024-01-01] by a concurrent update. "
        "Please try the operation again.', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "print('committed')\n"
    )
    overrides = {"concurrent_append": QUICK_RETRY}
    run = run_dag(
        f"""
        import sys
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.bash import BashOperator
        from occflow.policies import ConflictRetryPolicy

        policy = ConflictRetryPolicy("delta-write-serializable", "merge", table="lake.events",
                                     overrides={overrides!r})
        with DAG("retry_policy_log_tail", schedule=None):
            BashOperator(task_id="submit", bash_command=f"{{sys.executable}} {str(job)}",
                         retries=policy.retries, retry_policy=policy)
        """
    )
    submit = run.task("submit")
    assert submit.state == "success"
    assert submit.try_number == 2
    reason = submit.tries[0].retry_reason or ""
    assert "concurrent_append" in reason and "from the task log" in reason
    assert submit.gap_before_try(2) >= 2.0


def test_policy_round_trips_through_json_and_decides_the_same():
    from occflow.core.kinds import ConflictKind
    from occflow.policies import ConflictRetryPolicy

    policy = ConflictRetryPolicy(
        "iceberg-serializable", "MERGE INTO", table="cat.db.t", overrides={"validation_conflict": "reschedule"}
    )
    again = ConflictRetryPolicy.deserialize(json.loads(json.dumps(policy.serialize())))
    assert again == policy
    assert again.policy.for_kind(ConflictKind.VALIDATION_CONFLICT) == policy.policy.for_kind(
        ConflictKind.VALIDATION_CONFLICT
    )
    error = RuntimeError(
        "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain "
        "records matching ref(name=\"ds\") == \"2024-01-01\": [s3://b/t/data/00000-1.parquet]"
    )
    first, second = policy.evaluate(error, 1, 10), again.evaluate(error, 1, 10)
    assert first.action == second.action
    assert first.action.value == "retry"  # reschedule reaches Airflow as a delayed retry
    assert first.retry_delay is not None and first.retry_delay.total_seconds() >= 60


def test_bad_declarations_fail_when_the_dag_is_parsed():
    from occflow.core.errors import InvalidDeclarationError
    from occflow.policies import ConflictRetryPolicy

    with pytest.raises(InvalidDeclarationError, match="unknown operation"):
        ConflictRetryPolicy("delta-rs", "upsert everything")
    with pytest.raises(InvalidDeclarationError, match="unknown profile"):
        ConflictRetryPolicy("delta-lake-9", "merge")
    with pytest.raises(InvalidDeclarationError, match="not retry-safe"):
        ConflictRetryPolicy("delta-rs", "merge", overrides={"commit_state_unknown": "retry"})
    with pytest.raises(InvalidDeclarationError, match="unknown conflict kind"):
        ConflictRetryPolicy("delta-rs", "merge", overrides={"concurrent_appendd": "retry"})


def test_write_report_metrics_carry_kind_and_table(stats_capture):
    """The XCom report of occflow's write operators, turned into Airflow Stats calls."""
    from occflow import metrics
    from occflow.core.report import WriteReport

    metrics.record_report(WriteReport.from_dict(
        {
            "table": "lake.db.events",
            "operation": "merge",
            "profile": "iceberg-serializable",
            "committed": True,
            "wasted_seconds": 12.4,
            "conflicts": [{"kind": "validation_conflict"}, {"kind": "commit_failed"}],
            "decisions": [
                {"kind": "validation_conflict", "action": "retry", "delay_seconds": 2.5, "reason": "r"},
                {"kind": "commit_failed", "action": "reschedule", "delay_seconds": 60, "reason": "r"},
                {"kind": "not_a_conflict", "action": "default", "delay_seconds": 0, "reason": "r"},
            ],
        }
    ))
    names = [(c.method, c.stat, c.value) for c in stats_capture.calls]
    assert ("incr", "occflow.conflicts.validation_conflict.lake__db__events", 1) in names
    assert ("incr", "occflow.conflicts.commit_failed.lake__db__events", 1) in names
    assert ("incr", "occflow.retries.validation_conflict.lake__db__events", 1) in names
    assert ("incr", "occflow.reschedules.commit_failed.lake__db__events", 1) in names
    assert ("incr", "occflow.wasted_seconds.lake__db__events", 12) in names
    assert ("incr", "occflow.committed.lake__db__events", 1) in names
    timings = stats_capture.named("occflow.wasted.lake__db__events")
    assert len(timings) == 1 and timings[0].value.total_seconds() == pytest.approx(12.4)
    assert not [n for n in names if "not_a_conflict" in n[1] or n[1].startswith("occflow.default")]
    assert {c.tags["table"] for c in stats_capture.calls} == {"lake.db.events"}
    assert {c.tags["kind"] for c in stats_capture.named("occflow.conflicts.")} == {
        "validation_conflict", "commit_failed"
    }

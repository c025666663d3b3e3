"""The classifier cannot be fooled by order, level or wrapping (issue 11, item 8).

A log is weighed in order and by level: the last decisive record wins, an engine's own recovered
retry is not the failure, and a failure report says nothing either way. An exception is searched
at any depth, in exception groups and behind ``raise ... from None``. Texts are laid out as
Spark 3.5's log4j2 and Airflow print them; the Iceberg and Delta lines are the engines' own
templates (apache/iceberg Tasks.java, SnapshotProducer.java; delta-io/delta OptimisticTransaction).
"""

from __future__ import annotations

import builtins

import pytest

from occflow.core.causes import MAX_CAUSES
from occflow.core.classifiers.evidence import MAX_TEXT, RecordLevel, header_level, log_records
from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind

K = ConflictKind

ICEBERG_RETRY = (
    "24/11/21 20:05:40 INFO SparkWrite: Committing append with 1 new data files to table local.db.events\n"
    "24/11/21 20:05:41 WARN Tasks: Retrying task after failure: sleepTimeMs=112 Cannot commit local.db.events: "
    "metadata location file:/tmp/wh/db/events/metadata/00007-aa.metadata.json has changed from "
    "file:/tmp/wh/db/events/metadata/00006-bb.metadata.json\n"
    "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit local.db.events: metadata location "
    "file:/tmp/wh/db/events/metadata/00007-aa.metadata.json has changed from "
    "file:/tmp/wh/db/events/metadata/00006-bb.metadata.json\n"
    "\tat org.apache.iceberg.jdbc.JdbcTableOperations.doCommit(JdbcTableOperations.java:119)\n"
    "\tat org.apache.iceberg.BaseMetastoreTableOperations.commit(BaseMetastoreTableOperations.java:126)\n"
    "\tat org.apache.iceberg.SnapshotProducer.lambda$commit$2(SnapshotProducer.java:412)\n"
    "\tat org.apache.iceberg.util.Tasks$Builder.runTaskWithRetry(Tasks.java:413)\n"
)
EXECUTOR_OOM = (
    "24/11/21 20:06:10 ERROR Executor: Exception in task 3.0 in stage 7.0 (TID 21)\n"
    "java.lang.OutOfMemoryError: Java heap space\n"
    "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)\n"
    "\tat org.apache.parquet.bytes.BytesInput.toByteArray(BytesInput.java:186)\n"
)
DELTA_CONFLICT = (
    "24/11/21 20:01:13 ERROR FileFormatWriter: Aborting job 2ad7.\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/jobs/daily_load.py", line 41, in <module>\n'
    '    df.write.format("delta").mode("append").save(path)\n'
    "delta.exceptions.captured.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] ConcurrentAppendException: "
    "Files were added to partition [ds=2024-11-21] by a concurrent update. Please try the operation again.\n"
)


def test_iceberg_retry_then_an_out_of_memory_error_is_not_a_conflict() -> None:
    result = classify(ICEBERG_RETRY + EXECUTOR_OOM)
    assert result.kind is K.NOT_A_CONFLICT
    assert "not a conflict" in result.reason and "ERROR Executor" in result.reason


def test_iceberg_retry_then_the_jvm_dying_of_memory_is_not_a_conflict() -> None:
    text = ICEBERG_RETRY + 'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space\n'
    assert classify(text).kind is K.NOT_A_CONFLICT


def test_an_engine_retry_alone_is_not_evidence_of_the_failure() -> None:
    result = classify(ICEBERG_RETRY + "24/11/21 20:05:44 INFO SparkContext: SparkContext is stopping with exitCode 1.\n")
    assert result.kind is K.NOT_A_CONFLICT
    assert "own retry" in result.reason


def test_an_engine_retry_that_ends_in_the_write_being_aborted_is_the_conflict() -> None:
    text = ICEBERG_RETRY + (
        "24/11/21 20:05:44 ERROR AppendDataExec: Data source write support "
        "IcebergBatchWrite(table=local.db.events, format=PARQUET) aborted.\n"
    )
    assert classify(text).kind is K.COMMIT_FAILED


@pytest.mark.parametrize(
    "success",
    [
        "24/11/21 20:01:20 INFO OptimisticTransaction: [tableId=8f1c,txnId=51b1] Committed delta #58 to "
        "file:/tmp/lake/events/_delta_log\n",
        "24/11/21 20:01:20 INFO SnapshotProducer: Committed snapshot 4416375233532217307 (MergeAppend)\n",
        "24/11/21 20:01:20 INFO AppendDataExec: Data source write support "
        "IcebergBatchWrite(table=local.db.events, format=PARQUET) committed.\n",
    ],
    ids=["delta", "iceberg-snapshot", "spark-v2-write"],
)
def test_a_conflict_followed_by_a_successful_commit_is_not_a_conflict(success: str) -> None:
    assert classify(DELTA_CONFLICT).kind is K.CONCURRENT_APPEND
    result = classify(DELTA_CONFLICT + success)
    assert result.kind is K.NOT_A_CONFLICT
    assert "commit succeeded" in result.reason


def test_iceberg_retry_recovered_by_a_committed_snapshot_is_not_a_conflict() -> None:
    text = ICEBERG_RETRY + "24/11/21 20:05:42 INFO SnapshotProducer: Committed snapshot 77 (MergeAppend)\n"
    assert classify(text).kind is K.NOT_A_CONFLICT


def test_a_later_error_that_is_not_a_conflict_wins_but_a_failure_report_does_not() -> None:
    later_error = "24/11/21 20:01:15 ERROR SparkSubmit: relation lake.events_staging does not exist\n"
    assert classify(DELTA_CONFLICT + later_error).kind is K.NOT_A_CONFLICT
    # Airflow logs this after every failure, before the retry policy reads the log.
    report = "[2024-11-21, 20:01:16 UTC] {task_runner.py:1651} ERROR - Task failed with exception\n"
    assert classify(DELTA_CONFLICT + report).kind is K.CONCURRENT_APPEND
    # And a conflict after an unrelated error is still the last word.
    assert classify(later_error + DELTA_CONFLICT).kind is K.CONCURRENT_APPEND


def test_a_chained_python_traceback_is_one_record() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/jobs/load.py", line 12, in load\n'
        "deltalake.exceptions.CommitFailedError: Failed to commit transaction: Metadata changed since last commit.\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/jobs/load.py", line 20, in <module>\n'
        "RuntimeError: load of lake.events failed\n"
    )
    assert len(log_records(text)) == 1
    assert classify(text).kind is K.METADATA_CHANGED


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("24/11/21 20:05:41 WARN Tasks: Retrying task after failure", RecordLevel.LOW),
        ("2024-11-21 20:05:41,123 [main] ERROR org.apache.spark.SparkContext - boom", RecordLevel.ERROR),
        ("[2024-11-21, 20:03:11 UTC] {taskinstance.py:3311} ERROR - Task failed", RecordLevel.ERROR),
        ("2024-11-21 20:03:11 [error    ] Task failed", RecordLevel.ERROR),
        ("WARNING:root:disk almost full", RecordLevel.LOW),
        ("ERROR: relation does not exist", RecordLevel.ERROR),
        ("ERROR - Task failed with exception", RecordLevel.ERROR),
        ("WARN retry policy: will retry on CommitFailedException", None),  # prose, not a layout
        ("INFO about the run", None),
        ("ERRORS were found", None),
        ("\tat org.apache.iceberg.util.Tasks$Builder.runTaskWithRetry(Tasks.java:413)", None),
    ],
)
def test_log_layouts_are_read_for_their_level(line: str, level: RecordLevel | None) -> None:
    assert header_level(line) is level


def test_text_is_bounded_to_its_tail() -> None:
    conflict = "Failed to commit transaction: Metadata changed since last commit.\n"
    noise = "24/11/21 20:00:00 INFO Executor: Finished task 0.0 in stage 1.0 (TID 1)\n"
    padding = noise * (MAX_TEXT // len(noise) + 1)
    assert classify(padding + conflict).kind is K.METADATA_CHANGED
    assert classify(conflict + padding).kind is K.NOT_A_CONFLICT  # cut off: only the last MAX_TEXT count


# ----------------------------------------------------------------------- exceptions


class ConcurrentAppendException(Exception):
    """Shaped like delta-spark's Python class (delta/exceptions; no shared conflict base)."""

    __module__ = "delta.exceptions"


def _wrapped(depth: int, *, suppress: bool = False) -> BaseException:
    """A conflict at the bottom of ``depth`` wrappers, raised as a task would raise them."""
    error: BaseException = ConcurrentAppendException("Files were added to partition [ds=1] by a concurrent update.")
    for i in range(depth):
        try:
            try:
                raise error
            except BaseException as inner:
                if suppress:
                    raise RuntimeError(f"layer {i}") from None
                raise RuntimeError(f"layer {i}") from inner
        except RuntimeError as outer:
            error = outer
    return error


def test_a_conflict_wrapped_40_deep_is_found() -> None:
    result = classify(_wrapped(40))
    assert result.kind is K.CONCURRENT_APPEND
    assert result.exception_class == "delta.exceptions.ConcurrentAppendException"


def test_a_conflict_behind_raise_from_none_is_found() -> None:
    assert classify(_wrapped(1, suppress=True)).kind is K.CONCURRENT_APPEND
    assert classify(_wrapped(40, suppress=True)).kind is K.CONCURRENT_APPEND


# ExceptionGroup is a builtin from Python 3.11 (the project still installs on 3.10).
ExceptionGroup = getattr(builtins, "ExceptionGroup", None)


@pytest.mark.skipif(ExceptionGroup is None, reason="ExceptionGroup is Python 3.11+")
def test_a_conflict_inside_an_exception_group_is_found() -> None:
    assert ExceptionGroup is not None
    conflict = ConcurrentAppendException("Files were added to partition [ds=1] by a concurrent update.")
    group = ExceptionGroup("2 writes failed", [ValueError("bad row"), conflict])
    assert classify(group).kind is K.CONCURRENT_APPEND
    nested = ExceptionGroup("task group", [KeyError("x"), ExceptionGroup("inner", [_wrapped(5)])])
    assert classify(nested).kind is K.CONCURRENT_APPEND
    try:
        raise RuntimeError("the task group failed") from group
    except RuntimeError as wrapper:
        assert classify(wrapper).kind is K.CONCURRENT_APPEND


def test_the_walk_is_bounded_and_an_unknown_error_is_never_a_conflict() -> None:
    # The bound is core.causes.MAX_CAUSES exceptions: deeper than that is not searched, and what is
    # not found is not a conflict (never retried as one).
    assert classify(_wrapped(MAX_CAUSES - 1)).kind is K.CONCURRENT_APPEND
    assert classify(_wrapped(MAX_CAUSES * 4)).kind is K.NOT_A_CONFLICT
    assert classify(RuntimeError("write to lake.events failed: commit conflict, retry")).kind is K.NOT_A_CONFLICT

"""What a person reads when a write does not commit, on real delta-rs tables under ``dag.test()``.

The task log (captured from the process: ``dag.test()`` runs tasks in it) and the alert that
``ConflictNotifier`` hands to its wrapped notifier (a callable writing the message to a file)
are checked for what the issue asked: the engine's own message for an error that is not a
conflict, one line per lost attempt, a fail-fast text said once and whole, advice that fits
delta-rs, and "already committed by try N" when a re-run finds its write in the table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from occflow.core.kinds import ConflictKind
from occflow.engines.deltars import DeltaRsTable

pytestmark = pytest.mark.airflow

HEAD = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from deltalake import DeltaTable
from deltalake.table import TableFeatures
from occflow.engines.deltars import CommitOptions, DeltaRsTable, Where
from occflow.notifications import ConflictNotifier
from occflow.operators.delta import DeltaWriteOperator

ROOT = pathlib.Path({root!r})

def keep(context):
    # The wrapped "notifier": the alert as it would be sent, one file per task.
    (ROOT / ("alert-" + context["ti"].task_id + ".txt")).write_text(context["occflow_message"])

alert = ConflictNotifier(keep)
'''

def _table(path: Path) -> str:
    outcome = DeltaRsTable(str(path)).create(
        pa.table({"id": [1, 2, 3], "ds": ["a", "a", "b"], "v": [0, 0, 0]}), partition_by=["ds"]
    )
    assert outcome.committed, outcome
    return str(path)


def _log(capfd: pytest.CaptureFixture[str]) -> str:
    out = capfd.readouterr()
    return out.out + out.err


def _records(log: str) -> list[str]:
    """The log's records: a record starts with its timestamp and runs to the next one (a
    message with newlines in it is one record)."""
    return [r.strip() for r in re.split(r"(?m)^(?=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", log) if r.strip()]


def _occflow_lines(log: str, table: str) -> list[str]:
    """The operator's own log records about attempts on ``table`` (not Airflow's traceback)."""
    return [r for r in _records(log) if re.search(rf"\] attempt \d+ of \w+ on {table}\b", r)
            and "[airflow.task.operators.occflow" in r]


def test_a_failure_that_is_not_a_conflict_gives_the_engines_message(run_dag, tmp_path, capfd):
    """Two ways delta-rs fails without a conflict: a failed outcome (schema mismatch) and an
    exception raised inside a job (a predicate on a column that does not exist)."""
    schema_t, raised_t = _table(tmp_path / "schema_t"), _table(tmp_path / "raised_t")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
def wrong_schema(context, snapshot):
    return pa.table({{"id": [9], "ds": ["a"], "v": ["not a number"], "extra": [1]}})

def bad_predicate(table, snapshot, partition, commit, context):
    DeltaTable({raised_t!r}).delete("no_such_column = 1")

with DAG("messages_not_a_conflict", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="schema_t", path={schema_t!r}, operation="insert_into",
                       data=wrong_schema, on_failure_callback=alert)
    DeltaWriteOperator(task_id="delete", table="raised_t", path={raised_t!r}, operation="delete",
                       job=bad_predicate, on_failure_callback=alert)
''')
    log = _log(capfd)
    assert run.task("append").state == "failed" and run.task("delete").state == "failed"

    alert = (tmp_path / "alert-append.txt").read_text()
    assert alert.startswith("occflow: messages_not_a_conflict.append failed (not a write conflict)")
    # The message, not only the class: what delta-rs said about the schema.
    assert "error:          SchemaMismatchError: Cannot cast schema, number of fields does not match" in alert
    lines = _occflow_lines(log, "schema_t")
    assert len(lines) == 1, lines
    assert "attempt 1 of insert_into on schema_t failed (not a conflict): SchemaMismatchError: Cannot cast schema" in lines[0]
    assert " lost" not in lines[0]

    alert = (tmp_path / "alert-delete.txt").read_text()
    error_line = next(line for line in alert.splitlines() if line.startswith("  error:"))
    assert error_line.startswith("  error:          DeltaError: ")
    assert "no_such_column" in alert  # the engine's words, beyond its class name
    lines = _occflow_lines(log, "raised_t")
    assert len(lines) == 1 and "failed (not a conflict): DeltaError: " in lines[0] and "no_such_column" in lines[0]
    assert " lost" not in lines[0]


def test_fail_fast_text_is_said_once_whole_and_fits_delta_rs(run_dag, tmp_path, capfd):
    """Two fail-fast conflicts delta-rs really raises: a shared application transaction id, and
    a protocol change (a concurrent writer enables deletion vectors)."""
    txn_t, proto_t = _table(tmp_path / "txn_t"), _table(tmp_path / "proto_t")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
def shared_txn(table, snapshot, partition, commit, context):
    other = DeltaRsTable({txn_t!r}).append(pa.table({{"id": [50], "ds": ["b"], "v": [5]}}),
                                            commit=CommitOptions(app_id="stream-1", app_version=7))
    assert other.committed, other
    mine = CommitOptions(metadata=commit.metadata, app_id="stream-1", app_version=7)
    return table.append(pa.table({{"id": [60], "ds": ["b"], "v": [6]}}), snapshot=snapshot, commit=mine)

def delete_after_a_protocol_change(table, snapshot, partition, commit, context):
    DeltaTable({proto_t!r}).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    return table.delete(Where.equals(id=2), snapshot=snapshot, commit=commit)

with DAG("messages_fail_fast", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="stream_append", table="txn_t", path={txn_t!r}, operation="insert_into",
                       job=shared_txn, retries=2, on_failure_callback=alert)
    DeltaWriteOperator(task_id="delete", table="proto_t", path={proto_t!r}, operation="delete",
                       job=delete_after_a_protocol_change, retries=2, on_failure_callback=alert)
''')
    log = _log(capfd)
    for task_id in ("stream_append", "delete"):
        assert run.task(task_id).state == "failed" and len(run.task(task_id).tries) == 1

    help_text = ConflictKind.CONCURRENT_TRANSACTION.help
    failure = next(line for line in log.splitlines() if line.startswith("occflow.operators.write_ends.ConflictFailure")
                   and "txn_t" in line)
    assert ".." not in failure  # no sentence ended twice, nothing cut
    assert failure.count("Do not retry") == 1, failure
    assert help_text not in failure  # the delta-rs wording replaced the generic one, once
    assert "give each writer its own app id. (attempts 1" in failure  # whole, to its last word
    alert = (tmp_path / "alert-stream_append.txt").read_text()
    assert alert.count("give each writer its own app id") == 1, alert
    assert "error:          CommitFailedError: Failed to commit transaction: Concurrent transaction failed." in alert
    assert "..." not in alert

    alert = (tmp_path / "alert-delete.txt").read_text()
    assert "(protocol_changed)" in alert.splitlines()[0]
    assert "upgrade the writer" not in alert and "upgrade" not in alert.split("what to change:")[1].split("error:")[0]
    assert "this is not an outdated library" in alert
    lines = _occflow_lines(log, "proto_t")
    assert len(lines) == 1 and re.search(
        r"lost a write conflict \(protocol_changed\) to v1 \w+.*; failing the task without retries", lines[0]), lines
    assert "upgrade the writer" not in log


def test_each_lost_attempt_is_logged_once(run_dag, tmp_path, capfd):
    """A MERGE loses to a concurrent append once, is retried from a fresh snapshot and commits."""
    path = _table(tmp_path / "merge_t")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
def source(context, snapshot):
    mark = ROOT / "raced"
    if not mark.exists():
        mark.write_text("raced")
        assert DeltaRsTable({path!r}).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}})).committed
    return pa.table({{"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]}})

with DAG("messages_retry_once", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="merge", table="merge_t", path={path!r}, operation="merge",
                       partitions={{"ds": "a"}}, data=source, merge_keys=["id"])
''')
    log = _log(capfd)
    assert run.task("merge").state == "success"
    assert run.task("merge").xcom["return_value"]["attempts"] == 2
    lines = _occflow_lines(log, "merge_t")
    assert len(lines) == 1, lines
    # The line names the winner as the table's log records it (the race's append is version 1).
    assert re.search(r"attempt 1 of merge on merge_t lost a write conflict \(concurrent_append\) to v1 WRITE; "
                     r"retrying in \d+\.\ds from a fresh snapshot \[", lines[0]), lines[0]
    assert "insert_overwrite" not in lines[0]  # not every operation that could have won
    # (the table's location, in the admission line, holds this test's directory: "...lost...")
    said = [line for line in log.splitlines() if "merge_t" in line and "lost a write conflict" in line]
    assert len(said) == 1, said


def test_a_rerun_that_finds_its_write_committed_says_by_which_try(run_dag, tmp_path, capfd):
    """Try 1 commits its append, then times out; Airflow's retry finds the commit (its tag) and
    does not write again."""
    path = _table(tmp_path / "rerun_t")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
from datetime import timedelta

def append_then_time_out(table, snapshot, partition, commit, context):
    outcome = table.append(pa.table({{"id": [7], "ds": ["b"], "v": [7]}}), snapshot=snapshot, commit=commit)
    if context["ti"].try_number == 1:
        raise TimeoutError("injected: the job timed out after its commit landed")
    return outcome

with DAG("messages_rerun", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="rerun_t", path={path!r}, operation="insert_into",
                       job=append_then_time_out, retries=1, retry_delay=timedelta(seconds=1))
''')
    log = _log(capfd)
    task = run.task("append")
    assert task.state == "success" and task.try_number == 2
    report = task.xcom["return_value"]
    assert report["committed_by"] == "try 1"
    assert report["version"] == 1
    said = [r for r in _records(log) if "was already committed by" in r]
    assert len(said) == 1 and "insert_into on rerun_t was already committed by try 1 (version 1)" in said[0], said
    assert "this try (2) wrote nothing" in said[0]
    assert not any(line for line in log.splitlines() if "committed insert_into on rerun_t" in line)
    from deltalake import DeltaTable

    assert [h["version"] for h in DeltaTable(path).history()] == [1, 0]  # one append, not two


def test_the_engine_message_keeps_a_py4j_text_and_drops_its_jvm_stack():
    """The shape PySpark gives a failed ``spark.sql``: the message, then the JVM's frames (which
    the task log's traceback holds already)."""
    from occflow.operators.messages import engine_message

    error = RuntimeError(
        "An error occurred while calling o77.sql.\n"
        ": org.apache.spark.SparkException: Job aborted: java.lang.OutOfMemoryError: Java heap space\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2790)\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$2(DAGScheduler.scala:2726)\n"
    )
    assert engine_message(None, error) == (
        "RuntimeError: An error occurred while calling o77.sql.\n"
        ": org.apache.spark.SparkException: Job aborted: java.lang.OutOfMemoryError: Java heap space"
    )
    assert engine_message(None, ValueError("")) == "ValueError"

"""Every end of a write task's run (``WriteFlow``) on real delta-rs tables under ``dag.test()``.

Each race is real: the task's ``job=`` (or ``data=``) callable lets another writer commit between
the attempt's snapshot and its commit, and delta-rs rejects the commit with its own conflict.
The oracles are the table's own Delta log (``DeltaTable(path).history()`` read by version
number, the rows the engine returns), never what occflow believes; what is checked is the
``occflow_report`` XCom every end pushes, read back with ``WriteReport.from_dict``.

- failed fast: a DELETE loses to a protocol change (``protocol_changed``); its alert's structured
  ``occflow_conflict`` names the winning version and the partitions;
- skipped: an OPTIMIZE loses to a DELETE of the files it rewrote (``concurrent_delete_read``);
- retried, then committed: a MERGE loses once to an append (``concurrent_append``);
- an OPTIMIZE that commits beside a concurrent compaction of the same files fails loudly,
  naming both commits (the rows really are in the table twice);
- two OPTIMIZEs of one table without admission, ``allow_unsafe_concurrency=True`` and no
  dependency between them, fail before writing anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from deltalake import DeltaTable

from occflow.core.kinds import ConflictKind
from occflow.core.policy import Action
from occflow.core.report import WriteReport, WriteStatus
from occflow.engines.deltars import DeltaRsTable

pytestmark = pytest.mark.airflow

HEAD = '''
import json
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.engines.deltars import DeltaRsTable, Where
from occflow.notifications import ConflictNotifier
from occflow.operators.delta import DeltaWriteOperator

ROOT = pathlib.Path({root!r})

def keep(context):
    # The wrapped "notifier": the structured alert, one file per task.
    (ROOT / ("conflict-" + context["ti"].task_id + ".json")).write_text(json.dumps(context["occflow_conflict"]))

alert = ConflictNotifier(keep)
'''


def _rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "ds": [part] * len(ids), "v": pa.array([0] * len(ids), pa.int64())})


def _table(path: Path, small_files: int = 1) -> str:
    """A table partitioned by ``ds`` with ``small_files`` files in partition ``a`` (one in ``b``)."""
    table = DeltaRsTable(str(path))
    assert table.create(pa.concat_tables([_rows("a", [1, 2]), _rows("b", [3])]), partition_by=["ds"]).committed
    for i in range(1, small_files):
        assert table.append(_rows("a", [10 + i])).committed
    return str(path)


def _commits(path: str) -> dict[int, dict]:
    """The table's commits by version number, as the engine's log records them."""
    return {int(h["version"]): h for h in DeltaTable(path).history()}


def _report(run, task_id: str) -> WriteReport:
    return WriteReport.from_dict(run.task(task_id).xcom["occflow_report"])


def test_failed_skipped_and_retried_writes_each_push_their_report(run_dag, tmp_path):
    proto_t = _table(tmp_path / "proto_t")
    compact_t = _table(tmp_path / "compact_t", small_files=4)
    merge_t = _table(tmp_path / "merge_t")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
def delete_after_a_protocol_change(table, snapshot, partition, commit, context):
    other = DeltaRsTable({proto_t!r}).set_properties({{"delta.enableDeletionVectors": "true"}})
    assert other.committed, other
    return table.delete(Where.equals(id=2), partition=partition, snapshot=snapshot, commit=commit)

def optimize_after_a_delete(table, snapshot, partition, commit, context):
    other = DeltaRsTable({compact_t!r}).delete(partition=partition)
    assert other.committed, other
    return table.optimize(partition=partition, snapshot=snapshot, commit=commit)

def merge_rows(context, snapshot):
    mark = ROOT / "merge-raced"
    if not mark.exists():
        mark.write_text("raced")
        assert DeltaRsTable({merge_t!r}).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}})).committed
    return pa.table({{"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]}})

with DAG("write_flow_ends", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="delete", table="proto_t", path={proto_t!r}, operation="delete",
                       partitions={{"ds": "a"}}, job=delete_after_a_protocol_change, retries=2,
                       on_failure_callback=alert)
    DeltaWriteOperator(task_id="compact", table="compact_t", path={compact_t!r}, operation="optimize",
                       partitions={{"ds": "a"}}, job=optimize_after_a_delete)
    DeltaWriteOperator(task_id="merge", table="merge_t", path={merge_t!r}, operation="merge",
                       partitions={{"ds": "a"}}, data=merge_rows, merge_keys=["id"])
''')
    # Failed fast: one try, no retry, its report says so and names the protocol change it lost to.
    assert run.task("delete").state == "failed" and len(run.task("delete").tries) == 1
    failed = _report(run, "delete")
    assert failed.status is WriteStatus.FAILED and not failed.committed and failed.attempts == 1
    [lost] = failed.lost
    assert lost.kind is ConflictKind.PROTOCOL_CHANGED and lost.action is Action.FAIL
    commits = _commits(proto_t)
    assert commits[1]["operation"] == "SET TBLPROPERTIES"  # the engine's log: v1 is the protocol change
    assert lost.winner is not None and lost.winner.version == 1 and lost.winner.operation == "SET TBLPROPERTIES"
    assert max(commits) == 1  # the DELETE wrote nothing
    assert failed.partitions == ({"ds": "a"},)
    # The notifier's structured dict: the winner with its version, and the partitions.
    conflict = json.loads((tmp_path / "conflict-delete.json").read_text())
    assert conflict["kind"] == "protocol_changed" and conflict["status"] == "failed"
    assert conflict["winning_commit"]["version"] == 1 and conflict["winning_commit"]["operation"] == "SET TBLPROPERTIES"
    assert "ds" in str(conflict["partitions"]) and "a" in str(conflict["partitions"])

    # Skipped: the compaction's files were deleted under it; nothing left to do.
    assert run.task("compact").state == "skipped"
    skipped = _report(run, "compact")
    assert skipped.status is WriteStatus.SKIPPED and not skipped.committed
    [lost] = skipped.lost
    assert lost.kind is ConflictKind.CONCURRENT_DELETE_READ and lost.action is Action.SKIP
    commits = _commits(compact_t)
    delete_version = max(commits)
    assert commits[delete_version]["operation"] == "DELETE" and delete_version == 4  # create + 3 appends + delete
    assert lost.winner is not None and lost.winner.version == delete_version and lost.winner.operation == "DELETE"

    # Retried in the task, then committed: the report is the return value and occflow_report.
    assert run.task("merge").state == "success"
    committed = _report(run, "merge")
    assert WriteReport.from_dict(run.task("merge").xcom["return_value"]) == committed
    assert committed.status is WriteStatus.COMMITTED and committed.attempts == 2
    [lost] = committed.lost
    assert lost.kind is ConflictKind.CONCURRENT_APPEND and lost.action is Action.RETRY
    commits = _commits(merge_t)
    assert commits[1]["operation"] == "WRITE" and lost.winner is not None and lost.winner.version == 1
    assert committed.version == 2 and commits[2]["operation"] == "MERGE"
    assert committed.wasted_seconds > 0


def test_an_optimize_beside_a_concurrent_compaction_fails_naming_both_commits(run_dag, tmp_path, capfd):
    """delta-rs lets both compactions of the same files commit (delta-io/delta-rs#3982): the
    task committed, yet fails loudly; the table holds the partition's rows twice."""
    path = _table(tmp_path / "twice_t", small_files=4)
    before = DeltaTable(path).to_pyarrow_table()
    before_a = before.column("ds").to_pylist().count("a")
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
def optimize_beside_another(table, snapshot, partition, commit, context):
    # Another compaction of the same files, planned on its own snapshot, commits first.
    other = DeltaRsTable({path!r})
    assert other.optimize(partition=partition, snapshot=other.load()).committed
    return table.optimize(partition=partition, snapshot=snapshot, commit=commit)

with DAG("write_flow_twice", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact", table="twice_t", path={path!r}, operation="optimize",
                       partitions={{"ds": "a"}}, job=optimize_beside_another)
''')
    out = capfd.readouterr()
    log = out.out + out.err
    assert run.task("compact").state == "failed"
    commits = _commits(path)
    assert [commits[v]["operation"] for v in (4, 5)] == ["OPTIMIZE", "OPTIMIZE"] and max(commits) == 5
    # The engine's rows: partition a's rows are there twice, b's once.
    after = DeltaTable(path).to_pyarrow_table()
    assert after.column("ds").to_pylist().count("a") == 2 * before_a and after.num_rows == before.num_rows + before_a
    assert sorted(after.filter(pa.compute.equal(after.column("ds"), "a")).column("id").to_pylist()) == sorted(
        before.filter(pa.compute.equal(before.column("ds"), "a")).column("id").to_pylist() * 2)
    report = _report(run, "compact")
    assert report.status is WriteStatus.COMMITTED and report.version == 5 and report.conflicts == ()
    assert re.search(r"optimize on twice_t committed \(version 5\) beside a concurrent compaction of the same "
                     r"files: versions 4 \(OPTIMIZE\) and 5 \(OPTIMIZE\)", log), log[-3000:]


def test_two_unsafe_optimizes_of_one_table_without_a_dependency_fail_before_writing(run_dag, tmp_path, capfd):
    path = _table(tmp_path / "unsafe_t", small_files=4)
    version = DeltaTable(path).version()
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
with DAG("write_flow_unsafe", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    for name in ("compact_1", "compact_2"):
        DeltaWriteOperator(task_id=name, table="unsafe_t", path={path!r}, operation="optimize",
                           admission=False, allow_unsafe_concurrency=True)
''')
    out = capfd.readouterr()
    log = out.out + out.err
    assert run.task("compact_1").state == "failed" and run.task("compact_2").state == "failed"
    for task_id, other in (("compact_1", "compact_2"), ("compact_2", "compact_1")):
        assert re.search(rf"AirflowFailException: {task_id}: allow_unsafe_concurrency=True, yet task "
                         rf"'{other}' of this DAG runs optimize on the same table with no dependency between "
                         r"them: .*; nothing was written", log), task_id
    assert DeltaTable(path).version() == version  # nothing was written
    for task_id in ("compact_1", "compact_2"):
        # Refused before any attempt: still a report, naming the write and why.
        refused = _report(run, task_id)
        assert refused.status is WriteStatus.FAILED and refused.attempts == 0 and refused.operation == "optimize"
        assert "before its first attempt" in (refused.error or "") and "allow_unsafe_concurrency" in refused.error


def test_an_unsafe_optimize_alone_in_its_dag_runs(run_dag, tmp_path):
    """The opt-in refuses a corrupting partner in the same DAG, not the task itself."""
    path = _table(tmp_path / "alone_t", small_files=4)
    version = DeltaTable(path).version()
    run = run_dag(HEAD.format(root=str(tmp_path)) + f'''
with DAG("write_flow_unsafe_alone", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact", table="alone_t", path={path!r}, operation="optimize",
                       admission=False, allow_unsafe_concurrency=True)
''')
    assert run.task("compact").state == "success"
    assert DeltaTable(path).version() == version + 1  # the compaction committed, once

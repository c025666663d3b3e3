"""The observed footprint in the operator's report step, under real Airflow (``dag.test()``) on
real delta-rs tables: the write report (XCom), the task log, the metric and the alert.

The oracle for what a commit touched is the Delta log's JSON commit file, read here with
``json``; the declarations are the DAG's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow


def _log_partitions(path: str, version: int) -> set[str]:
    """Oracle: partitions of every file commit ``version`` added or removed."""
    found = set()
    for line in (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        for kind in ("add", "remove"):
            if kind in action:
                values = action[kind]["partitionValues"]
                found.add("/".join(f"{k}={values[k]}" for k in sorted(values)))
    return found


def test_a_write_beyond_its_declaration_is_reported_in_xcom_log_metric_and_the_winners_alert(
    run_dag, tmp_path, capfd, stats_capture
):
    """``purge`` declares ds=1 but deletes ``id >= 5`` (rows of both partitions); ``fix``
    declares ds=2 and names it; ``merge`` (a job occflow does not run) loses to purge's commit,
    and its alert says the winner went beyond its declaration."""
    path = str(tmp_path / "events")
    job = tmp_path / "merge_job.py"
    # Delta's ConcurrentAppendException as a Spark driver prints it, naming purge's commit.
    job.write_text(
        "import sys\n"
        "print(': io.delta.exceptions.ConcurrentAppendException: Files were added to partition "
        "[ds=2] by a concurrent update. Please try the operation again.', file=sys.stderr)\n"
        "print('Conflicting commit: {\"version\":1,\"timestamp\":1732219272000,\"operation\":\"DELETE\","
        "\"operationParameters\":{\"predicate\":\"id >= 5\"},\"readVersion\":0}', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    run = run_dag(
        f'''
import sys
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import Compare, DeltaRsTable, Where
from occflow.notifications import ConflictNotifier
from occflow.operators.delta import DeltaWriteOperator

PATH = {path!r}

def create():
    rows = pa.table({{"id": [1, 2, 5, 3, 4, 6], "ds": ["1", "1", "1", "2", "2", "2"], "v": [0] * 6}})
    assert DeltaRsTable(PATH).create(rows, partition_by=["ds"]).committed

def purge_late_ids(table, snapshot, partition, commit, context):
    # The declared partition is not in the predicate: delta-rs rewrites files of both partitions.
    return table.delete(Where((Compare("id", ">=", 5),)), snapshot=snapshot, commit=commit)

with DAG("observed_footprint", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    purge = DeltaWriteOperator(task_id="purge", table="events", path=PATH, operation="delete",
                               partitions={{"ds": "1"}}, job=purge_late_ids)
    fix = DeltaWriteOperator(task_id="fix", table="events", path=PATH, operation="update",
                             partitions={{"ds": "2"}}, where={{"id": 4}}, set_values={{"v": 9}})
    merge = BashOperator(task_id="merge", bash_command=f"{{sys.executable}} {str(job)}",
                         on_failure_callback=ConflictNotifier(table="events", operation="update",
                                                              partition={{"ds": "2"}}))
    setup >> purge >> fix >> merge
'''
    )
    purge = run.task("purge").xcom["return_value"]
    fix = run.task("fix").xcom["return_value"]
    assert purge["committed"] and purge["version"] == 1
    assert fix["committed"] and fix["version"] == 2
    assert run.task("merge").state == "failed"

    # XCom: the observed footprint agrees with the Delta log; the excess is ds=2.
    assert _log_partitions(path, 1) == {"ds=1", "ds=2"}
    observed = purge["observed_footprint"]
    assert set(observed["partitions_removed"]) | set(observed["partitions_added"]) == {"ds=1", "ds=2"}
    assert observed["version_or_snapshot"] == 1 and observed["operation"] == "DELETE"
    assert observed["whole_table"] is True
    exceeded = purge["footprint_exceeded"]
    assert exceeded["partitions"] == ["ds=2"] and exceeded["declared"] == ["ds=1"]
    assert exceeded["read_whole_table"] is True
    # The accurate declaration: observed, and nothing beyond it.
    assert _log_partitions(path, 2) == {"ds=2"}
    assert fix["observed_footprint"]["partitions_removed"] == ["ds=2"]
    assert fix["footprint_exceeded"] is None

    out = capfd.readouterr()
    log = out.out + out.err
    assert "footprint exceeded: delete on events declared partition(s) ds=1 but touched partition(s) ds=2" in log
    assert "make the write's condition name its partition" in log
    # The alert of the task that lost to purge's commit names the excess and the advice.
    assert "winning commit: version 1, operation DELETE" in log
    assert "made by task purge" in log
    assert "the winner went beyond its declaration: delete on events declared partition(s) ds=1" in log

    # One metric, for purge only, tagged by table and operation.
    calls = stats_capture.named("occflow.footprint_exceeded.")
    assert [(c.stat, c.tags["table"], c.tags["operation"]) for c in calls] == [
        ("occflow.footprint_exceeded.events", "events", "delete")
    ]

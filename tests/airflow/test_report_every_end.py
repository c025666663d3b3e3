"""Every end of a write publishes its report, also the ends the flow does not choose: Airflow's
``execution_timeout`` inside the engine call, a fail or a skip raised by the user's own code, and
a declaration that renders to nothing (before the flow exists). Real delta-rs tables under
``dag.test()``; what is checked is the ``occflow_report`` XCom each try pushed, and the table's
own log (nothing was written by any of them).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from occflow.core.report import WriteReport, WriteStatus
from occflow.engines.deltars import DeltaRsTable

pytestmark = pytest.mark.airflow


def _table(path: Path) -> str:
    table = DeltaRsTable(str(path))
    rows = pa.table({"id": pa.array([1], pa.int64()), "ds": ["a"], "v": pa.array([0], pa.int64())})
    assert table.create(rows, partition_by=["ds"]).committed
    return str(path)


def test_timeouts_user_fails_and_skips_and_invalid_declarations_each_publish_a_report(run_dag, tmp_path):
    path = _table(tmp_path / "t")
    run = run_dag(f'''
import datetime
import time
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from occflow.operators.delta import DeltaWriteOperator

def slow(context, snapshot):
    time.sleep(30)  # inside the attempt: execution_timeout fires here

def refuse(context, snapshot):
    raise AirflowFailException("the staged file is corrupt")

def nothing_today(context, snapshot):
    raise AirflowSkipException("no rows staged for today")

with DAG("every_end", schedule=None, start_date=pendulum.datetime(2024, 1, 1), params={{"day": ""}}):
    DeltaWriteOperator(task_id="timed_out", table="t", path={path!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=slow, execution_timeout=datetime.timedelta(seconds=3))
    DeltaWriteOperator(task_id="user_fail", table="t", path={path!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=refuse)
    DeltaWriteOperator(task_id="user_skip", table="t", path={path!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=nothing_today)
    DeltaWriteOperator(task_id="invalid", table="t", path={path!r}, operation="insert_into",
                       partitions={{"ds": "{{{{ params.day }}}}"}}, data=refuse)
''')
    reports = {t: WriteReport.from_dict(run.task(t).xcom["occflow_report"])
               for t in ("timed_out", "user_fail", "user_skip", "invalid")}
    timed_out = reports["timed_out"]
    assert run.task("timed_out").state == "failed"
    assert timed_out.status is WriteStatus.FAILED and "timed out" in (timed_out.error or ""), timed_out
    assert timed_out.attempts == 1 and timed_out.table.endswith("t")
    assert reports["user_fail"].status is WriteStatus.FAILED
    assert "the staged file is corrupt" in (reports["user_fail"].error or "")
    assert run.task("user_skip").state == "skipped"
    assert reports["user_skip"].status is WriteStatus.SKIPPED
    assert "no rows staged for today" in (reports["user_skip"].error or "")
    invalid = reports["invalid"]
    assert run.task("invalid").state == "failed"
    assert invalid.status is WriteStatus.FAILED and invalid.attempts == 0
    assert invalid.operation == "insert_into" and "before its first attempt" in (invalid.error or "")
    assert "invalid partition value '' for 'ds'" in (invalid.error or ""), invalid.error
    assert DeltaTable(path).version() == 0  # none of them wrote anything

"""What the "Table writes" view shows is what happened, read through its own FastAPI app.

A real ``dag.test()`` run on real delta-rs tables ends writes three ways: a declaration that
renders to no partition value (refused before its first attempt), a job that fails with an
ordinary error (not a conflict) on its first try and commits on its retry, and a plain commit.
The oracles are not the view's code: Airflow's own record of every try (state, try number), the
table's own commit log (delta-rs history), and the error text the job raised.

Each try's report is kept by the try itself in Airflow's task state store (Airflow clears the
XComs of a task instance when its next try starts): ``OccflowWriteOperator.publish_report``
writes it under ``occflow_report.try.<n>``. Two tasks, ``flaky`` and ``shipped``, fail on their
first try and commit on their retry.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from occflow.engines.deltars import DeltaRsTable

pytestmark = pytest.mark.airflow

DAG_ID = "ui_every_try"
FLAKY_ERROR = "staging bucket not mounted yet"


def _table(path: Path) -> str:
    rows = pa.table({"id": pa.array([1], pa.int64()), "ds": ["a"], "v": pa.array([0], pa.int64())})
    assert DeltaRsTable(str(path)).create(rows, partition_by=["ds"]).committed
    return str(path)


@pytest.fixture(scope="module")
def ended(tmp_path_factory, airflow_home):
    """One real run: each way a write can end, and the view's app over what it left."""
    tmp = tmp_path_factory.mktemp("every_try")
    flaky, shipped, plain, refused = (_table(tmp / n) for n in ("flaky", "shipped", "plain", "refused"))
    mp = pytest.MonkeyPatch()
    mp.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{tmp / 'leases.db'}")
    from airflow.dag_processing.dagbag import DagBag

    dag_file = airflow_home / "dags" / "test_ui_every_try_dag.py"
    dag_file.write_text(f'''
import datetime
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator
from occflow.operators.exactly_once import try_number
from occflow.plugins.tries import report_key

TMP = pathlib.Path({str(tmp)!r})


def rows(context, snapshot):
    return pa.table({{"id": pa.array([2], pa.int64()), "ds": ["a"], "v": pa.array([1], pa.int64())}})

def flaky_rows(context, snapshot):
    mark = TMP / ("first-try-" + context["ti"].task_id)
    if not mark.exists():  # the first try fails with an ordinary error, the retry writes
        mark.touch()
        raise OSError({FLAKY_ERROR!r})
    return rows(context, snapshot)

with DAG("{DAG_ID}", schedule=None, start_date=pendulum.datetime(2024, 1, 1), params={{"day": ""}}):
    DeltaWriteOperator(task_id="flaky", table="lake.flaky", path={flaky!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=flaky_rows, retries=1,
                              retry_delay=datetime.timedelta(seconds=1))
    DeltaWriteOperator(task_id="shipped", table="lake.shipped", path={shipped!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=flaky_rows, retries=1,
                       retry_delay=datetime.timedelta(seconds=1))
    DeltaWriteOperator(task_id="plain", table="lake.plain", path={plain!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=rows)
    DeltaWriteOperator(task_id="refused", table="lake.refused", path={refused!r}, operation="insert_into",
                       partitions={{"ds": "{{{{ params.day }}}}"}}, data=rows)
''')
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[DAG_ID].test()
    from airflow.api_fastapi.app import create_auth_manager
    from fastapi.testclient import TestClient

    create_auth_manager().init()
    from occflow.plugins.app import create_app

    with TestClient(create_app()) as client:
        yield {"run_id": run.run_id, "client": client,
               "paths": {"flaky": flaky, "shipped": shipped, "plain": plain, "refused": refused}}
    mp.undo()


def _headers() -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    jwt = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="every-try-viewer", role="viewer"))
    return {"Authorization": f"Bearer {jwt}"}


def _airflow_tries(run_id: str, task_id: str) -> dict[int, str]:
    """Airflow's own record of a task's tries: try number -> state (history and the current)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tries = {h.try_number: str(h.state) for h in session.scalars(select(TaskInstanceHistory).where(
            TaskInstanceHistory.dag_id == DAG_ID, TaskInstanceHistory.run_id == run_id,
            TaskInstanceHistory.task_id == task_id))}
        ti = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)).one()
        tries[ti.try_number] = str(getattr(ti.state, "value", ti.state))
    return tries


def _page(ended) -> str:
    response = ended["client"].get("/", params={"dag_id": DAG_ID, "run_id": ended["run_id"]}, headers=_headers())
    assert response.status_code == 200, response.text
    return response.text


def _timeline(ended) -> dict:
    response = ended["client"].get("/api/timeline", params={"dag_id": DAG_ID, "run_id": ended["run_id"]},
                                   headers=_headers())
    assert response.status_code == 200, response.text
    return response.json()


def _each_try_keeps_its_own_report(ended, task_id: str) -> None:
    writes = [e for e in _timeline(ended)["entries"] if e["kind"] == "write" and e["task_id"] == task_id]
    rows = {w["try_number"]: w for w in writes}
    airflow = _airflow_tries(ended["run_id"], task_id)
    assert sorted(rows) == sorted(airflow) == [1, 2]  # one row per try Airflow ran
    assert airflow[2] == "success" and airflow[1] in ("failed", "up_for_retry")
    first, second = rows[1], rows[2]
    # The first try's report, not the second's in its place.
    assert first["report"] is True, first
    assert first["committed"] is False and first["status"] == "failed" and first["version"] is None
    assert FLAKY_ERROR in (first["reason"] or ""), first
    # The one commit the table's own log holds after its creation (v0) is the second try's.
    history = DeltaTable(ended["paths"][task_id]).history()
    assert [h["version"] for h in history if h["version"] > 0] == [second["version"]] == [1]
    assert second["committed"] is True and second["reason"] is None


def test_each_try_of_a_retried_write_is_a_row_with_its_own_report(ended):
    _each_try_keeps_its_own_report(ended, "flaky")


def test_the_shipped_operator_keeps_every_try_s_report(ended):
    _each_try_keeps_its_own_report(ended, "shipped")


def test_a_failure_that_is_not_a_conflict_is_failed_not_lost(ended):
    body = _timeline(ended)
    first = next(e for e in body["entries"] if e.get("task_id") == "flaky" and e.get("try_number") == 1)
    [attempt] = first["conflicts"]
    assert attempt["kind"] == "not_a_conflict" and attempt["outcome"] == "failed"
    assert FLAKY_ERROR in (attempt["error"] or "")
    assert first["conflict_count"] == 0 and first["failure_count"] == 1
    page = _page(ended)
    assert 'data-outcome="failed"' in page and "attempt 1 failed:" in page
    assert "lost:" not in page  # nothing in this run lost a conflict


def test_a_write_refused_before_its_first_attempt_is_a_row_with_its_table_operation_and_reason(ended):
    body = _timeline(ended)
    [refused] = [e for e in body["entries"] if e.get("task_id") == "refused"]
    assert _airflow_tries(ended["run_id"], "refused") == {1: "failed"}
    assert refused["table"] == "lake.refused" and refused["operation"] == "insert_into"
    assert refused["status"] == "failed" and refused["refused"] is True and refused["attempts"] == 0
    assert "before its first attempt" in refused["reason"] and "'ds'" in refused["reason"], refused["reason"]
    assert DeltaTable(ended["paths"]["refused"]).version() == 0  # nothing was written
    page = _page(ended)
    assert 'data-testid="refused"' in page and 'data-table="lake.refused"' in page


def test_every_try_counts_in_the_totals_as_airflow_ended_it(ended):
    totals = _timeline(ended)["totals"]
    tries = {task: _airflow_tries(ended["run_id"], task) for task in ("flaky", "shipped", "plain", "refused")}
    states = [state for per_task in tries.values() for state in per_task.values()]
    assert totals["writes"] == len(states) == 6
    assert totals["committed"] == states.count("success") == 3
    # Every try that did not commit counts as failed (the refused one by its report).
    assert totals["failed"] == len(states) - states.count("success") == 3
    assert totals["refused"] == 1 and totals["conflicts"] == 0
    assert totals["failures"] == 2  # the failed attempts of flaky's and shipped's first tries, kept

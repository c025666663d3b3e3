"""Granted but not started: the seconds from a write's lease grant to its first attempt, in its
report and in the "Table writes" view.

The report is real: a ``DeltaWriteOperator`` run by Airflow's ``dag.test()`` takes its lease in
a real SQLite lease store that records its history; its data callable (called inside the first
attempt) notes the time. The oracles are the store's own grant event and that note: the figure
is at least 0 and at most the time from the grant to the data callable's call.
"""

from __future__ import annotations

import json

import pytest

from occflow.core.report import WriteReport
from occflow.leases import LeaseStore

pytestmark = pytest.mark.airflow

DAG_ID = "ui_grant_to_start"
DAG = '''
import json, pathlib, time
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

PATH, NOTE, STORE = {path!r}, {note!r}, {store!r}

def rows(context, snapshot):
    # Inside the first attempt: after the lease was granted and the attempt started.
    pathlib.Path(NOTE).write_text(json.dumps({{"called_at": time.time()}}))
    return pa.table({{"id": [1, 2], "ds": ["a", "a"]}})

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="ui.grant_to_start", path=PATH, operation="insert_into",
                       partitions={{"ds": "a"}}, data=rows, lease_store_url=STORE)
'''


@pytest.fixture(scope="module")
def admitted(tmp_path_factory, airflow_home, stored_xcom):
    from airflow.dag_processing.dagbag import DagBag

    from occflow.engines.deltars import DeltaRsTable

    tmp = tmp_path_factory.mktemp("grant")
    path, store_url = str(tmp / "t"), f"sqlite:///{tmp / 'leases.db'}"
    import pyarrow as pa

    assert DeltaRsTable(path).create(pa.table({"id": [0], "ds": ["a"]}), partition_by=["ds"]).committed
    mp = pytest.MonkeyPatch()
    mp.setenv("OCCFLOW_LEASE_HISTORY", "1")
    mp.setenv("OCCFLOW_LEASE_STORE_URL", store_url)
    dag_file = airflow_home / "dags" / "test_ui_grant_to_start_dag.py"
    dag_file.write_text(DAG.format(path=path, note=str(tmp / "note.json"), store=store_url, dag_id=DAG_ID))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[DAG_ID].test()
    assert str(getattr(run.state, "value", run.state)) == "success"
    report = stored_xcom(DAG_ID, run.run_id, "append", "occflow_report")
    store = LeaseStore.from_url(store_url)
    yield {"report": report, "store": store, "called_at": json.loads((tmp / "note.json").read_text())["called_at"],
           "run_id": run.run_id}
    store.dispose()
    mp.undo()


def test_report_carries_the_seconds_from_the_grant_to_the_first_attempt(admitted):
    report = WriteReport.from_dict(admitted["report"])
    grants = [e for e in admitted["store"].history_events() if e["kind"] == "grant" and e["fence"] == report.fence]
    assert len(grants) == 1, grants
    # SQLite's store reads this machine's clock: the grant and the note are on one clock.
    upper = admitted["called_at"] - grants[0]["at"]
    assert report.grant_to_start_seconds is not None
    assert 0.0 <= report.grant_to_start_seconds <= upper + 0.05, (report.grant_to_start_seconds, upper)
    # The try takes its lease itself: only the engine's start-up and the history read lie between.
    assert report.grant_to_start_seconds < 5.0


def test_a_report_from_before_the_field_still_reads_and_a_bad_value_is_named():
    from occflow.core.report import MalformedReport

    old = {"table": "db.t", "operation": "insert_into", "attempts": 1, "conflicts": [], "committed": True}
    assert WriteReport.from_dict(old).grant_to_start_seconds is None
    with pytest.raises(MalformedReport, match="grant_to_start_seconds"):
        WriteReport.from_dict({**old, "grant_to_start_seconds": "soon"})
    again = WriteReport.from_dict({**old, "grant_to_start_seconds": 0.25})
    assert WriteReport.from_dict(again.to_dict()).grant_to_start_seconds == 0.25


def test_view_shows_the_granted_but_not_started_time_of_the_write(admitted):
    from airflow.api_fastapi.app import create_auth_manager, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    create_auth_manager().init()
    from occflow.plugins.app import create_app

    jwt = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="v", role="viewer"))
    headers = {"Authorization": f"Bearer {jwt}"}
    seconds = admitted["report"]["grant_to_start_seconds"]
    with TestClient(create_app()) as client:
        body = client.get("/api/timeline", headers=headers, params={"dag_id": DAG_ID}).json()
        [write] = [e for e in body["entries"] if e["kind"] == "write"]
        assert write["grant_to_start_seconds"] == seconds and write["lease"]["fence"] == admitted["report"]["fence"]
        assert body["totals"]["grant_to_start_seconds"] == pytest.approx(seconds)
        page = client.get("/", headers=headers, params={"dag_id": DAG_ID})
    assert page.status_code == 200
    assert f'data-testid="grant-to-start" data-seconds="{seconds}"' in page.text
    assert f"granted {seconds:.1f} s before start" in page.text
    assert 'data-testid="total-grant-to-start"' in page.text

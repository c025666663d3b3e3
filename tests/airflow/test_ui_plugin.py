"""The "Table writes" plugin app (occflow.plugins) over real data, through FastAPI's TestClient.

The data is real: a ``DeltaWriteOperator`` MERGE run by Airflow's ``dag.test()`` loses to a
concurrent append on delta-rs (a second writer commits between the operator's snapshot and its
commit), is retried and commits; its lease is granted and released by a real SQLite lease
store recording its history; the report is the XCom the operator pushed. A second lease and a
waiting request are taken in the same store by this test. Users are the simple auth manager's
(Airflow's default), with JWTs signed by the auth manager itself; the headless-browser test
against a real api-server is test_ui_plugin_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.leases import Holder, LeaseRequest, LeaseStore

pytestmark = pytest.mark.airflow

DAG_ID = "ui_merge_race"
DAG = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

PATH, MARK, STORE = {path!r}, {mark!r}, {store!r}

def create():
    DeltaRsTable(PATH).create(
        pa.table({{"id": [1, 2, 3, 4], "ds": ["a", "a", "b", "b"], "v": [0, 0, 0, 0]}}), partition_by=["ds"]
    )

def source(context, snapshot):
    mark = pathlib.Path(MARK)
    if not mark.exists():  # a second writer commits into partition a once, after the snapshot
        mark.write_text("raced")
        assert DeltaRsTable(PATH).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}})).committed
    return pa.table({{"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]}})

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = DeltaWriteOperator(
        task_id="merge", table="ui.events", path=PATH, operation="MERGE INTO", partitions={{"ds": "a"}},
        data=source, merge_keys=["id"], lease_store_url=STORE,
    )
    setup >> merge
'''


@pytest.fixture(scope="module")
def raced(tmp_path_factory, airflow_home, stored_xcom):
    """One real run (module-wide: it is the slow part), its store and its report."""
    tmp = tmp_path_factory.mktemp("ui")
    store_url = f"sqlite:///{tmp / 'leases.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("OCCFLOW_LEASE_HISTORY", "1")
    mp.setenv("OCCFLOW_LEASE_STORE_URL", store_url)
    from airflow.dag_processing.dagbag import DagBag

    dag_file = airflow_home / "dags" / "test_ui_plugin_dag.py"
    dag_file.write_text(DAG.format(path=str(tmp / "events"), mark=str(tmp / "raced"), store=store_url, dag_id=DAG_ID))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags[DAG_ID]
    run = dag.test()
    assert str(getattr(run.state, "value", run.state)) == "success"
    report = stored_xcom(DAG_ID, run.run_id, "merge", "return_value")
    store = LeaseStore.from_url(store_url)
    yield {"run_id": run.run_id, "report": report, "store": store, "url": store_url, "path": str(tmp / "events")}
    store.dispose()
    mp.undo()


@pytest.fixture(scope="module")
def client(raced):
    from airflow.api_fastapi.app import create_auth_manager
    from fastapi.testclient import TestClient

    create_auth_manager().init()
    from occflow.plugins.app import create_app

    with TestClient(create_app()) as c:
        yield c


def token(role: str | None, username: str | None = None) -> dict[str, str]:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    jwt = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=username or f"a-{role}", role=role))
    return {"Authorization": f"Bearer {jwt}"}


ROUTES = ["/", "/api/tables", "/api/timeline",
          f"/api/write?dag_id={DAG_ID}&run_id=r&task_id=merge", f"/write?dag_id={DAG_ID}&run_id=r&task_id=merge"]


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_refuses_a_request_without_a_token_or_with_a_forged_one(client, route):
    assert client.get(route).status_code == 401
    forged = {"Authorization": "Bearer eyJhbGciOiJIUzUxMiJ9.eyJzdWIiOiJ4Iiwicm9sZSI6ImFkbWluIn0.AAAA"}
    assert client.get(route, headers=forged).status_code == 403
    assert client.post("/api/leases/x/release", headers={"X-Occflow-Action": "release"}).status_code == 401
    # No unauthenticated schema either.
    assert client.get("/openapi.json").status_code == 404
    assert client.get("/docs").status_code == 404


def test_timeline_shows_the_write_its_lost_attempt_and_its_lease(client, raced):
    report, store = raced["report"], raced["store"]
    body = client.get("/api/timeline", headers=token("viewer")).json()
    writes = [e for e in body["entries"] if e["kind"] == "write" and e["dag_id"] == DAG_ID]
    assert [w["task_id"] for w in writes] == ["merge"]
    write = writes[0]
    assert write["run_id"] == raced["run_id"] and write["state"] == "success" and write["committed"] is True
    # delta-rs: create = v0, the competitor's append = v1 (the winner), the retried MERGE = v2.
    assert write["version"] == 2 and write["attempts"] == 2
    [lost] = write["conflicts"]
    assert lost["attempt"] == 1 and lost["kind"] == "concurrent_append" and lost["action"] == "retry"
    assert lost["winner"] == "v1 WRITE"
    assert write["wasted_seconds"] == report["wasted_seconds"] > 0
    # The lease: the store's own grant and release events for the fence the report carries.
    # The store files a delta-rs table under its location (the path, symlinks resolved), and the
    # report says which key that is.
    from occflow.core.identifiers import canonical_location

    key = canonical_location(str(Path(raced["path"]).resolve()))
    assert report["table_key"] == key
    events = store.history_events(key)
    grant = next(e for e in events if e["kind"] == "grant" and e["fence"] == report["fence"])
    release = next(e for e in events if e["kind"] == "release" and e["lease_id"] == grant["lease_id"])
    lease = write["lease"]
    assert lease["lease_id"] == grant["lease_id"] and lease["ended_by"] == "release"
    assert lease["held_seconds"] == pytest.approx(release["at"] - grant["at"], abs=1e-3)
    assert lease["waited_seconds"] == 0.0  # admitted at once: it never queued
    assert body["totals"]["conflicts"] >= 1 and body["history"] is True


def test_filters_by_dag_table_and_run(client, raced):
    viewer = token("viewer")

    def tasks(**params):
        body = client.get("/api/timeline", headers=viewer, params=params).json()
        return [(e["dag_id"], e["task_id"]) for e in body["entries"] if e["kind"] == "write"]

    assert tasks(dag_id=DAG_ID) == [(DAG_ID, "merge")]
    assert tasks(dag_id="no_such_dag") == []
    assert (DAG_ID, "merge") in tasks(table="UI.Events")  # any spelling of the table
    assert tasks(table="ui.other", dag_id=DAG_ID) == []
    assert tasks(run_id=raced["run_id"]) == [(DAG_ID, "merge")]
    assert tasks(run_id="manual__no_such_run") == []
    assert client.get("/api/timeline", headers=viewer, params={"table": "a;b c"}).status_code == 400


def test_task_instance_link_finds_its_write(client, raced):
    viewer = token("viewer")
    # Not mapped: the UI leaves "{MAP_INDEX}" in the link.
    params = {"dag_id": DAG_ID, "run_id": raced["run_id"], "task_id": "merge", "map_index": "{MAP_INDEX}"}
    write = client.get("/api/write", headers=viewer, params=params).json()
    assert write["task_id"] == "merge" and write["conflicts"][0]["kind"] == "concurrent_append"
    page = client.get("/write", headers=viewer, params=params)
    assert page.status_code == 200 and 'class="focus" id="focus"' in page.text
    missing = client.get("/api/write", headers=viewer, params={**params, "task_id": "create"})
    assert missing.status_code == 404


def test_data_of_dags_the_user_may_not_read_is_left_out(raced):
    from airflow.utils.session import create_session

    from occflow.plugins import data

    with create_session() as session:
        everything = data.timeline(raced["store"], session, lambda dag: True, data.Filters())
        hidden = data.timeline(raced["store"], session, lambda dag: dag != DAG_ID, data.Filters())
    assert any(e.get("dag_id") == DAG_ID for e in everything["entries"])
    assert not any(e.get("dag_id") == DAG_ID for e in hidden["entries"])


def test_live_leases_and_queue_and_release_needs_edit_permission(client, raced):
    store = raced["store"]
    holder = Holder(dag_id=DAG_ID, task_id="rewrite", run_id="manual__ui", try_number=1)
    held = store.try_acquire(LeaseRequest.create("ui.events", "insert_overwrite", "delta-rs", [{"ds": "a"}], holder=holder))
    assert held is not None
    waiter = LeaseRequest.create("ui.events", "delete", "delta-rs", [{"ds": "a"}],
                                 holder=Holder(dag_id=DAG_ID, task_id="purge", run_id="manual__ui", try_number=1))
    assert store.try_acquire(waiter) is None  # it queues behind the overwrite
    try:
        viewer = token("viewer")
        [table] = client.get("/api/tables", headers=viewer, params={"table": "ui.events"}).json()["tables"]
        assert [(lease["lease_id"], lease["holder"]["task_id"], lease["fence"]) for lease in table["leases"]] == [
            (held.lease_id, "rewrite", held.fence)
        ]
        assert [(w["place"], w["request_id"], w["operation"]) for w in table["waiting"]] == [
            (1, waiter.request_id, "delete")
        ]
        page = client.get("/", headers=viewer, params={"table": "ui.events"}).text
        assert f'data-lease="{held.lease_id}"' in page and 'data-testid="waiting-row"' in page
        assert "data-release=" not in page  # a viewer is offered no release button

        release = f"/api/leases/{held.lease_id}/release"
        assert client.post(release, headers={**viewer, "X-Occflow-Action": "release"}).status_code == 403
        assert held.lease_id in {lease.lease_id for lease in store.leases("ui.events")}
        user = token("user")
        assert client.post(release, headers=user).status_code == 400  # no action header: no release
        assert "data-release=" in client.get("/", headers=user, params={"table": "ui.events"}).text
        done = client.post(release, headers={**user, "X-Occflow-Action": "release"})
        assert done.status_code == 200 and done.json()["released"] is True
        assert held.lease_id not in {lease.lease_id for lease in store.leases("ui.events")}
        assert client.post(release, headers={**user, "X-Occflow-Action": "release"}).status_code == 404
    finally:
        store.release(held)
        store.cancel(waiter)


# ----------------------------------------------------------------- issue 24: lease history by DAG

OTHER_DAG = "ui_other_team"
OTHER = '''
import pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    PythonOperator(task_id="noop", python_callable=lambda: None)
'''


class OneDagReader:
    """Airflow's simple auth manager, except that user ``reads-a`` may read DAG ``DAG_ID`` and
    nothing else: what FAB or Keycloak give a user with per-DAG permissions (neither is installed
    here). Every other user gets the simple auth manager's own answer."""

    USER = "reads-a"

    @staticmethod
    def install(monkeypatch: pytest.MonkeyPatch) -> None:
        from airflow.api_fastapi import app as airflow_app
        from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

        class Manager(SimpleAuthManager):
            def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
                if user.get_name() == OneDagReader.USER:  # a viewer of DAG A alone
                    return method == "GET" and details is not None and details.id == DAG_ID
                return super().is_authorized_dag(method=method, user=user, access_entity=access_entity,
                                                 details=details)

        manager = Manager()
        manager.init()
        monkeypatch.setattr(airflow_app._AuthManagerState, "instance", manager)


@pytest.fixture(scope="module")
def spans_of_two_dags(raced, airflow_home):
    """Leases of DAG A (``DAG_ID``), of a second DAG B, and of a script (no DAG), each granted and
    released in the run's store with its history recorded; DAG B is a real DAG in the metadata DB."""
    from airflow.dag_processing.dagbag import DagBag

    other_file = airflow_home / "dags" / "test_ui_plugin_other.py"
    other_file.write_text(OTHER.format(dag_id=OTHER_DAG))
    dag = DagBag(dag_folder=str(other_file)).dags[OTHER_DAG]
    assert str(getattr(dag.test().state, "value", "")) == "success"
    store = LeaseStore.from_url(raced["url"], history=True)
    holders = {
        "a": Holder(dag_id=DAG_ID, task_id="compact_a", run_id="manual__a", try_number=1),
        "b": Holder(dag_id=OTHER_DAG, task_id="compact_b", run_id="manual__b", try_number=1),
        "script": Holder(),
    }
    fences = {}
    for name, holder in holders.items():
        lease = store.try_acquire(LeaseRequest.create("ui.history", "optimize", "delta-rs", [{"ds": name}],
                                                      holder=holder))
        assert lease is not None
        fences[name] = lease.fence
        store.release(lease)
    # The oracle: the store's own events name the holder of each grant.
    grants = {e["fence"]: e for e in store.history_events("ui.history") if e["kind"] == "grant"}
    assert grants[fences["a"]]["dag_id"] == DAG_ID and grants[fences["b"]]["dag_id"] == OTHER_DAG
    assert grants[fences["script"]]["dag_id"] is None
    yield fences
    store.dispose()


def _span_fences(body: dict) -> dict[str, int]:
    return {e["fence"]: e["dag_id"] for e in body["entries"] if e["kind"] == "lease" and e["table"] == "ui.history"}


def test_lease_history_is_shown_only_for_the_dags_the_reader_may_read(client, spans_of_two_dags, monkeypatch):
    fences = spans_of_two_dags
    # A reader of every DAG (the simple auth manager's viewer) sees all three, each with its DAG.
    everything = client.get("/api/timeline", headers=token("viewer"), params={"table": "ui.history"}).json()
    assert _span_fences(everything) == {fences["a"]: DAG_ID, fences["b"]: OTHER_DAG, fences["script"]: None}
    # Under a DAG filter, a span now says which DAG it is of.
    only_b = client.get("/api/timeline", headers=token("viewer"), params={"table": "ui.history", "dag_id": OTHER_DAG})
    assert _span_fences(only_b.json()) == {fences["b"]: OTHER_DAG}

    OneDagReader.install(monkeypatch)
    reads_a = token("viewer", OneDagReader.USER)  # a viewer, but of DAG A only
    body = client.get("/api/timeline", headers=reads_a, params={"table": "ui.history"})
    assert body.status_code == 200, body.text
    # DAG B's lease is not this reader's to see, nor the script's (it may be any DAG's).
    assert _span_fences(body.json()) == {fences["a"]: DAG_ID}
    page = client.get("/", headers=reads_a, params={"table": "ui.history"})
    assert page.status_code == 200
    assert f'data-dag="{DAG_ID}"' in page.text and "compact_a" in page.text
    assert OTHER_DAG not in page.text and "compact_b" not in page.text
    spans = page.text.count('data-testid="lease-span-row"')
    assert spans == 1, page.text
    # Asking for DAG B by name is Airflow's own 403; its writes and spans never reach this reader.
    assert client.get("/api/timeline", headers=reads_a, params={"dag_id": OTHER_DAG}).status_code == 403
    assert client.get("/", headers=reads_a, params={"dag_id": OTHER_DAG}).status_code == 403
    # DAG A's own write is still this reader's.
    writes = [e for e in client.get("/api/timeline", headers=reads_a).json()["entries"] if e["kind"] == "write"]
    assert {w["dag_id"] for w in writes} == {DAG_ID}


def test_a_user_who_may_read_no_dag_is_refused(client, monkeypatch):
    OneDagReader.install(monkeypatch)
    response = client.get("/api/timeline", headers=token(None, "nobody"))
    assert response.status_code == 403 and "read at least one DAG" in response.text


@pytest.mark.parametrize("map_index", ["--1", "-2", "1.5", "x", "99999999999999999999", "2147483648", "٣"])
@pytest.mark.parametrize("route", ["/api/write", "/write", "/"])
def test_a_map_index_that_is_not_one_answers_400_naming_what_is_right(client, raced, route, map_index):
    params = {"dag_id": DAG_ID, "run_id": raced["run_id"], "task_id": "merge", "map_index": map_index}
    response = client.get(route, headers=token("viewer"), params=params)
    assert response.status_code == 400, response.text
    assert "map_index must be -1 (not mapped) or a whole number from 0 to 2147483647" in response.text


# ----------------------------------------------------------------- issue 31: trust only what is checked

CLAIMANT_DAG = "ui_claimant"
CLAIMANT = '''
import pendulum
from airflow.sdk import DAG, task

CLAIM = {claim!r}

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):

    @task
    def claims_merge():
        # Another task instance's report naming the raced write's table, store key and fence.
        return CLAIM

    @task
    def many_attempts():
        lost = [{{"attempt": i, "kind": "concurrent_append", "action": "retry", "reason": f"lost try {{i}}",
                  "seconds": 0.01, "winning_commit": {{"version": i, "operation": "WRITE"}}}}
                for i in range(1, {lost} + 1)]
        return dict(CLAIM, table="ui.runaway", table_key=None, fence=None, attempts={lost} + 1, lost_attempts=lost)

    claims_merge() >> many_attempts()
'''
LOST = 50_000


@pytest.fixture(scope="module")
def claimant(raced, airflow_home):
    """A second DAG's tasks returning write reports, run by ``dag.test()`` after the raced write
    (so they are newer and met first): one claims the raced write's table, store key and fence;
    one carries 50,000 lost attempts."""
    from airflow.dag_processing.dagbag import DagBag

    real = raced["report"]
    claim = {"format": "occflow.write_report/1", "status": "committed", "table": real["table"],
             "table_key": real["table_key"], "fence": real["fence"], "operation": "merge", "profile": "delta-rs",
             "engine": "deltars", "committed": True, "attempts": 1, "conflicts": [], "wasted_seconds": 0.0,
             "lost_attempts": []}
    dag_file = airflow_home / "dags" / "test_ui_plugin_claimant.py"
    dag_file.write_text(CLAIMANT.format(claim=claim, dag_id=CLAIMANT_DAG, lost=LOST))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[CLAIMANT_DAG].test()
    assert str(getattr(run.state, "value", run.state)) == "success"
    return {"run_id": run.run_id, "fence": real["fence"]}


def test_a_report_of_another_task_naming_a_writes_table_and_fence_does_not_take_its_lease(client, raced, claimant):
    grant = next(e for e in raced["store"].history_events(raced["report"]["table_key"])
                 if e["kind"] == "grant" and e["fence"] == claimant["fence"])
    assert (grant["dag_id"], grant["task_id"], grant["run_id"]) == (DAG_ID, "merge", raced["run_id"])
    body = client.get("/api/timeline", headers=token("viewer"), params={"table": "ui.events"}).json()
    writes = {(e["dag_id"], e["task_id"]): e for e in body["entries"] if e["kind"] == "write"}
    claim, real = writes[(CLAIMANT_DAG, "claims_merge")], writes[(DAG_ID, "merge")]
    assert claim["fence"] == real["fence"] == claimant["fence"]  # the same table and fence, both claimed
    # The lease is the write's whose task instance the store granted it to, not the newer claimant's.
    assert claim["lease"] is None
    assert real["lease"] is not None and real["lease"]["lease_id"] == grant["lease_id"]
    # Nor does the claim show up as a lease no write claims: the real write has it.
    assert not [e for e in body["entries"] if e["kind"] == "lease" and e["lease_id"] == grant["lease_id"]]
    page = client.get("/", headers=token("viewer"), params={"table": "ui.events"}).text
    row = page.split('data-task="claims_merge"', 1)[1].split("</tr>", 1)[0]
    assert f"fence {claimant['fence']}" in row and "waited" not in row
    real_row = page.split('data-task="merge"', 1)[1].split("</tr>", 1)[0]
    assert f"fence {claimant['fence']}, waited" in real_row


def test_a_report_of_50000_lost_attempts_renders_a_small_page_that_counts_the_rest(client, claimant):
    from occflow.plugins.rows import ATTEMPTS_FIRST, ATTEMPTS_LAST

    params = {"dag_id": CLAIMANT_DAG}
    page = client.get("/", headers=token("viewer"), params=params)
    assert page.status_code == 200
    assert len(page.content) < 500_000, len(page.content)
    rest = LOST - ATTEMPTS_FIRST - ATTEMPTS_LAST
    assert f'data-testid="attempts-left-out" data-task="many_attempts" data-count="{rest}"' in page.text
    assert f"and {rest} more attempts" in page.text
    assert page.text.count('data-testid="attempt-row" data-task="many_attempts"') == ATTEMPTS_FIRST + ATTEMPTS_LAST
    # The first and the last are shown, in order, around the count of the rest.
    first, last = page.text.index("attempt 1 lost"), page.text.index(f"attempt {LOST} lost")
    assert first < page.text.index(f"and {rest} more attempts") < last
    assert f"attempt {ATTEMPTS_FIRST + 1} lost" not in page.text
    body = client.get("/api/timeline", headers=token("viewer"), params=params)
    assert len(body.content) < 500_000, len(body.content)
    [runaway] = [e for e in body.json()["entries"] if e["kind"] == "write" and e["task_id"] == "many_attempts"]
    assert runaway["attempts"] == LOST + 1 and runaway["conflicts_left_out"] == rest
    assert [c["attempt"] for c in runaway["conflicts"]] == [*range(1, ATTEMPTS_FIRST + 1),
                                                            *range(LOST - ATTEMPTS_LAST + 1, LOST + 1)]
    assert body.json()["totals"]["conflicts"] == LOST  # the totals count every lost attempt

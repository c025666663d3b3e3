"""One configuration path on a real scheduler: the lease store is named only by an Airflow
connection id (``OCCFLOW_LEASE_STORE_CONN_ID``, a PostgreSQL connection kept in the Airflow
metadata database), and the writes, the view and ``occflow leases`` all meet in that store; a
worker without the setting says loudly that it admits in a store of its own.

One throwaway Airflow (scripts/examples.py's ``Airflow``: LocalExecutor scheduler,
dag-processor, api-server, triggerer) runs one DAG of delta-rs writes:

- ``write_1`` and ``write_2`` on two partitions, with the deployment's settings. This test holds
  ``write_1``'s footprint in the PostgreSQL store first: ``occflow leases list``, run as a user
  would with only the connection id, must show ``write_1`` waiting, and the write only runs once
  the test lets go, which it could not if it admitted anywhere else;
- ``rogue``, then ``after_rogue``: ``rogue``'s process drops ``OCCFLOW_LEASE_STORE_CONN_ID``
  before it runs (a worker deployed without the setting), so it falls back to the per-machine
  SQLite file in ``$AIRFLOW_HOME``. Its log must carry a WARNING naming both stores, and so must
  the log of the configured write that follows it.

Oracles: the PostgreSQL store's own history read directly (grants and releases per task), the
SQLite file's history, the Airflow metadata (Variables, task logs), the CLI's JSON, and the
view's rows built by the plugin's own code in a process with the deployment's settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from scheduler_harness import query, run_examples, wait_for

from occflow.core.identifiers import canonical_location
from occflow.leases import Holder, LeaseRequest, LeaseStore
from occflow.leases.config import IDENTITY_VARIABLE_PREFIX, store_identity

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "occflow_store_conn_id"
CONN_ID = "occflow_leases"
WRITES = ("write_1", "write_2", "rogue", "after_rogue")

DAG_SOURCE = '''
import os

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

PATH = "{path}"


def rows(ds):
    return pa.table({{"id": pa.array([1, 2], pa.int64()), "ds": [ds] * 2}})


def without_the_store_setting(context):
    # This task's process is a worker deployed without the setting (the LocalExecutor runs each
    # task in a process of its own, so no other task sees the change).
    os.environ.pop("OCCFLOW_LEASE_STORE_CONN_ID", None)


def write(task_id, ds, **kwargs):
    return DeltaWriteOperator(task_id=task_id, table="lake.conn_id_t", path=PATH, operation="insert_overwrite",
                              partitions={{"ds": ds}}, data=rows(ds), **kwargs)


with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):

    @task
    def create_table():
        DeltaRsTable(PATH).create(pa.concat_tables([rows(d) for d in "1234"]), partition_by=["ds"])

    made = create_table()
    made >> [write("write_1", "1"), write("write_2", "2")] >> write(
        "rogue", "3", pre_execute=without_the_store_setting) >> write("after_rogue", "4")
'''








def _cli_leases(env) -> dict:
    done = subprocess.run([str(Path(sys.executable).with_name("occflow")), "leases", "list", "--format", "json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


# The view's rows, built by the plugin's own code (``lease_store`` and ``data.timeline``, what its
# routes call) in a process that has the deployment's settings and reads its metadata database.
# The same process reads the stores' records from the Airflow Variables (stored encrypted).
VIEW_SCRIPT = '''
import json, sys
from airflow.models.variable import Variable
from airflow.utils.session import create_session
from occflow.plugins import data
from occflow.plugins.app import lease_store

store, url, error = lease_store()
with create_session() as session:
    result = data.timeline(store, session, lambda dag_id: True, data.Filters(dag_id=sys.argv[1], limit=100),
                           reads_every_dag=True)
    found = session.query(Variable).filter(Variable.key.like(sys.argv[2] + "%")).all()
    variables = {v.key: json.loads(v.val) for v in found}
print(json.dumps({"url": url, "error": error, "entries": result["entries"], "variables": variables}, default=str))
'''


def _task_log(home: Path, task_id: str) -> str:
    logs = sorted((home / "logs").glob(f"dag_id={DAG_ID}/run_id=*/task_id={task_id}/attempt=*.log"))
    return "\n".join(p.read_text(errors="replace") for p in logs)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, pg_server):
    import psycopg2

    name = f"occflow_connid_{os.getpid()}"
    admin = psycopg2.connect(pg_server)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    pg_url = f"{pg_server.rsplit('/', 1)[0]}/{name}"

    examples = run_examples()
    home = tmp_path_factory.mktemp("conn-id-airflow")
    (home / "dags").mkdir()
    path = os.path.realpath(home / "table")
    (home / "dags" / "store_conn_id.py").write_text(textwrap.dedent(DAG_SOURCE.format(dag_id=DAG_ID, path=path)))
    env = examples.airflow_env(home, parallelism=4)
    del env["OCCFLOW_LEASE_STORE_URL"]  # the store is named only by the connection id
    env.update({"AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
                "OCCFLOW_LEASE_STORE_CONN_ID": CONN_ID, "OCCFLOW_LEASE_HISTORY": "1"})
    airflow = examples.Airflow(home, env)
    # This process's Airflow settings (tests/airflow/conftest.py) must not leak into the services.
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    store = LeaseStore.from_url(pg_url, history=True)
    db = home / "airflow.db"
    try:
        airflow.start()
        # Made as a user makes it (the UI, the CLI): in the metadata database, which tasks reach
        # through the api-server and the view and the CLI read directly.
        airflow.cli("connections", "add", CONN_ID, "--conn-uri", pg_url)
        wait_for(f"the dag-processor to parse {DAG_ID}",
              lambda: query(db, "SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300, airflow, every=2)
        held = store.try_acquire(LeaseRequest.create(canonical_location(path), "insert_overwrite", "delta-rs", ["ds=1"],
                                                     holder=Holder("test", "holds_ds1")))
        assert held is not None
        run_id = f"conn_id__{time.strftime('%Y%m%dT%H%M%S')}"
        airflow.cli("dags", "unpause", DAG_ID)
        airflow.cli("dags", "trigger", DAG_ID, "--run-id", run_id)
        # What `occflow leases list` shows, with nothing but the connection id to go on, while
        # write_1 waits behind the test's lease.
        listed = wait_for("the CLI to list write_1 waiting in the PostgreSQL store", lambda: next(
            (seen for seen in [_cli_leases(airflow.env)]
             if any(f"{DAG_ID}.write_1" in w["holder"] for w in seen["waiting"])), None), 600, airflow, every=2)
        store.release(held)
        state = wait_for("the DAG run to end", lambda: next(
            (s for (s,) in query(db, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
             if s in ("success", "failed")), None), 600, airflow)
        tasks = dict(query(db, "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                            DAG_ID, run_id))
        view = subprocess.run([sys.executable, "-c", VIEW_SCRIPT, DAG_ID, IDENTITY_VARIABLE_PREFIX], env=airflow.env,
                              capture_output=True, text=True, timeout=300)
        assert view.returncode == 0, view.stderr[-3000:]
        seen = json.loads(view.stdout.strip().splitlines()[-1])
        default_file = home / "occflow_leases.db"
        yield {
            "state": state, "tasks": tasks, "listed": listed, "variables": seen.pop("variables"), "view": seen,
            "pg_events": [e for e in store.history_events() if e["dag_id"] == DAG_ID],
            "default_events": (LeaseStore.from_url(f"sqlite:///{default_file}").history_events()
                               if default_file.exists() else []),
            "logs": {t: _task_log(home, t) for t in WRITES},
            "pg_url": pg_url, "default_file": default_file,
        }
    except BaseException:
        print(f"Airflow logs kept in {home}", file=sys.stderr)
        raise
    finally:
        store.dispose()
        airflow.stop()
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _granted(events, task_id):
    return [e for e in events if e["kind"] == "grant" and e["task_id"] == task_id]


def test_the_configured_writes_are_admitted_in_the_store_the_connection_names(deployment):
    assert deployment["state"] == "success", deployment["tasks"]
    events = deployment["pg_events"]
    for task_id in ("write_1", "write_2", "after_rogue"):
        assert len(_granted(events, task_id)) == 1, (task_id, events)
        assert any(e["kind"] == "release" and e["task_id"] == task_id for e in events)
    # write_1 waited in that store's queue behind the test's lease, so it was admitted there.
    assert any(e["kind"] == "enqueue" and e["task_id"] == "write_1" for e in events)
    assert not any(e["dag_id"] == DAG_ID and e["task_id"] != "rogue" for e in deployment["default_events"])


def test_the_cli_lists_the_workers_queue_with_only_the_connection_id(deployment):
    waiting = [w for w in deployment["listed"]["waiting"] if f"{DAG_ID}.write_1" in w["holder"]]
    assert len(waiting) == 1 and waiting[0]["partitions"] == ["ds=1"], deployment["listed"]
    leases = deployment["listed"]["leases"]  # only the lease the test took in that store
    assert leases and all("test.holds_ds1" in le["holder"] for le in leases), leases


def test_the_view_reads_the_same_store_and_ties_each_write_to_its_lease(deployment):
    view = deployment["view"]
    assert view["error"] is None
    assert view["url"] == store_identity(deployment["pg_url"]).store
    writes = {e["task_id"]: e for e in view["entries"] if e["kind"] == "write"}
    assert set(writes) == set(WRITES), writes.keys()
    granted = {e["task_id"]: e["lease_id"] for e in deployment["pg_events"] if e["kind"] == "grant"}
    for task_id in ("write_1", "write_2", "after_rogue"):
        assert writes[task_id]["lease"]["lease_id"] == granted[task_id]
    # The rogue's lease is in its own file: the view cannot see it, which is the harm the warning names.
    assert not writes["rogue"].get("lease")


def test_a_worker_without_the_setting_admits_in_its_own_file_and_says_so(deployment):
    rogue = _granted(deployment["default_events"], "rogue")
    assert len(rogue) == 1, deployment["default_events"]
    assert not _granted(deployment["pg_events"], "rogue")
    shared = store_identity(deployment["pg_url"])
    records = deployment["variables"]
    assert set(records) >= {IDENTITY_VARIABLE_PREFIX + shared.fingerprint}, records
    own = [r for r in records.values() if r["per_machine_default"]]
    assert len(own) == 1 and str(deployment["default_file"]) in own[0]["store"], records
    assert "password" not in json.dumps(records).lower()
    for task_id in ("rogue", "after_rogue"):  # the worker on its own file, and the peer that follows it
        log = deployment["logs"][task_id]
        line = next((line for line in log.splitlines() if "lease store mismatch" in line), None)
        assert line is not None, f"{task_id} logged no mismatch:\n{log[-3000:]}"
        assert "warn" in line.lower()
        assert shared.fingerprint in line and own[0]["fingerprint"] in line
    for task_id in ("write_1", "write_2"):  # before the rogue wrote, nothing differed
        assert "lease store mismatch" not in deployment["logs"][task_id]

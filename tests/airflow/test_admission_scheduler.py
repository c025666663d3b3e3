"""Admission on a real scheduler (LocalExecutor, 4 slots): a lease is held only while the write runs.

One throwaway Airflow (scripts/examples.py's ``Airflow``: scheduler, dag-processor,
api-server, triggerer) runs a DAG of sub-second delta-rs writes with admission's defaults:

- four INSERT OVERWRITEs of one partition, started together: each waits in its worker for the
  one before it and holds its lease from grant to release for little more than its write;
- a write that is not admitted and defers (``admission_wait_seconds=0``) while this test holds
  its footprint: the trigger only resumes it, the resumed try takes the lease itself (its grant
  comes from the task's process, after the test's release), and it holds it only while it writes.

Hold times are read from the lease store's history (``OCCFLOW_LEASE_HISTORY=1``) and compared
with each write's own duration plus a generous bound: a check of what holds the lease, not a
timing figure (those are bench/scheduler_bench.py's).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from scheduler_harness import query, run_examples, wait_for

from occflow.core.identifiers import canonical_location
from occflow.leases import Holder, LeaseRequest, LeaseStore

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "occflow_admission_scheduler"
TABLE = "bench.admission_scheduler"
BOUND = 5.0  # seconds a lease may be held beyond its write's own duration (a busy 2-core machine)

DAG_SOURCE = '''
import os

import pendulum
import pyarrow as pa
from airflow.sdk import DAG, task

from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

TABLE, PATH = "{table}", "{path}"


def rows(ds):
    return pa.table({{"id": pa.array([1, 2, 3], pa.int64()), "ds": [ds] * 3, "v": pa.array([1, 2, 3], pa.int64())}})


with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False,
         max_active_tasks=8) as dag:

    @task
    def create_table():
        DeltaRsTable(PATH).create(pa.concat_tables([rows("1"), rows("2")]),
                                                           partition_by=["ds"])

    waiting = [DeltaWriteOperator(task_id=f"overwrite_{{i}}", table=TABLE, path=PATH, operation="insert_overwrite",
                                  partitions={{"ds": "1"}}, data=rows("1"), retries=1) for i in range(4)]
    deferring = DeltaWriteOperator(task_id="deferred_overwrite", table=TABLE, path=PATH, operation="insert_overwrite",
                                   partitions={{"ds": "2"}}, data=rows("2"), admission_wait_seconds=0, retries=1)
    create_table() >> [*waiting, deferring]
'''








@pytest.fixture(scope="module")
def scheduled_run(tmp_path_factory):
    examples = run_examples()
    home = tmp_path_factory.mktemp("admission-airflow")
    (home / "dags").mkdir()
    path = os.path.realpath(home / "table")
    (home / "dags" / "admission_scheduler.py").write_text(
        textwrap.dedent(DAG_SOURCE.format(dag_id=DAG_ID, table=TABLE, path=path)))
    store_url = f"sqlite:///{home / 'leases.db'}"
    env = examples.airflow_env(home, parallelism=4)
    env.update({"AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                "OCCFLOW_LEASE_STORE_URL": store_url, "OCCFLOW_LEASE_HISTORY": "1"})
    airflow = examples.Airflow(home, env)
    # This process's Airflow settings (tests/airflow/conftest.py) must not leak into the services.
    airflow.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "OCCFLOW"))}, **env}
    store = LeaseStore.from_url(store_url, history=True)
    db = home / "airflow.db"
    try:
        airflow.start()
        wait_for(f"the dag-processor to parse {DAG_ID}",
              lambda: query(db, "SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300, airflow, every=2)
        # This test holds the deferring write's footprint until that write has deferred.
        # A delta-rs table's leases are keyed by its location.
        held = store.try_acquire(LeaseRequest.create(canonical_location(path), "insert_overwrite", "delta-rs", ["ds=2"],
                                                     holder=Holder("test", "holds_ds2")))
        assert held is not None
        run_id = f"admission__{time.strftime('%Y%m%dT%H%M%S')}"
        airflow.cli("dags", "unpause", DAG_ID)
        airflow.cli("dags", "trigger", DAG_ID, "--run-id", run_id)
        wait_for("the deferred write to defer", lambda: query(
            db, "SELECT 1 FROM task_instance WHERE dag_id = ? AND task_id = 'deferred_overwrite' AND state = 'deferred'",
            DAG_ID), 600, airflow, every=0.5)
        time.sleep(1.0)
        store.release(held)
        released = time.time()
        state = wait_for("the DAG run to end", lambda: next(
            (s for (s,) in query(db, "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
             if s in ("success", "failed")), None), 600, airflow, every=1)
        tasks = {t: (s, n) for t, s, n in query(
            db, "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)}
        reports = {t: json.loads(v) for t, v in query(
            db, "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
            DAG_ID, run_id) if t != "create_table"}
        events = [e for e in store.history_events() if e["dag_id"] in (DAG_ID, "test")]
        yield {"state": state, "tasks": tasks, "reports": reports, "events": events,
               "released": released, "home": home}
    except BaseException:
        print(f"Airflow logs kept in {home}", file=sys.stderr)
        raise
    finally:
        store.dispose()
        airflow.stop()


def _holds(events):
    """Per task: (grant event, seconds to its release)."""
    grants = {e["lease_id"]: e for e in events if e["kind"] == "grant" and e["task_id"] != "holds_ds2"}
    return {grants[e["lease_id"]]["task_id"]: (grants[e["lease_id"]], e["at"] - grants[e["lease_id"]]["at"])
            for e in events if e["kind"] == "release" and e["lease_id"] in grants}


def test_every_admitted_write_commits_without_a_conflict(scheduled_run):
    assert scheduled_run["state"] == "success", scheduled_run["tasks"]
    reports = scheduled_run["reports"]
    assert set(reports) == {f"overwrite_{i}" for i in range(4)} | {"deferred_overwrite"}
    assert all(r["committed"] and not r["conflicts"] for r in reports.values()), reports


def test_a_lease_is_held_for_little_more_than_its_write(scheduled_run):
    holds = _holds(scheduled_run["events"])
    assert set(holds) == set(scheduled_run["reports"])
    for task_id, (_, held) in holds.items():
        write = scheduled_run["reports"][task_id]["seconds"]
        assert held < write + BOUND, f"{task_id} held its lease {held:.1f}s around a {write:.2f}s write"


def test_the_deferred_write_is_granted_in_its_resumed_try_not_by_the_trigger(scheduled_run):
    grant, _ = _holds(scheduled_run["events"])["deferred_overwrite"]
    enqueued = [e for e in scheduled_run["events"] if e["kind"] == "enqueue" and e["task_id"] == "deferred_overwrite"]
    assert enqueued, "the write did not wait for the footprint the test held"
    assert grant["at"] >= scheduled_run["released"] - 1.0  # after the test let the footprint go
    # Granted to the resumed try's process; a trigger that took the lease would have granted it
    # to the request as the deferring process made it (that process's pid).
    assert grant["pid"] != enqueued[0]["pid"]
    assert scheduled_run["tasks"]["deferred_overwrite"] == ("success", 1)

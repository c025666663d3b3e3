"""TableCommitSensor and ConflictFreeSensor, deferred for real (``dag.test()`` runs their
triggers inline), on real delta-rs tables and a real lease store (SQLite)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow


def _seed(path: str) -> None:
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    assert DeltaRsTable(path).create(pa.table({"id": [1, 2], "ds": ["a", "b"]}), partition_by=["ds"]).committed


def test_table_commit_sensor_finds_the_commit_its_upstream_task_made(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed(path)
    run = run_dag(
        f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator
from occflow.sensors.commit import TableCommitSensor

with DAG("commit_sensor_upstream", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    write = DeltaWriteOperator(
        task_id="append_b", table="events", path={path!r}, operation="insert_into",
        data=pa.table({{"id": [3], "ds": ["b"]}}), admission=False,
    )
    wait = TableCommitSensor(
        task_id="wait_for_append", table_format="delta", table="events", location={path!r},
        upstream_task_id="append_b", partition={{"ds": "b"}}, poll_interval=0.5,
    )
    write >> wait
'''
    )
    assert run.state == "success"
    written = run.task("append_b").xcom["return_value"]
    found = run.task("wait_for_append").xcom["return_value"]
    assert found["version"] == written["version"] == 1
    assert found["metadata"]["occflow.task-id"] == "append_b"
    assert found["partitions"] == ["ds=b"]


def test_table_commit_sensor_defers_until_the_version_exists(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed(path)
    run = run_dag(
        f'''
import threading, time
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.engines.deltars import DeltaRsTable
from occflow.sensors.commit import TableCommitSensor

def commit_later():
    time.sleep(3)
    DeltaRsTable({path!r}).append(pa.table({{"id": [7], "ds": ["a"]}}))

# A writer outside Airflow commits version 1 while the sensor is deferred.
threading.Thread(target=commit_later, daemon=True).start()

with DAG("commit_sensor_version", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    TableCommitSensor(task_id="wait_v1", table_format="delta", table="events", location={path!r},
                      min_version=1, poll_interval=0.5)
'''
    )
    assert run.state == "success"
    assert run.task("wait_v1").xcom["return_value"]["version"] == 1


def test_conflict_free_sensor_waits_for_a_conflicting_lease_and_ignores_a_disjoint_one(run_dag, tmp_path):
    from occflow.leases import Holder, LeaseRequest, LeaseStore

    url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(url)
    # A MERGE on ds=a by another writer holds a lease for 4 more seconds; an append on ds=b too.
    held = store.try_acquire(
        LeaseRequest.create("db.events", "merge", "delta-write-serializable", [{"ds": "a"}],
                            holder=Holder("other_dag", "merge_a"), ttl=4)
    )
    disjoint = store.try_acquire(
        LeaseRequest.create("db.events", "merge", "delta-write-serializable", [{"ds": "b"}],
                            holder=Holder("other_dag", "merge_b"), ttl=600)
    )
    assert held is not None and disjoint is not None
    started = time.monotonic()
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.sensors.conflict_free import ConflictFreeSensor

with DAG("conflict_free", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    ConflictFreeSensor(task_id="wait_a", table="db.events", operation="update",
                       profile="delta-write-serializable", partitions={{"ds": "a"}},
                       lease_store_url={url!r}, poll_interval=0.5)
    ConflictFreeSensor(task_id="free_c", table="db.events", operation="update",
                       profile="delta-write-serializable", partitions={{"ds": "c"}},
                       lease_store_url={url!r}, poll_interval=0.5)
'''
    )
    assert run.state == "success"
    wait_a, free_c = run.task("wait_a"), run.task("free_c")
    # wait_a could only finish once the ds=a lease had expired.
    assert wait_a.tries[-1].end_date.timestamp() >= held.expires.timestamp()
    assert time.monotonic() - started >= 3
    # free_c never had anything to wait for: it ended before the lease on ds=a expired or right away.
    assert free_c.state == "success"
    assert store.leases("db.events")[0].lease_id == disjoint.lease_id  # still held, never in the way


def test_write_is_not_admitted_while_a_conflicting_lease_is_live(run_dag, tmp_path):
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable
    from occflow.leases import Holder, LeaseRequest, LeaseStore

    path = str(tmp_path / "events")
    assert DeltaRsTable(path).create(pa.table({"id": [1], "ds": ["a"], "v": [0]}), partition_by=["ds"]).committed
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(url)
    # A delta-rs table is admitted by where it is (its location), whatever name a task gives it.
    from occflow.core.identifiers import canonical_location

    where = canonical_location(str(Path(path).resolve()))
    held = store.try_acquire(
        LeaseRequest.create(where, "optimize", "delta-write-serializable", [{"ds": "a"}],
                            holder=Holder("other_dag", "compact_a"), ttl=4)
    )
    assert held is not None
    run = run_dag(
        f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("admission_waits", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(
        task_id="merge_a", table="events", path={path!r}, operation="merge", partitions={{"ds": "a"}},
        data=pa.table({{"id": [1], "ds": ["a"], "v": [5]}}), merge_keys=["id"],
        lease_store_url={url!r}, admission_poll_interval=0.5,
    )
'''
    )
    task = run.task("merge_a")
    assert task.state == "success"
    report = task.xcom["return_value"]
    assert report["attempts"] == 1 and report["conflicts"] == []
    # Deferred until the compaction's lease lapsed; the merge's own lease was released after.
    assert task.tries[-1].end_date.timestamp() >= held.expires.timestamp()
    assert store.leases(where) == []


def test_triggers_serialize_to_json_and_back():
    import importlib
    import json

    from occflow.leases import Holder, LeaseRequest
    from occflow.triggers.lease import ConflictFreeTrigger, LeaseAdmissionTrigger
    from occflow.triggers.table import TableCommitTrigger

    request = LeaseRequest.create("db.t", "merge", "iceberg-serializable", [{"ds": "2024-01-01"}],
                                  holder=Holder("d", "t", "r", 1))
    triggers = [
        LeaseAdmissionTrigger.for_request(request, "sqlite:////tmp/x.db", 1.0),
        ConflictFreeTrigger(request.to_dict(), None, 2.0),
        TableCommitTrigger("delta", "/tmp/t", {"min_version": 3, "snapshot_id": None,
                                               "partition": "ds=a", "metadata": {}}, 1.0),
    ]
    for trigger in triggers:
        path, kwargs = trigger.serialize()
        module, _, name = path.rpartition(".")
        again = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
        assert again.serialize() == (path, kwargs)

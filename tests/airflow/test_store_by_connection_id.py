"""One configuration path: a deployment that names its lease store only by an Airflow connection
id (``OCCFLOW_LEASE_STORE_CONN_ID``) has its writes admitted in that store, the one the view and
the CLI read, not in a per-machine SQLite file under ``$AIRFLOW_HOME``.

A real delta-rs write under ``dag.test()``; the connection comes from Airflow's own secrets
backend (``AIRFLOW_CONN_<ID>``). The oracle is the store's history read directly from the file
the connection names, and the absence of the per-machine default file.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from occflow.engines.deltars import DeltaRsTable
from occflow.leases import LeaseStore, default_url, resolve_store_url

pytestmark = pytest.mark.airflow


def test_writes_use_the_store_the_connection_id_names(run_dag, tmp_path, monkeypatch):
    shared = tmp_path / "shared" / "leases.db"
    shared.parent.mkdir()
    LeaseStore.from_url(f"sqlite:///{shared}", history=True)  # the shared store, as deployed
    monkeypatch.delenv("OCCFLOW_LEASE_STORE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_OCCFLOW_LEASES", f"sqlite:///{shared}")
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_CONN_ID", "occflow_leases")
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")
    path = tmp_path / "t"
    rows = pa.table({"id": pa.array([1], pa.int64()), "ds": ["a"]})
    assert DeltaRsTable(str(path)).create(rows, partition_by=["ds"]).committed
    run = run_dag(f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("store_by_conn_id", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="append", table="t", path={str(path)!r}, operation="insert_into",
                       partitions={{"ds": "a"}}, data=pa.table({{"id": [2], "ds": ["a"]}}))
''')
    assert run.task("append").state == "success"
    # The view and the CLI resolve the same store.
    assert resolve_store_url() == f"sqlite:///{shared}"
    kinds = [e["kind"] for e in LeaseStore.from_url(f"sqlite:///{shared}").history_events()]
    assert "grant" in kinds and "release" in kinds, kinds  # the write was admitted there
    default = Path(default_url().removeprefix("sqlite:///"))
    assert default != shared
    if default.exists():  # a per-machine file may exist from other tests: it saw no grant of this write
        events = LeaseStore.from_url(default_url()).history_events()
        assert not any(e.get("dag_id") == "store_by_conn_id" for e in events)

"""``OCCFLOW_ADMISSION=off``: the deployment's switch to race instead of taking leases.

Real delta-rs tables, real Airflow (``dag.test()``), a real SQLite lease store with its history
on. Whether a write took a lease is read from the store's history (its grant events), and what
was written from the table's ``_delta_log``, not from occflow's report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from occflow.leases import LeaseStore

pytestmark = pytest.mark.airflow

DAG_SOURCE = '''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

PATH, STORE = {path!r}, {store!r}

def create():
    DeltaRsTable(PATH).create(pa.table({{"id": [0], "ds": ["a"], "v": [0]}}), partition_by=["ds"])
    for n in (1, 2):  # three small files in partition a: something to compact
        DeltaRsTable(PATH).append(pa.table({{"id": [n], "ds": ["a"], "v": [0]}}))

def upsert(context, snapshot):
    return pa.table({{"id": [1, 7], "ds": ["a", "a"], "v": [5, 5]}})

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    merge = DeltaWriteOperator(
        task_id="merge", table="events", path=PATH, operation="merge", partitions={{"ds": "a"}},
        data=upsert, merge_keys=["id"], lease_store_url=STORE,
    )
    compact = DeltaWriteOperator(
        task_id="compact", table="events", path=PATH, operation="optimize", partitions={{"ds": "a"}},
        lease_store_url=STORE,
    )
    PythonOperator(task_id="create", python_callable=create) >> merge >> compact
'''


def _log_operations(path: Path) -> list[str]:
    """The operations the table's commits record, in version order (read from ``_delta_log``)."""
    out = []
    for entry in sorted((path / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out.append(action["commitInfo"]["operation"])
    return out


def _granted(store_url: str) -> list[str]:
    store = LeaseStore.from_url(store_url, history=True)
    try:
        return [e["task_id"] for e in store.history_events() if e["kind"] == "grant"]
    finally:
        store.dispose()


def _run(run_dag, tmp_path: Path, dag_id: str):
    path, store = tmp_path / "events", f"sqlite:///{tmp_path / 'leases.db'}"
    run = run_dag(DAG_SOURCE.format(path=str(path), store=store, dag_id=dag_id))
    return run, path, store


@pytest.fixture(autouse=True)
def _history(monkeypatch):
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")


def test_off_races_the_merge_and_keeps_the_lease_of_a_compaction_that_could_corrupt_data(
    run_dag, tmp_path, monkeypatch
):
    monkeypatch.setenv("OCCFLOW_ADMISSION", "off")
    run, path, store = _run(run_dag, tmp_path, "switch_off")
    assert run.state == "success"
    # The MERGE took no lease; the OPTIMIZE (two delta-rs compactions of one partition both commit
    # and duplicate its rows) kept its lease despite the switch.
    assert _granted(store) == ["compact"]
    assert _log_operations(path)[-2:] == ["MERGE", "OPTIMIZE"]
    assert run.task("merge").xcom["return_value"]["fence"] is None


def test_on_or_unset_takes_a_lease_for_every_write(run_dag, tmp_path, monkeypatch):
    monkeypatch.setenv("OCCFLOW_ADMISSION", "on")
    run, path, store = _run(run_dag, tmp_path, "switch_on")
    assert run.state == "success"
    assert sorted(_granted(store)) == ["compact", "merge"]


def test_a_value_neither_on_nor_off_fails_the_write_naming_the_variable_and_writes_nothing(
    run_dag, tmp_path, monkeypatch, capfd
):
    monkeypatch.setenv("OCCFLOW_ADMISSION", "sometimes")
    run, path, store = _run(run_dag, tmp_path, "switch_bad")
    merge = run.task("merge")
    assert merge.state == "failed" and merge.try_number == 1  # a fail-fast error, not retried
    out = capfd.readouterr()
    assert "OCCFLOW_ADMISSION='sometimes' must be on or off" in out.out + out.err
    assert len(_log_operations(path)) == 3  # only the three seed commits
    assert _granted(store) == []

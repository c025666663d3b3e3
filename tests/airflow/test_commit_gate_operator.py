"""An operator's commit held at its gate, under real Airflow (``dag.test()``), real delta-rs and a
real SQLite lease store with its history on.

The task's schema change is granted by its own worker, which runs with
``OCCFLOW_ORDER_AWARE_ADMISSION=false``. While it runs, an order-aware worker (another
``LeaseStore`` on the same file) grants an append ahead of its commit: only append-then-schema-
change is clean on delta-rs, so the store records that the schema change's commit awaits the
append. What landed is read from the table's ``_delta_log``; the waits from the store's history.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from occflow.leases import LeaseStore

pytestmark = pytest.mark.airflow

DAG_SOURCE = '''
import json
import threading
import time
from pathlib import Path

import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.engines.deltars import DeltaRsTable
from occflow.leases import LeaseRequest, LeaseStore
from occflow.operators.delta import DeltaWriteOperator

PATH, STORE, OUT = {path!r}, {store!r}, Path({out!r})
HOLD = {hold!r}  # seconds the append runs before it commits and lets go; None: it keeps its lease


def alter_beside_an_append(table, snapshot, partition, commit, context):
    """The job of the task: while its lease is live, an order-aware worker grants an append
    ahead of its commit; then the schema change commits through occflow's table API (its
    before-commit check holds it at its gate)."""
    other_worker = LeaseStore.from_url(STORE, order_aware=True, history=True)
    (mine,) = other_worker.leases()
    append = other_worker.decide(
        LeaseRequest.create(mine.table, "insert_into", "delta-rs", whole_table=True, commit_gate=True)
    ).lease
    assert append is not None, "the append was not granted beside the schema change"
    (OUT / "append.json").write_text(json.dumps({{"lease_id": append.lease_id, "task_lease_id": mine.lease_id}}))
    if HOLD is not None:
        def append_then_let_go():
            time.sleep(HOLD)
            done = DeltaRsTable(PATH).append(pa.table({{"id": [10], "v": ["c"]}}), snapshot=snapshot)
            (OUT / "appended.json").write_text(json.dumps({{"committed": done.committed, "version": done.version}}))
            other_worker.release(append)
        threading.Thread(target=append_then_let_go).start()
    return table.add_columns({{"note": "string"}}, commit=commit)


with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(
        task_id="alter", table="events", path=PATH, operation="alter_metadata",
        job=alter_beside_an_append, lease_store_url=STORE, retries=0, {gate_timeout}
    )
'''


def _log(path: Path) -> list[set[str]]:
    """Per version, the kinds of action its commit file holds (Delta's own record)."""
    out = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        kinds: set[str] = set()
        for line in file.read_text().splitlines():
            kinds |= set(json.loads(line))
        out.append(kinds)
    return out


def _run(run_dag, tmp_path: Path, dag_id: str, hold: float | None, gate_timeout: str = ""):
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    path = tmp_path / "events"
    DeltaRsTable(str(path)).create(pa.table({"id": pa.array([0, 1], pa.int64()), "v": ["a", "b"]}))
    store = f"sqlite:///{tmp_path / 'leases.db'}"
    run = run_dag(DAG_SOURCE.format(path=str(path), store=store, out=str(tmp_path), hold=hold, dag_id=dag_id,
                                    gate_timeout=gate_timeout))
    return run, path, store


@pytest.fixture(autouse=True)
def _history(monkeypatch):
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")


def test_a_worker_with_order_aware_admission_off_holds_its_commit_at_the_gate_the_store_recorded(
    run_dag, tmp_path, monkeypatch
):
    monkeypatch.setenv("OCCFLOW_ORDER_AWARE_ADMISSION", "false")
    run, path, store_url = _run(run_dag, tmp_path, "gate_setting_off", hold=3.0)
    alter = run.task("alter")
    assert alter.state == "success", alter
    # The append went first (version 1) and committed; the schema change waited for it and
    # then committed on its stale snapshot (version 2), as the matrix says is clean.
    assert json.loads((tmp_path / "appended.json").read_text()) == {"committed": True, "version": 1}
    log = _log(path)
    assert len(log) == 3 and "add" in log[1] and "metaData" not in log[1] and "metaData" in log[2]
    assert alter.xcom["return_value"]["version"] == 2
    ids = json.loads((tmp_path / "append.json").read_text())
    store = LeaseStore.from_url(store_url, history=True)
    try:
        events = store.history_events()
    finally:
        store.dispose()
    by_lease = [(e["kind"], e["lease_id"]) for e in events if e["kind"] in ("release", "pass")]
    # The task's lease passed its gate only after the append's lease was let go.
    assert by_lease.index(("pass", ids["task_lease_id"])) > by_lease.index(("release", ids["lease_id"]))


def test_a_gate_wait_past_gate_timeout_fails_the_try_with_a_report_naming_the_awaited_lease(run_dag, tmp_path):
    run, path, store_url = _run(run_dag, tmp_path, "gate_timeout", hold=None, gate_timeout="gate_timeout=2")
    alter = run.task("alter")
    assert alter.state == "failed" and alter.try_number == 1
    ids = json.loads((tmp_path / "append.json").read_text())
    report = alter.xcom["occflow_report"]
    assert report["status"] == "failed" and report["attempts"] == 1
    error = report["error"]
    assert f"lease {ids['lease_id'][:8]}" in error and "insert_into" in error  # the lease awaited
    assert f"lease {ids['task_lease_id'][:8]}" in error and "alter_metadata" in error
    assert "gate timeout 2.0s" in error and "waited 2." in error and "did not commit" in error
    assert len(_log(path)) == 1  # nothing was committed: the table is as it was created
    store = LeaseStore.from_url(store_url, history=True)
    try:
        live = [lease.lease_id for lease in store.leases()]
        released = [e["lease_id"] for e in store.history_events() if e["kind"] == "release"]
    finally:
        store.dispose()
    assert live == [ids["lease_id"]]  # the task let its own lease go; the append still holds its own
    assert ids["task_lease_id"] in released


def test_without_gate_timeout_a_gate_wait_ends_before_execution_timeout_with_occflow_s_report(run_dag, tmp_path):
    """The default gate timeout is what is left of ``execution_timeout`` (less a tenth of it here):
    the try ends with the gate's error and a report, not with Airflow's bare task timeout."""
    run, path, _ = _run(run_dag, tmp_path, "gate_execution_timeout", hold=None,
                        gate_timeout="execution_timeout=pendulum.duration(seconds=10)")
    alter = run.task("alter")
    assert alter.state == "failed" and alter.try_number == 1
    ids = json.loads((tmp_path / "append.json").read_text())
    report = alter.xcom["occflow_report"]
    assert report["status"] == "failed"
    assert f"lease {ids['lease_id'][:8]}" in report["error"]
    # 10 s less the margin (a tenth), less what ran before the gate: the limit came from execution_timeout.
    limit = float(re.search(r"gate timeout (\d+\.\d)s", report["error"]).group(1))
    assert 7.0 <= limit <= 9.0, report["error"]
    assert len(_log(path)) == 1

"""A declared partition value is the value of the column's type (issue 33): ``partitions={"p":
"07"}`` on an INT partition column is the partition ``p=7`` delta-rs writes and deletes.

Oracles: delta-rs's own ``_delta_log`` (which partition's files the commit removed) and the
lease store's record of the footprint admission granted, after a real ``dag.test()`` run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

pytestmark = pytest.mark.airflow


def _removed(location: Path, version: int) -> set[str]:
    log = location / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {f"p={a['remove']['partitionValues']['p']}" for a in actions if "remove" in a}


def test_a_declared_text_value_on_an_int_column_is_the_partition_delta_rs_deletes(run_dag, tmp_path, monkeypatch):
    location = tmp_path / "t"
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": pa.array([7, 8, 70], pa.int32())})
    write_deltalake(str(location), rows, partition_by=["p"])
    store = tmp_path / "leases.db"
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{store}")
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")
    run = run_dag(
        f"""
        import pendulum
        from airflow.sdk import DAG
        from occflow.operators.delta import DeltaWriteOperator

        with DAG("typed_partition_delete", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
            DeltaWriteOperator(task_id="delete_07", table="lake.t", path={str(location)!r},
                               operation="delete", partitions={{"p": "07"}})
        """,
        dag_id="typed_partition_delete",
    )
    assert run.state == "success"
    report = run.task("delete_07").xcom["return_value"]
    assert report["partitions"] == [{"p": "7"}], report
    assert _removed(location, report["version"]) == {"p=7"}  # delta-rs's record: the files of p=7
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{store}")
    with engine.connect() as conn:
        granted = [r[0] for r in conn.execute(sa.text("SELECT partitions FROM occflow_lease_events "
                                                      "WHERE kind = 'grant'"))]
    assert granted and all(json.loads(p) == ["p=7"] for p in granted), granted


def test_a_declared_value_the_column_cannot_hold_fails_before_anything_is_written(run_dag, tmp_path):
    location = tmp_path / "t"
    rows = pa.table({"id": pa.array([1], pa.int64()), "p": pa.array([7], pa.int32())})
    write_deltalake(str(location), rows, partition_by=["p"])
    run = run_dag(
        f"""
        import pendulum
        from airflow.sdk import DAG
        from occflow.operators.delta import DeltaWriteOperator

        with DAG("typed_partition_refused", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
            DeltaWriteOperator(task_id="delete_x", table="lake.t", path={str(location)!r},
                               operation="delete", partitions={{"p": "seven"}})
        """,
        dag_id="typed_partition_refused",
    )
    assert run.state == "failed"
    assert len(list((location / "_delta_log").glob("*.json"))) == 1  # only the table's creation

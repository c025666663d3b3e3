"""The converse of issue 33's typed keys: on a STRING partition column a value is its own
spelling. ``partitions={"ds": "2024-5-1"}`` on a STRING column holding ``2024-05-01`` and
``2024-5-1`` was admitted as ``ds=2024-05-01`` (a day canonicalised whatever the column's type)
while delta-rs wrote the partition ``2024-5-1``: the admission line and the report disagreed
on what was written, and May 1st was counted twice.

Oracles, after a real ``dag.test()`` run: delta-rs's own ``_delta_log`` (which partition's files
the commit removed), the lease store's record of the footprint admission granted, and the
write's report in XCom. All three name ``2024-5-1``; ``2024-05-01`` is untouched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable, write_deltalake

pytestmark = pytest.mark.airflow


def _partitions(location: Path, version: int, action: str) -> set[str]:
    log = location / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {a[action]["partitionValues"]["ds"] for a in actions if action in a}


def test_a_declared_unpadded_day_on_a_string_column_is_the_partition_delta_rs_writes(run_dag, tmp_path, monkeypatch):
    location = tmp_path / "t"
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "ds": ["2024-05-01", "2024-5-1", "2024-05-02"]})
    write_deltalake(str(location), rows, partition_by=["ds"])
    store = tmp_path / "leases.db"
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{store}")
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")
    run = run_dag(
        f"""
        import pendulum
        from airflow.sdk import DAG
        from occflow.operators.delta import DeltaWriteOperator

        with DAG("string_day_spelling", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
            DeltaWriteOperator(task_id="delete_unpadded", table="lake.t", path={str(location)!r},
                               operation="delete", partitions={{"ds": "2024-5-1"}})
        """,
        dag_id="string_day_spelling",
    )
    assert run.state == "success"
    report = run.task("delete_unpadded").xcom["return_value"]
    assert report["partitions"] == [{"ds": "2024-5-1"}], report  # the report: the text as written
    assert _partitions(location, report["version"], "remove") == {"2024-5-1"}  # delta-rs's record
    remaining = sorted(DeltaTable(str(location)).to_pyarrow_table().column("ds").to_pylist())
    assert remaining == ["2024-05-01", "2024-05-02"]  # May 1st as the other text is untouched
    engine = sa.create_engine(f"sqlite:///{store}")
    with engine.connect() as conn:
        granted = [r[0] for r in conn.execute(sa.text("SELECT partitions FROM occflow_lease_events WHERE kind = 'grant'"))]
    # The admission line: the quoted key is the STRING column's text, apart from ds=2024-05-01.
    assert granted and all(json.loads(p) == ["ds='2024-5-1'"] for p in granted), granted

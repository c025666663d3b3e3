"""``occflow explain --delta-location`` on a Delta table under column mapping keys each job by its
physical partition columns (``TableFacts.reach``, issue 33) and says so; its ``--against``
verdicts stay the lease store's. The physical names are read from delta-rs's own record (the
schema's ``delta.columnMapping.physicalName`` and the log's ``partitionValues``), not from occflow;
the store is asked with the leases the declarations ask for. No JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from explain_cli import explain_json, run

from occflow.core.declaration import WriteDeclaration
from occflow.core.tablefacts import physical_key_column
from occflow.leases import LeaseRequest, LeaseStore


def _store_ruling(store: LeaseStore, running: LeaseRequest, newcomer: LeaseRequest) -> str:
    held = store.decide(running).lease
    assert held is not None
    decided = store.decide(newcomer)
    for lease in (held, decided.lease):
        if lease is not None:
            store.release(lease)
    return "granted" if decided.lease is not None else "blocked"


def test_a_column_mapped_table_keys_jobs_by_physical_columns_and_the_verdicts_are_the_stores(
        tmp_path: Path, capsys) -> None:
    path = tmp_path / "t"
    write_deltalake(
        str(path), pa.table({"id": pa.array([1, 2], pa.int64()), "a": ["1", "2"], "b": ["x", "y"]}),
        partition_by=["a", "b"],
        configuration={"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
    )
    physical = {f.name: f.metadata["delta.columnMapping.physicalName"] for f in DeltaTable(str(path)).schema().fields}
    log = (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    stored = {k for line in log for k in json.loads(line).get("add", {}).get("partitionValues", {})}
    assert stored == {physical["a"], physical["b"]} and physical["a"] != "a"  # the log keys by them
    col_a = physical_key_column(physical["a"])

    delete_1, delete_2 = "DELETE FROM db.t WHERE a = '1'", "DELETE FROM db.t WHERE a = '2'"
    update_1 = "UPDATE db.t SET id = 0 WHERE a = '1'"
    found = explain_json(capsys, delete_1, "--delta-location", str(path), "--against", delete_2, "--against", update_1)
    assert found["partitions"] == [{"a": "1"}]  # the SQL's own names, as the user wrote them
    assert found["table_reach"]["partitions"] == [{col_a: "1"}]
    assert found["table_reach"]["why"][0].startswith("column mapping: partitions keyed by their physical columns")
    assert found["why"][-1] == found["table_reach"]["why"][0]
    other_day, same_day = found["against"]
    assert other_day["table_reach"]["partitions"] == [{col_a: "2"}]

    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")

    def lease(operation: str, a: str) -> LeaseRequest:
        return LeaseRequest.from_declaration(WriteDeclaration.create("db.t", operation, profile="delta-rs", partitions=[{"a": a}]))

    assert other_day["admission"] == _store_ruling(store, lease("delete", "2"), lease("delete", "1")) == "granted"
    assert same_day["admission"] == _store_ruling(store, lease("update", "1"), lease("delete", "1")) == "blocked"

    code, text, _ = run(capsys, delete_1, "--delta-location", str(path))
    assert code == 0
    assert text.splitlines()[2:4] == ["partitions:   a=1", f"reach:        {col_a}=1"]

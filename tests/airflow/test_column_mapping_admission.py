"""A write on a column-mapped Delta table is admitted by the physical columns it names (issue 33,
item 2), through ``DeltaWriteOperator`` and a real SQLite lease store, while the report keeps the
logical names the task declared.

The table is partitioned by ``p`` and ``r`` under ``delta.columnMapping.mode = name``; then ``p``
and ``r`` swap names (``p -> tmp``, ``r -> p``, ``tmp -> r``), so ``p`` now means the column ``r``
was. delta-rs has no rename (its ``TableAlterer`` has none): the rename is the metaData action the
Delta protocol's "Column Mapping" section describes, committed as the next log version.

Oracles, none of them occflow's facts reader: the physical names in the ``_delta_log`` metaData
(``delta.columnMapping.physicalName`` of each field, read here from the JSON), and the files
delta-rs's own delete removes (their ``partitionValues`` are keyed by physical name).
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.core.footprint import footprints_overlap
from occflow.leases import LeaseRequest, cached_store
from occflow.operators.admission import AdmissionSettings, admit
from occflow.operators.delta import DeltaWriteOperator

pytestmark = pytest.mark.airflow

_LOG = logging.getLogger(__name__)


def _actions(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every action of the table's log, with its version, in order."""
    out = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        out += [(int(file.stem), json.loads(line)) for line in file.read_text().splitlines() if line.strip()]
    return out


def _physical_names(path: Path) -> dict[str, str]:
    """Logical column -> ``delta.columnMapping.physicalName``, from the newest metaData action."""
    meta = [a["metaData"] for _, a in _actions(path) if "metaData" in a][-1]
    return {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in json.loads(meta["schemaString"])["fields"]}


def _key(physical: str, value: str) -> str:
    """A lease key on a physical column: Delta's generated names are ``col-`` + a UUID, and a key
    column holds letters, digits and ``_``."""
    assert re.fullmatch(r"col-[0-9a-f-]{36}", physical), physical
    return f"{physical.replace('-', '_')}={value}"


def _mapped_table(path: Path) -> None:
    rows = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "p": ["1", "1", "2", "2"], "r": ["1", "2", "1", "2"]})
    write_deltalake(
        str(path), rows, partition_by=["p", "r"],
        configuration={"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
    )


def _rename_swapping_p_and_r(path: Path) -> None:
    """``ALTER TABLE RENAME COLUMN`` three times (``p -> tmp``, ``r -> p``, ``tmp -> r``) as one
    metaData action: the fields keep their physical names and ids, only their names change."""
    version, meta = [(v, a["metaData"]) for v, a in _actions(path) if "metaData" in a][-1]
    schema = json.loads(meta["schemaString"])
    for field in schema["fields"]:
        field["name"] = {"p": "r", "r": "p"}.get(field["name"], field["name"])
    meta = {**meta, "schemaString": json.dumps(schema), "partitionColumns": ["r", "p"]}
    info = {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "RENAME COLUMN", "operationParameters": {}}}
    latest = max(v for v, _ in _actions(path))
    assert latest >= version
    (path / "_delta_log" / f"{latest + 1:020d}.json").write_text(json.dumps(info) + "\n" + json.dumps({"metaData": meta}) + "\n")


def _delete(path: Path, task_id: str, partitions: dict[str, str]) -> DeltaWriteOperator:
    return DeltaWriteOperator(task_id=task_id, table="lake.t", path=str(path), operation="delete", partitions=partitions)


def _refuse_deferral(**kwargs: Any) -> None:
    raise AssertionError(f"expected a lease at once, the write would defer: {kwargs}")


def test_claims_across_a_rename_are_keyed_by_the_physical_column_the_log_names(tmp_path: Path) -> None:
    path, url = tmp_path / "t", f"sqlite:///{tmp_path / 'leases.db'}"
    _mapped_table(path)
    before = _physical_names(path)
    settings = AdmissionSettings(store_url=url, lease_ttl=1.0, wait_seconds=0)

    first = _delete(path, "first", {"p": "1"}).declare()  # p = '1' while p is the column named p first
    assert first.partitions == ({"p": "1"},)  # what the user sees keeps the logical name
    lease_first = admit(settings, first, {}, _LOG, _refuse_deferral)
    assert lease_first is not None and lease_first.partitions == {_key(before["p"], "1")}

    _rename_swapping_p_and_r(path)
    after = _physical_names(path)
    assert (after["p"], after["r"]) == (before["r"], before["p"])  # the log: p now stores what r did

    second = _delete(path, "second", {"p": "2"}).declare()  # the same logical column, another value
    assert second.partitions == ({"p": "2"},)
    physical_second = LeaseRequest.from_declaration(second.admission_claim(), ttl=30)
    assert physical_second.partitions == {_key(before["r"], "2")}
    store = cached_store(url)
    # By logical names p=1 and p=2 are disjoint; they name different stored columns, so they are not.
    assert not footprints_overlap(first.partition_keys(), second.partition_keys())
    assert [b.lease_id for b in store.blocking_leases(physical_second)] == [lease_first.lease_id]
    # A write keyed by logical names (one that does not read the mapping) shares no key column with
    # a physical claim: kept apart, never called disjoint.
    assert [b.lease_id for b in store.blocking_leases(LeaseRequest.from_declaration(second, ttl=30))] == [
        lease_first.lease_id
    ]

    # r = '2' is now the physical column the first write named, at another value: truly disjoint.
    apart = _delete(path, "apart", {"r": "2"}).declare().admission_claim()
    assert apart.partition_keys() == {_key(before["p"], "2")}
    assert store.blocking_leases(LeaseRequest.from_declaration(apart, ttl=30)) == []
    # r = '1' is the first write's own partition under its new name: one claim, whatever it is called.
    together = _delete(path, "together", {"r": "1"}).declare().admission_claim()
    assert together.partition_keys() == lease_first.partitions

    # The commit fence follows the claim: once the first lease lapses, the second write fences it
    # out and the disjoint one does not.
    time.sleep(max(0.0, lease_first.expires.timestamp() - time.time()) + 0.3)
    settings = AdmissionSettings(store_url=url, lease_ttl=30.0, wait_seconds=0)
    lease_apart = admit(settings, _delete(path, "apart", {"r": "2"}).declare(), {}, _LOG, _refuse_deferral)
    assert lease_apart is not None and store.commit_fence(lease_apart).supersedes == ()
    store.release(lease_apart)
    lease_second = admit(settings, second, {}, _LOG, _refuse_deferral)
    assert lease_second is not None and store.commit_fence(lease_second).supersedes == (lease_first.lease_id,)

    # The engine's record: delta-rs's delete of p = '2' removes the file stored under (p=1, r=2) as
    # the table was created, which the first write (p = '1' then) reads too.
    DeltaTable(str(path)).delete("p = '2'")
    last = max(v for v, _ in _actions(path))
    removed = [a["remove"]["partitionValues"] for v, a in _actions(path) if v == last and "remove" in a]
    assert {(pv[before["p"]], pv[before["r"]]) for pv in removed} == {("1", "2"), ("2", "2")}


def test_a_write_after_a_rename_reports_the_logical_names_and_is_keyed_by_the_physical_one(
    run_dag: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    location, store = tmp_path / "t", tmp_path / "leases.db"
    _mapped_table(location)
    _rename_swapping_p_and_r(location)
    physical = _physical_names(location)
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{store}")
    monkeypatch.setenv("OCCFLOW_LEASE_HISTORY", "1")
    run = run_dag(
        f"""
        import pendulum
        from airflow.sdk import DAG
        from occflow.operators.delta import DeltaWriteOperator

        with DAG("column_mapped_delete", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
            DeltaWriteOperator(task_id="delete_p2", table="lake.t", path={str(location)!r},
                               operation="delete", partitions={{"p": "2"}})
        """,
        dag_id="column_mapped_delete",
    )
    assert run.state == "success"
    report = run.task("delete_p2").xcom["return_value"]
    assert report["partitions"] == [{"p": "2"}], report  # the report: the name the task declared
    removed = [a["remove"]["partitionValues"] for v, a in _actions(location) if v == report["version"] and "remove" in a]
    assert removed and all(pv[physical["p"]] == "2" for pv in removed)  # delta-rs deleted by p's physical column
    import sqlalchemy as sa

    with sa.create_engine(f"sqlite:///{store}").connect() as conn:
        granted = [json.loads(r[0]) for r in conn.execute(sa.text("SELECT partitions FROM occflow_lease_events WHERE kind = 'grant'"))]
    assert granted == [[_key(physical["p"], "2")]], granted

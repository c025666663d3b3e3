"""Delta column mapping in a write's footprint (issue 33, item 2), on real delta-rs.

Under column mapping a partition column's values are stored under its physical name; a rename
changes the logical name only, so after ``a``/``b`` are swapped, ``a = '2'`` means what ``b = '2'``
meant before. Keyed by logical names, a write admitted before the rename and one admitted after
look disjoint while the engine removes a file both reach; keyed by the physical column they
overlap. The oracle is delta-rs: the ``partitionValues`` (physical keys) of the files its log
records as removed. The rename is a metaData action, as the Delta protocol writes one (delta-rs
has no rename), committed as the next log version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.core.errors import InvalidDeclarationError
from occflow.core.footprint import footprints_overlap, specs_overlap
from occflow.core.sqlderive import derive_write
from occflow.core.tablefacts import OlderSpec, TableFacts, physical_key_column
from occflow.engines.deltars.facts import deltars_table_facts


def _log(path: Path, version: int) -> list[dict[str, Any]]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _mapped_table(path: Path) -> dict[str, str]:
    """Partitioned by (a, b) under column mapping 'name'; returns logical -> physical names."""
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "a": ["1", "2", "1"], "b": ["2", "1", "1"]})
    write_deltalake(
        str(path), rows, partition_by=["a", "b"],
        configuration={"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"},
    )
    return {f.name: f.metadata["delta.columnMapping.physicalName"] for f in DeltaTable(str(path)).schema().fields}


def _rename_swapping_a_and_b(path: Path) -> None:
    meta = next(a["metaData"] for a in _log(path, 0) if "metaData" in a)
    schema = json.loads(meta["schemaString"])
    for f in schema["fields"]:
        f["name"] = {"a": "b", "b": "a"}.get(f["name"], f["name"])
    meta = {**meta, "schemaString": json.dumps(schema), "partitionColumns": ["b", "a"]}
    info = {"commitInfo": {"timestamp": 1, "operation": "RENAME COLUMN", "operationParameters": {}}}
    (path / "_delta_log" / f"{1:020d}.json").write_text(json.dumps(info) + "\n" + json.dumps({"metaData": meta}) + "\n")


def _reach_keys(facts: TableFacts, sql: str) -> frozenset[str] | None:
    derived = derive_write(sql, list(facts.partition_columns), facts.engine, column_types=facts.partition_column_types)
    reach = facts.reach(derived.operation, derived.partitions).partitions
    return None if reach is None else frozenset("/".join(f"{c}={v}" for c, v in sorted(p.items())) for p in reach)


def test_the_facts_name_each_partition_column_by_the_physical_column_delta_rs_stores(tmp_path: Path) -> None:
    physical = _mapped_table(tmp_path / "t")
    facts = deltars_table_facts(tmp_path / "t", table="db.t")
    assert dict(facts.physical_columns) == {"a": physical["a"], "b": physical["b"]}
    stored = {k for a in _log(tmp_path / "t", 0) if "add" in a for k in a["add"]["partitionValues"]}
    assert stored == set(facts.physical_columns.values())  # the log keys partitions by those names
    assert TableFacts.from_json(facts.to_json()) == facts
    plain = tmp_path / "plain"
    write_deltalake(str(plain), pa.table({"id": [1], "a": ["1"]}), partition_by=["a"])
    assert dict(deltars_table_facts(plain).physical_columns) == {}  # no mapping: names are the columns


def test_writes_keyed_across_a_rename_overlap_where_the_engine_removes_a_file_both_reach(tmp_path: Path) -> None:
    path = tmp_path / "t"
    physical = _mapped_table(path)
    before = deltars_table_facts(path, table="db.t")
    first = "DELETE FROM db.t WHERE a = '1'"  # admitted before the rename: physical column of a
    _rename_swapping_a_and_b(path)
    after = deltars_table_facts(path, table="db.t")
    assert dict(after.physical_columns) == {"a": physical["b"], "b": physical["a"]}
    second = "DELETE FROM db.t WHERE a = '2'"  # admitted after: a now names b's physical column

    logical = [derive_write(sql, ["a", "b"]).partition_keys() for sql in (first, second)]
    assert not footprints_overlap(*logical)  # the old keying: called disjoint
    keyed = (_reach_keys(before, first), _reach_keys(after, second))
    col_a, col_b = physical_key_column(physical["a"]), physical_key_column(physical["b"])
    assert keyed == (frozenset({f"{col_a}=1"}), frozenset({f"{col_b}=2"}))
    assert footprints_overlap(*keyed)

    DeltaTable(str(path)).delete("a = '2'")  # the second write, as delta-rs runs it
    removed = [a["remove"] for a in _log(path, 2) if "remove" in a]
    assert len(removed) == 1
    values = removed[0]["partitionValues"]
    assert values == {physical["a"]: "1", physical["b"]: "2"}  # the engine's own record
    # That file is inside both writes' reach: the first write (a = '1' before the rename) reads it too.
    stored = {physical_key_column(c): v for c, v in values.items()}
    assert specs_overlap(stored, {col_a: "1"}) and specs_overlap(stored, {col_b: "2"})


def test_facts_that_cannot_hold_are_refused_naming_the_table_and_the_column() -> None:
    with pytest.raises(InvalidDeclarationError, match=r"db\.t has no partition column 'id' to give a physical name"):
        TableFacts("db.t", "delta", "delta-rs", ("ds",), physical_columns={"id": "col-1"})
    with pytest.raises(InvalidDeclarationError, match=r"db\.t is a delta table: only Iceberg tables keep older"):
        TableFacts("db.t", "delta", "delta-rs", ("ds",), older_specs=(OlderSpec(0, ("a",)),))

"""A value assigned to a typed partition column that the engine cannot cast (issue 33): delta-rs
casts it only for a row that reaches the assignment, so the statement commits when no row does
(the typed fuzzer's finding, ``tests/engines/sqlgen.py``). The derivation must not refuse such a
write, and must hold what the commit touched. The oracle is delta-rs's own log."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.sqlderive import derive_write

deltalake = pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")
TYPES = {"p": "integer"}


def _table(path: Path) -> deltalake.DeltaTable:
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "p": pa.array([7, 8], pa.int32()), "v": [0, 0]})
    deltalake.write_deltalake(str(path), rows, partition_by=["p"])
    return deltalake.DeltaTable(str(path))


def _touched(path: Path) -> set[str | None]:
    """The ``p`` of every file the commits after version 0 added or removed (the log's own record)."""
    found: set[str | None] = set()
    for log in sorted((path / "_delta_log").glob("*.json"))[1:]:
        for line in log.read_text().splitlines():
            action = json.loads(line)
            for key in ("add", "remove"):
                if key in action:
                    found.add((action[key].get("partitionValues") or {}).get("p"))
    return found


MERGE = ("MERGE INTO db.t t USING (SELECT * FROM VALUES (100, 9, 0) AS src(id, p, v)) s ON t.id = s.id "
         "WHEN MATCHED THEN UPDATE SET t.p = 'x' WHEN NOT MATCHED BY SOURCE AND t.p = 8 THEN DELETE")


def test_a_merge_whose_uncastable_assignment_no_row_reaches_commits_and_is_derived(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    source = pa.table({"id": pa.array([100], pa.int64()), "p": pa.array([9], pa.int32()), "v": [0]})
    (table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update(updates={"p": "'x'"})
     .when_not_matched_by_source_delete(predicate="t.p = 8")
     .execute())
    assert _touched(tmp_path / "t") == {"8"}  # delta-rs committed the delete: 'x' was never cast
    derived = derive_write(MERGE, ["p"], "delta-rs", column_types=TYPES)  # not refused
    assert derived.partitions is None or derived.partition_keys() >= {"p=8"}


def test_an_update_whose_uncastable_assignment_a_row_reaches_is_refused_by_delta_rs(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(Exception, match="(?i)cast"):
        table.update(updates={"p": "'x'"}, predicate="p = 7")
    assert _touched(tmp_path / "t") == set()  # nothing committed
    sql = "UPDATE db.t SET p = 'x' WHERE p = 7"
    # Admitted as the whole table (the engine decides at run time), never narrower.
    assert derive_write(sql, ["p"], "delta-rs", column_types=TYPES).partitions is None


def test_a_compared_literal_the_engine_cannot_cast_is_still_refused(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    with pytest.raises(Exception, match="(?i)cast"):
        table.delete("p = 'x'")  # planned, so refused with no row read
    with pytest.raises(InvalidDeclarationError, match="p compared with 'x'"):
        derive_write("DELETE FROM db.t WHERE p = 'x'", ["p"], "delta-rs", column_types=TYPES)

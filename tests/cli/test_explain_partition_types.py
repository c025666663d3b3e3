"""``occflow explain`` keys a partition literal by the value the engine compares when it knows
the column's type: from ``--partition-type`` or from the table itself (``--delta-location``).

The oracle is delta-rs's own record: the same DELETE runs on a real table partitioned by an INT
column and the partitions its commit removed are read from the ``_delta_log``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from occflow.cli import main

PREDICATES = ["p = '07'", "p IN ('07', '008')", "p = ' 7'"]


def _table(path: Path) -> str:
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": pa.array([7, 8, 70], pa.int32())})
    write_deltalake(str(path), rows, partition_by=["p"])
    return str(path)


def _removed_by_delta_rs(location: str, predicate: str) -> set[str]:
    table = DeltaTable(location)
    table.delete(predicate)
    version = table.version()
    log = Path(location) / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {f"p={a['remove']['partitionValues']['p']}" for a in actions if "remove" in a}


def _explained(capsys: pytest.CaptureFixture[str], *args: str) -> set[str]:
    assert main(["explain", *args, "--format", "json"]) == 0
    partitions = json.loads(capsys.readouterr().out)["partitions"]
    assert partitions is not None
    return {"/".join(f"{k}={v}" for k, v in spec.items()) for spec in partitions}


@pytest.mark.parametrize("predicate", PREDICATES)
def test_explain_names_the_partitions_delta_rs_rewrites(predicate, tmp_path, capsys) -> None:
    location = _table(tmp_path / "t")
    sql = f"DELETE FROM t WHERE {predicate}"
    given = _explained(capsys, sql, "--table-format", "delta-rs", "--partition-columns", "p", "--partition-type", "p=int")
    read = _explained(capsys, sql, "--delta-location", location)
    truth = _removed_by_delta_rs(location, predicate)
    assert truth and given == read == truth, (predicate, given, read, truth)


def test_a_type_for_a_column_that_is_not_a_partition_column_is_refused(capsys) -> None:
    code = main(["explain", "DELETE FROM t WHERE p = 1", "--table-format", "delta-rs", "--partition-columns", "p",
                 "--partition-type", "q=int"])
    assert code != 0
    assert "q" in capsys.readouterr().err

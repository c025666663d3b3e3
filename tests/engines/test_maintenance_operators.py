"""The write operators take maintenance operations, and refuse an unsafe retention at DAG parse
time (an import error naming the value and the minimum) unless the task says so in so many words."""

from __future__ import annotations

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.operators.delta import DeltaWriteOperator
from occflow.operators.spark import SparkWriteOperator

EXPIRE_ALL = (
    "CALL lake.system.expire_snapshots(table => 'db.events', "
    "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
)


def test_delta_vacuum_below_the_floor_fails_the_dag_import(tmp_path) -> None:
    with pytest.raises(InvalidDeclarationError, match=r"t: vacuum retention_hours=1 is below the safe minimum of 168"):
        DeltaWriteOperator(task_id="t", table="db.events", path=str(tmp_path / "t"), operation="vacuum", retention_hours=1)
    ok = DeltaWriteOperator(
        task_id="t", table="db.events", path=str(tmp_path / "t"), operation="vacuum",
        retention_hours=0, allow_unsafe_retention=True,
    )
    assert ok.occflow_write.operation is Operation.VACUUM
    with pytest.raises(InvalidDeclarationError, match="merge takes no retention"):
        DeltaWriteOperator(task_id="m", table="db.events", path=str(tmp_path / "t"), operation="merge",
                           data=[], merge_keys=["id"], retention_hours=200)


def test_iceberg_expire_below_the_floor_fails_the_dag_import() -> None:
    with pytest.raises(InvalidDeclarationError, match=r"e \(its SQL job\): expire_snapshots older_than_hours=0 is below the safe minimum of 120"):
        SparkWriteOperator(task_id="e", table="lake.db.events", table_format="iceberg", job=EXPIRE_ALL)
    ok = SparkWriteOperator(
        task_id="e", table="lake.db.events", table_format="iceberg", job=EXPIRE_ALL, allow_unsafe_retention=True
    )
    assert ok.occflow_write.operation is Operation.EXPIRE_SNAPSHOTS
    assert ok.occflow_write.partitions is None  # the whole table
    default = SparkWriteOperator(
        task_id="d", table="lake.db.events", table_format="iceberg",
        job="CALL lake.system.expire_snapshots(table => 'db.events')",
    )
    assert default.occflow_write.operation is Operation.EXPIRE_SNAPSHOTS

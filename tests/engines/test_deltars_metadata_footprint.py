"""A schema or protocol change reaches the whole table, whatever partitions it was declared with.

The engine's record first: on real delta-rs, a DELETE of partition a planned before a schema
change (or a protocol upgrade) commits fails, though the change names no partition a. So
admission must keep such a change declared on partition b apart from a write of partition a
wherever the matrix says the two operations conflict: checked on the real SQLite store and,
for every profile and operation, against the matrix cells read directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, get_profile
from occflow.leases import LeaseRequest, LeaseStore

pa = pytest.importorskip("pyarrow", reason="delta-rs tests need pyarrow")
pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")

from occflow.engines.deltars.table import DeltaRsTable  # noqa: E402


def test_delta_rs_fails_a_write_of_another_partition_that_ran_across_a_schema_change(tmp_path: Path) -> None:
    table = DeltaRsTable(tmp_path / "t")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "ds": ["a", "b"]})
    assert table.create(rows, partition_by=["ds"]).committed
    snapshot = table.load()  # the DELETE of partition a plans here
    assert table.add_columns({"note": "string"}).committed
    lost = table.delete(partition={"ds": "a"}, snapshot=snapshot)
    assert not lost.committed
    assert lost.classification is not None and lost.classification.kind.value == "metadata_changed", lost
    assert table.load().to_pyarrow_table().num_rows == 2  # nothing deleted


def test_the_store_keeps_a_partition_declared_schema_change_apart_from_other_partitions(tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    try:
        alter = store.decide(LeaseRequest.create("db.t", "alter_metadata", "delta-rs", [{"ds": "b"}]))
        assert alter.lease is not None
        delete = store.decide(LeaseRequest.create("db.t", "delete", "delta-rs", [{"ds": "a"}]))
        assert delete.lease is None and [b.operation for b in delete.blockers] == ["alter_metadata"]
    finally:
        store.dispose()


def test_delta_rs_fails_a_write_of_another_partition_that_ran_across_a_protocol_upgrade(tmp_path: Path) -> None:
    from deltalake import DeltaTable, TableFeatures
    from deltalake.exceptions import CommitFailedError

    table = DeltaRsTable(tmp_path / "t")
    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "ds": ["a", "b"]})
    assert table.create(rows, partition_by=["ds"]).committed
    stale = DeltaTable(str(tmp_path / "t"))  # the DELETE of partition a plans here
    DeltaTable(str(tmp_path / "t")).alter.add_feature(TableFeatures.ChangeDataFeed,
                                                       allow_protocol_versions_increase=True)
    with pytest.raises(CommitFailedError, match="Protocol changed"):
        stale.delete("ds = 'a'")
    assert table.load().to_pyarrow_table().num_rows == 2  # nothing deleted


@pytest.mark.parametrize("change", [Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL])
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_every_operation_on_another_partition_is_blocked_exactly_where_the_cells_conflict(
    profile_name: str, change: Operation
) -> None:
    profile = get_profile(profile_name)
    if change not in profile.operations:
        pytest.skip(f"{profile_name} has no {change.value} operation")
    alter = change
    schema_change = LeaseRequest.create("db.t", alter, profile, [{"ds": "b"}]).claim
    for operation in profile.operations:
        other = LeaseRequest.create("db.t", operation, profile, [{"ds": "a"}]).claim
        # The cells, read directly: either commit order fails.
        conflict = not profile.commit_is_clean(alter, operation) or not profile.commit_is_clean(operation, alter)
        assert schema_change.blocks(other) == other.blocks(schema_change) == conflict, (profile_name, operation)

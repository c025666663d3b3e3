"""expire_snapshots on real pyiceberg tables (SQL catalog on SQLite): the failure a nightly expire
causes a running writer, reproduced with pyiceberg alone, and the lease store preventing it; the
retention floor; which snapshots go (checked against the snapshot log by brute force); the tag the
ledger finds.

The story: an hourly writer overwrites its partition; while it prepares, another writer appends to
another partition, and a nightly expire with a short retention removes every snapshot but the
head, the one the hourly writer started from among them. pyiceberg's expire deletes no file (it
only drops snapshots from the metadata), so nothing is lost on storage; but the hourly writer's
commit, which lost the catalog's compare-and-swap to the append, re-reads the table and cannot find
the snapshot it started from: ``ValidationException: Cannot find starting snapshot``.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

import pyarrow as pa  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.exceptions import ValidationException  # noqa: E402
from pyiceberg.expressions import EqualTo  # noqa: E402
from pyiceberg.partitioning import PartitionField, PartitionSpec  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.table import Table  # noqa: E402
from pyiceberg.transforms import IdentityTransform  # noqa: E402
from pyiceberg.types import LongType, NestedField, StringType  # noqa: E402

from occflow.core.errors import InvalidDeclarationError  # noqa: E402
from occflow.core.kinds import ConflictKind  # noqa: E402
from occflow.core.operations import Operation  # noqa: E402
from occflow.engines.pyiceberg import CommitOptions, PyIcebergLedger, PyIcebergTable  # noqa: E402
from occflow.engines.pyiceberg.maintenance import expire_snapshots, expired_ids  # noqa: E402
from occflow.engines.pyiceberg.target import PyIcebergTarget, PyIcebergWrite  # noqa: E402
from occflow.engines.tags import CommitTag  # noqa: E402
from occflow.leases import LeaseRequest, LeaseStore  # noqa: E402

PROFILE = "pyiceberg-serializable"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ds", StringType(), required=False),
    NestedField(3, "v", LongType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "ds"))
HOURLY = {"ds": "a"}


def rows(ids: list[int], ds: str, v: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "ds": [ds] * len(ids), "v": pa.array([v] * len(ids), pa.int64())})


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlCatalog]:
    root = tmp_path_factory.mktemp("pyiceberg-maintenance")
    loaded = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=(root / "warehouse").as_uri())
    loaded.create_namespace("db")
    yield loaded
    loaded.engine.dispose()


_COUNT = [0]


@pytest.fixture
def table(catalog: SqlCatalog) -> PyIcebergTable:
    """Partitions ``a`` and ``b``, three snapshots (three appends), no wait between commit retries."""
    _COUNT[0] += 1
    name = f"db.nightly{_COUNT[0]}"
    created = catalog.create_table(name, SCHEMA, partition_spec=SPEC, properties={"commit.retry.min-wait-ms": "0"})
    for batch in (rows([1, 2], "a"), rows([3, 4], "a"), rows([1, 2], "b")):
        created.append(batch)
    return PyIcebergTable(catalog, name)


def content(table: PyIcebergTable) -> list[tuple[Any, ...]]:
    return sorted((r["ds"], r["id"], r["v"]) for r in table.load().scan().to_arrow().to_pylist())


def serial(table: PyIcebergTable) -> list[tuple[Any, ...]]:
    """The three writes one after the other, as the oracle: a replaced by the hourly rows, b kept
    with the appended row (computed from the table's rows before the writes)."""
    before = content(table)
    return sorted([r for r in before if r[0] != "a"] + [("a", 10, 1), ("a", 11, 1), ("b", 9, 0)])


def log(table: PyIcebergTable) -> list[int]:
    return [entry.snapshot_id for entry in table.load().metadata.snapshot_log]


def test_an_expire_fails_the_running_writer_it_removed_the_starting_snapshot_of_without_admission(
    table: PyIcebergTable,
) -> None:
    """pyiceberg alone: no occflow call between the writer's read and its failure."""
    writer: Table = table.load()  # the hourly overwrite has planned on the head
    started_from = writer.current_snapshot()
    assert started_from is not None
    table.load().append(rows([9], "b"))  # another writer commits meanwhile
    table.load().maintenance.expire_snapshots().older_than(dt.datetime.now(dt.timezone.utc)).commit()
    assert started_from.snapshot_id not in log(table)
    before = content(table)

    with warnings.catch_warnings(), pytest.raises(ValidationException) as raised:
        warnings.simplefilter("ignore")  # pyiceberg warns of its commit retry
        writer.overwrite(rows([10, 11], "a", 1), overwrite_filter=EqualTo("ds", "a"))

    assert str(raised.value) == f"Cannot find starting snapshot {started_from.snapshot_id}"
    assert content(table) == before  # the overwrite wrote nothing
    assert len(log(table)) == 1  # the append's snapshot only: the expire removed the rest


def test_admission_keeps_the_expire_behind_the_running_writer_and_every_write_commits(
    table: PyIcebergTable, tmp_path: Path
) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    hourly = store.decide(LeaseRequest.create(table.identifier, "insert_overwrite", PROFILE, [HOURLY]))
    assert hourly.lease is not None
    writer = table.load()
    oracle = serial(table)
    # The other partition's append runs beside it (pyiceberg validates the overwrite by its filter).
    other = store.decide(LeaseRequest.create(table.identifier, "insert_into", PROFILE, [{"ds": "b"}]))
    assert other.lease is not None
    assert table.append(rows([9], "b")).committed
    store.release(other.lease)
    nightly = LeaseRequest.create(table.identifier, "expire_snapshots", PROFILE, whole_table=True)
    assert store.decide(nightly).lease is None, "the expire was let run beside the hourly writer"

    written = table.overwrite(rows([10, 11], "a", 1), where=HOURLY, snapshot=writer)
    assert written.committed, written.error
    store.release(hourly.lease)
    expire = store.decide(nightly)
    assert expire.lease is not None
    swept = expire_snapshots(table, older_than_hours=0, allow_unsafe_retention=True)
    assert swept.committed, swept.error
    store.release(expire.lease)

    assert content(table) == oracle
    assert log(table) == [table.load().current_snapshot().snapshot_id]  # type: ignore[union-attr]
    assert len(expired_ids(swept)) == 5  # three seed appends, the append, the overwrite's delete


def test_without_admission_occflow_reads_the_failure_as_a_lost_race_to_retry(table: PyIcebergTable) -> None:
    writer = table.load()
    assert table.append(rows([9], "b")).committed
    assert expire_snapshots(table, older_than_hours=0, allow_unsafe_retention=True).committed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lost = table.overwrite(rows([10, 11], "a", 1), where=HOURLY, snapshot=writer)
    assert not lost.committed
    assert lost.classification is not None and lost.classification.kind is ConflictKind.VALIDATION_CONFLICT
    assert lost.error is not None and "Cannot find starting snapshot" in lost.error.text


def test_a_retention_below_the_floor_is_refused_and_commits_nothing(table: PyIcebergTable) -> None:
    location = table.load().metadata_location
    with pytest.raises(InvalidDeclarationError, match=r"older_than_hours=24 is below the safe minimum of 120 hours"):
        expire_snapshots(table, older_than_hours=24)
    table.load().transaction().set_properties({"history.expire.max-snapshot-age-ms": str(10 * 24 * 3_600_000)}).commit_transaction()
    location = table.load().metadata_location
    with pytest.raises(
        InvalidDeclarationError,
        match=r"minimum of 240 hours \(the table's history.expire.max-snapshot-age-ms\)",
    ):
        expire_snapshots(table, older_than_hours=200)
    with pytest.raises(InvalidDeclarationError, match=r"retain_last=0: .* a whole number >= 1"):
        expire_snapshots(table, older_than_hours=0, retain_last=0, allow_unsafe_retention=True)
    assert table.load().metadata_location == location
    assert len(log(table)) == 3
    # The default retention is the table's 10 days: these snapshots are younger, nothing goes.
    kept = expire_snapshots(table)
    assert kept.committed and expired_ids(kept) == [] and table.load().metadata_location == location


def test_the_target_refuses_a_short_retention_and_retain_last_elsewhere_at_parse_time() -> None:
    with pytest.raises(InvalidDeclarationError, match=r"t1: expire_snapshots older_than_hours=1 is below the safe minimum"):
        PyIcebergWrite(older_than_hours=1).check(Operation.EXPIRE_SNAPSHOTS, "t1")
    PyIcebergWrite(older_than_hours=1, allow_unsafe_retention=True).check(Operation.EXPIRE_SNAPSHOTS, "t1")
    with pytest.raises(InvalidDeclarationError, match=r"t2: insert_into takes no retention"):
        PyIcebergWrite(data=rows([1], "a"), older_than_hours=200).check(Operation.INSERT_INTO, "t2")
    with pytest.raises(InvalidDeclarationError, match=r"t3: retain_last is expire_snapshots', not delete's"):
        PyIcebergWrite(retain_last=2).check(Operation.DELETE, "t3")
    with pytest.raises(InvalidDeclarationError, match=r"t4: expire_snapshots .* takes no where="):
        PyIcebergWrite(where={"ds": "a"}).check(Operation.EXPIRE_SNAPSHOTS, "t4")


@pytest.mark.parametrize("retain_last", [1, 2, 4])
def test_the_expired_snapshots_are_the_old_ones_beyond_the_newest_kept(table: PyIcebergTable, retain_last: int) -> None:
    for i in range(2):
        assert table.append(rows([20 + i], "b")).committed
    current = table.load()
    # Oldest first, as main's log records them (a linear history: the log is the ancestry).
    snapshots = [current.metadata.snapshot_by_id(e.snapshot_id) for e in current.metadata.snapshot_log]
    assert len(snapshots) == 5 and all(s is not None for s in snapshots)
    # A cutoff at the newest snapshot: every other is old enough, retain_last alone decides; the
    # brute-force oracle walks the log.
    cutoff_ms = snapshots[4].timestamp_ms  # type: ignore[union-attr]
    now = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=cutoff_ms)
    newest = [s.snapshot_id for s in reversed(snapshots)][:retain_last]  # type: ignore[union-attr]
    expected = sorted(s.snapshot_id for s in snapshots if s.timestamp_ms < cutoff_ms and s.snapshot_id not in newest)  # type: ignore[union-attr]
    before = content(table)

    swept = expire_snapshots(table, older_than_hours=0, retain_last=retain_last, allow_unsafe_retention=True, now=now)

    assert swept.committed, swept.error
    assert expired_ids(swept) == expected
    assert sorted({s.snapshot_id for s in snapshots} - set(log(table))) == expected  # type: ignore[union-attr]
    assert content(table) == before  # an expire changes no row


def test_the_expire_carries_its_tag_in_the_same_commit_and_the_ledger_finds_it(table: PyIcebergTable) -> None:
    tag = CommitTag.create("nightly", "expire", "run1", "expire_snapshots", try_number=1)
    ledger = PyIcebergLedger(table)
    assert ledger.find_commit(tag) is None
    with ledger.tagging(tag):
        swept = expire_snapshots(
            table, older_than_hours=0, allow_unsafe_retention=True,
            commit=CommitOptions(metadata={"occflow.operation": "expire_snapshots"}),
        )
    assert swept.committed and len(expired_ids(swept)) == 2
    assert swept.metadata_commit is not None and swept.metadata_commit.location == table.load().metadata_location
    found = ledger.find_commit(tag)
    assert found is not None and found.tag == tag
    props = table.load().properties
    assert props["occflow.expire-snapshots.occflow.operation"] == "expire_snapshots"


def test_the_target_runs_an_expire_as_a_built_in_operation(table: PyIcebergTable) -> None:
    from occflow.core.declaration import WriteDeclaration
    from occflow.engines.target import AttemptContext

    target = PyIcebergTarget(_config_of(table), table.identifier,
                             PyIcebergWrite(older_than_hours=0, allow_unsafe_retention=True))
    declaration = WriteDeclaration.create(table=table.identifier, operation="expire_snapshots", profile=PROFILE)
    outcome = target.run_attempt(declaration, AttemptContext(number=1))
    assert outcome.committed and len(expired_ids(outcome)) == 2
    assert target.observe_commit(outcome) is None  # no snapshot to read a footprint from


def _config_of(table: PyIcebergTable) -> Any:
    from occflow.engines.pyiceberg import CatalogConfig

    engine = table.catalog.engine  # type: ignore[attr-defined]
    return CatalogConfig("lake", {"type": "sql", "uri": str(engine.url), "warehouse": table.catalog.properties["warehouse"]})


def test_of_two_expires_planned_on_one_snapshot_the_later_plans_again_where_pyiceberg_fails_it(
    table: PyIcebergTable,
) -> None:
    first, second, raw = table.load(), table.load(), table.load()
    earlier = expire_snapshots(table, older_than_hours=0, allow_unsafe_retention=True, snapshot=first)
    assert earlier.committed and len(expired_ids(earlier)) == 2
    # pyiceberg alone: the stale plan's ids are gone, the catalog's update raises (nothing committed).
    location = table.load().metadata_location
    planned = [s.snapshot_id for s in raw.snapshots() if s.snapshot_id != raw.current_snapshot().snapshot_id]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"^Snapshot with snapshot id -?\d+ does not exist: ") as raised:
        raw.maintenance.expire_snapshots().by_ids(planned).commit()
    assert int(str(raised.value).split()[4]) in planned  # one of the ids it planned, gone
    assert table.load().metadata_location == location
    # occflow's expire plans again on the table as it is now: nothing older is left but the head.
    later = expire_snapshots(table, older_than_hours=0, allow_unsafe_retention=True, snapshot=second)
    assert later.committed and expired_ids(later) == []
    assert log(table) == [table.load().current_snapshot().snapshot_id]  # type: ignore[union-attr]

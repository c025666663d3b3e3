"""The pyiceberg engine on real tables in a SQL catalog on SQLite: writes return outcomes, a lost
race is classified and names its winner, the ledger finds tagged commits, the observed footprint
and the facts are what pyiceberg's own metadata tables say, and bad input writes nothing.

Oracles the engine code does not share: pyiceberg's own ``inspect`` tables (``snapshots``,
``entries``) and scans, and the table's metadata as a second catalog connection loads it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

import pyarrow as pa  # noqa: E402
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.partitioning import PartitionField, PartitionSpec  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.transforms import IdentityTransform  # noqa: E402
from pyiceberg.types import IntegerType, LongType, NestedField, StringType  # noqa: E402

from occflow.core.declaration import WriteDeclaration  # noqa: E402
from occflow.core.errors import InvalidDeclarationError  # noqa: E402
from occflow.core.kinds import ConflictKind  # noqa: E402
from occflow.core.profiles import PROFILES  # noqa: E402
from occflow.core.profiles.pyiceberg import PROFILES as PYICEBERG_PROFILES  # noqa: E402
from occflow.engines.pyiceberg.catalog import CatalogConfig, mask_url  # noqa: E402
from occflow.engines.pyiceberg.commit import CommitOptions, ambient_tag  # noqa: E402
from occflow.engines.pyiceberg.facts import pyiceberg_table_facts  # noqa: E402
from occflow.engines.pyiceberg.ledger import PyIcebergLedger  # noqa: E402
from occflow.engines.pyiceberg.observed import observe_pyiceberg_commit  # noqa: E402
from occflow.engines.pyiceberg.table import PyIcebergTable  # noqa: E402
from occflow.engines.pyiceberg.target import PyIcebergTarget, PyIcebergWrite  # noqa: E402
from occflow.engines.tags import CommitTag  # noqa: E402

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ds", StringType(), required=False),
    NestedField(3, "v", IntegerType(), required=False),
)
_names = count()


def rows(ids: list[int], ds: str = "a", v: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "ds": [ds] * len(ids), "v": pa.array([v] * len(ids), pa.int32())})


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogConfig]:
    root = tmp_path_factory.mktemp("pyiceberg-engine")
    config = CatalogConfig("lake", {"uri": f"sqlite:///{root}/catalog.db", "warehouse": (root / "wh").as_uri()})
    loaded = config.load()
    loaded.create_namespace("db")
    yield config
    loaded.engine.dispose()  # type: ignore[attr-defined]


@pytest.fixture
def table(catalog: CatalogConfig) -> PyIcebergTable:
    """A fresh table partitioned by ds: rows 1-2 and 3 in ds=a (two files), row 4 in ds=b."""
    name = f"db.t{next(_names)}"
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "ds"))
    handle = PyIcebergTable(catalog, name)
    handle.catalog.create_table(name, SCHEMA, partition_spec=spec, properties={"commit.retry.min-wait-ms": "0"})
    for data in (rows([1, 2]), rows([3]), rows([4], ds="b")):
        assert handle.append(data).committed
    return handle


def other_view(catalog: CatalogConfig, name: str):  # type: ignore[no-untyped-def]
    """The table as a second catalog connection loads it (its own engine)."""
    second = SqlCatalog("lake", **{k: v for k, v in catalog.properties.items()})
    try:
        return second.load_table(name)
    finally:
        second.engine.dispose()


def test_an_overwrite_that_lost_is_classified_and_names_the_tagged_winner(table: PyIcebergTable, catalog: CatalogConfig) -> None:
    stale = table.load()  # the loser plans on this snapshot
    tag = CommitTag.create("dag", "winner_task", "run1", "delete", try_number=2)
    with ambient_tag(tag):
        won = table.delete({"ds": "a"}, commit=CommitOptions(metadata={"occflow.operation": "delete"}))
    assert won.committed and won.snapshot_id is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lost = table.overwrite(rows([9], v=9), where={"ds": "a"}, snapshot=stale)
    assert not lost.committed
    assert lost.classification is not None and lost.classification.kind is ConflictKind.VALIDATION_CONFLICT
    assert lost.error is not None and "Deleted data files were found matching the filter" in lost.error.text
    winner = lost.classification.winning_commit
    assert winner is not None
    # The oracle: pyiceberg's own snapshots table, read through another connection.
    snapshots = other_view(catalog, table.identifier).inspect.snapshots().to_pylist()
    assert winner.snapshot_id == snapshots[-1]["snapshot_id"] == won.snapshot_id
    assert (winner.task_id, winner.try_number, winner.tagged) == ("winner_task", 2, True)
    # Nothing of the loser is in the table: ds=a is empty, ds=b untouched.
    assert sorted(r["id"] for r in other_view(catalog, table.identifier).scan().to_arrow().to_pylist()) == [4]


def test_the_ledger_finds_a_tagged_write_and_not_an_untagged_one(table: PyIcebergTable) -> None:
    tag = CommitTag.create("dag", "append", "run1", "insert_into", try_number=1)
    other = CommitTag.create("dag", "append", "run2", "insert_into")
    ledger = PyIcebergLedger(table, only_if={"occflow.dag-id": "dag"})
    assert ledger.find_commit(tag) is None
    with ledger.tagging(tag):
        untagged = table.append(rows([7]), commit=CommitOptions(metadata={"occflow.dag-id": "someone-else"}))
        mine = table.append(rows([8]), commit=CommitOptions(metadata={"occflow.dag-id": "dag"}))
    found = ledger.find_commit(tag)
    assert found is not None and found.snapshot_id == mine.snapshot_id != untagged.snapshot_id
    assert ledger.find_commit(other) is None
    summary = {s["snapshot_id"]: s["summary"] for s in table.load().inspect.snapshots().to_pylist()}
    assert dict(summary[mine.snapshot_id])["occflow.write-id"] == tag.write_id
    assert "occflow.write-id" not in dict(summary[untagged.snapshot_id])


def test_a_schema_change_is_a_metadata_commit_the_ledger_finds(table: PyIcebergTable) -> None:
    tag = CommitTag.create("dag", "alter", "run1", "alter_metadata")
    ledger = PyIcebergLedger(table)
    before = table.load().metadata_location
    with ledger.tagging(tag):
        outcome = table.add_columns({"note": "string"})
    after = table.load()
    assert outcome.committed and outcome.snapshot_id is None
    assert outcome.metadata_commit is not None and outcome.metadata_commit.location == after.metadata_location != before
    assert [f.name for f in after.schema().fields] == ["id", "ds", "v", "note"]
    found = ledger.find_commit(tag)
    assert found is not None and found.version == outcome.metadata_commit.version


def test_the_observed_footprint_is_what_the_manifest_entries_say(table: PyIcebergTable) -> None:
    outcome = table.overwrite(rows([5]), where={"ds": "a"})
    assert outcome.committed
    ids = list(outcome.engine_details.get("snapshots") or [outcome.snapshot_id])
    observed = observe_pyiceberg_commit(table, ids)
    assert observed is not None
    # The oracle: pyiceberg's entries metadata table of each snapshot (status 1 added, 2 deleted).
    current = table.load()
    entries = [e for i in ids for e in current.inspect.entries(snapshot_id=i).to_pylist()]
    added = {f"ds={e['data_file']['partition']['ds']}" for e in entries if e["snapshot_id"] in ids and e["status"] == 1}
    removed = {f"ds={e['data_file']['partition']['ds']}" for e in entries if e["snapshot_id"] in ids and e["status"] == 2}
    assert observed.partitions_added == added == {"ds=a"}
    assert observed.partitions_removed == removed == {"ds=a"}


def test_facts_name_the_identity_partition_column_and_its_type(table: PyIcebergTable) -> None:
    facts = pyiceberg_table_facts(table)
    assert (facts.engine, facts.table_format, facts.partition_columns) == ("pyiceberg", "iceberg", ("ds",))
    assert facts.partition_column_types == {"ds": str(table.load().schema().find_field("ds").field_type)}


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda t: t.delete({"nope": 1}), "unknown column(s) nope; the table's columns are id, ds, v"),
        (lambda t: t.overwrite(rows([1]), where={"ds; DROP": "a"}), "unknown column(s) ds; DROP"),
        (lambda t: t.add_columns({"x": "varchar"}), "'varchar' is not an Iceberg primitive type"),
        (lambda t: t.merge(rows([1]), []), "needs at least one key column"),
    ],
)
def test_bad_input_is_an_error_naming_it_and_writes_nothing(table: PyIcebergTable, write, message) -> None:  # type: ignore[no-untyped-def]
    before = table.load()
    with pytest.raises(InvalidDeclarationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        write(table)
    after = table.load()
    assert after.metadata_location == before.metadata_location


def test_a_value_that_looks_like_sql_stays_a_literal(table: PyIcebergTable) -> None:
    outcome = table.delete({"ds": "a' OR '1'='1"})
    assert outcome.committed and outcome.snapshot_id is None  # matched nothing, so committed nothing
    assert sorted(r["id"] for r in table.load().scan().to_arrow().to_pylist()) == [1, 2, 3, 4]


def test_catalog_settings_are_checked_and_passwords_masked(tmp_path: Path) -> None:
    with pytest.raises(InvalidDeclarationError, match="a SQL catalog needs uri="):
        CatalogConfig("c", {"type": "sql", "warehouse": "file:///w"})
    with pytest.raises(InvalidDeclarationError, match="needs warehouse="):
        CatalogConfig("c", {"uri": "sqlite:///x.db"})
    config = CatalogConfig.from_connection(
        "c", "postgresql+psycopg2://occ:s3cret@db/cat", extra={"warehouse": "file:///w"}
    )
    assert config.kind == "sql" and "s3cret" not in config.describe()
    assert mask_url("postgresql://u:p@h/d") == "postgresql://u:***@h/d"
    rest = CatalogConfig.from_connection("r", "https://cat.example/v1", "client", "secret")
    assert rest.kind == "rest" and rest.properties["credential"] == "client:secret"


@pytest.fixture
def pyiceberg_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pyiceberg profiles in the registry (core/profiles/__init__.py lists them once the lead
    adds them; until then the test adds them, and this is a no-op after)."""
    for profile in PYICEBERG_PROFILES:
        if profile.name not in PROFILES:
            monkeypatch.setitem(PROFILES, profile.name, profile)


@pytest.mark.usefixtures("pyiceberg_profiles")
def test_the_profile_is_the_one_the_tables_isolation_levels_give(table: PyIcebergTable, catalog: CatalogConfig) -> None:
    target = PyIcebergTarget(catalog, table.identifier, PyIcebergWrite(data=rows([1])))
    serializable = WriteDeclaration.create(table.identifier, "insert_overwrite", profile="pyiceberg-serializable")
    target.check_profile(serializable, target.table_facts())  # nothing set: pyiceberg's default
    with table.load().transaction() as tx:  # one level snapshot, the other unset: held to serializable
        tx.set_properties({"write.update.isolation-level": "snapshot"})
    target.check_profile(serializable, target.table_facts())
    with table.load().transaction() as tx:
        tx.set_properties({"write.delete.isolation-level": "snapshot"})
    with pytest.raises(InvalidDeclarationError, match="give 'pyiceberg-snapshot'; declare profile='pyiceberg-snapshot'"):
        target.check_profile(serializable, target.table_facts())
    with pytest.raises(InvalidDeclarationError, match=r"unknown column\(s\) nope"):
        bad = PyIcebergTarget(catalog, table.identifier, PyIcebergWrite(data=rows([1]), where={"nope": 1}))
        bad.check_columns(serializable)


def test_a_schema_change_that_lost_to_another_names_its_metadata_version(table: PyIcebergTable) -> None:
    stale = table.load()
    tag = CommitTag.create("dag", "first_alter", "run1", "alter_metadata")
    with ambient_tag(tag):
        won = table.add_columns({"x": "long"})
    lost = table.add_columns({"y": "long"}, snapshot=stale)
    assert not lost.committed
    assert lost.classification is not None and lost.classification.kind is ConflictKind.COMMIT_FAILED
    winner = lost.classification.winning_commit
    assert won.metadata_commit is not None and winner is not None
    # The oracle: the metadata log's newest file, as pyiceberg's metadata_log_entries table lists it.
    newest = table.load().inspect.metadata_log_entries().to_pylist()[-1]["file"]
    assert won.metadata_commit.location == newest
    assert (winner.metadata_version, winner.task_id, winner.snapshot_id) == (won.metadata_commit.version, "first_alter", None)
    assert [f.name for f in table.load().schema().fields] == ["id", "ds", "v", "x"]

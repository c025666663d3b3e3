"""PyIcebergWriteOperator on real pyiceberg tables, run by real Airflow (``dag.test()``), on a SQL
catalog on SQLite and on PostgreSQL.

The races are real: a second writer commits into the operator's partition after the operator
loaded its snapshot and before it commits, so pyiceberg's commit loses the catalog's
compare-and-swap and its validation raises. What is checked is what occflow promises: the
conflict is classified, the policy retries from a fresh snapshot, and the table ends exactly as
the same two writes run one after the other on a fresh table leave it (the serial oracle, run
with pyiceberg alone).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg", reason="needs pyiceberg (pip install 'airflow-provider-occflow[iceberg]')")

from occflow.core.profiles import PROFILES  # noqa: E402
from occflow.core.profiles.pyiceberg import PROFILES as PYICEBERG_PROFILES  # noqa: E402

pytestmark = pytest.mark.airflow


@pytest.fixture(autouse=True)
def pyiceberg_profiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pyiceberg profiles in the registry (core/profiles/__init__.py lists them once the lead
    adds them; until then the test adds them, and this is a no-op after)."""
    for profile in PYICEBERG_PROFILES:
        if profile.name not in PROFILES:
            monkeypatch.setitem(PROFILES, profile.name, profile)
    yield


COMMON = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from occflow.engines.pyiceberg import CatalogConfig, PyIcebergTable
from occflow.operators.pyiceberg import PyIcebergWriteOperator

CATALOG = {catalog!r}
MARK = {mark!r}
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ds", StringType(), required=False),
                NestedField(3, "v", LongType(), required=False))

def rows(ids, ds, v):
    return pa.table({{"id": pa.array(ids, pa.int64()), "ds": [ds] * len(ids), "v": pa.array([v] * len(ids), pa.int64())}})

def table():
    return PyIcebergTable(CatalogConfig("lake", CATALOG), "db.events")

def create():
    t = table()
    t.catalog.create_namespace_if_not_exists("db")
    t.catalog.create_table("db.events", SCHEMA, partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "ds")),
                           properties={{"commit.retry.min-wait-ms": "0"}})
    for data in (rows([1, 2], "a", 0), rows([3], "b", 0)):
        assert t.append(data).committed

def competitor_once():
    """A second writer that appends into partition a once, after the operator took its snapshot."""
    mark = pathlib.Path(MARK)
    if not mark.exists():
        mark.write_text("raced")
        assert table().append(rows([5], "a", 1)).committed
'''


def _rows(catalog: dict[str, str], name: str = "db.events") -> list[tuple[Any, ...]]:
    from pyiceberg.catalog.sql import SqlCatalog

    second = SqlCatalog("lake", **catalog)  # its own connection, not the engine's
    try:
        data = second.load_table(name).scan().to_arrow().to_pylist()
    finally:
        second.engine.dispose()
    return sorted((r["id"], r["ds"], r["v"]) for r in data)


def _serial(catalog: dict[str, str]) -> list[tuple[Any, ...]]:
    """The serial oracle with pyiceberg alone: the append, then the overwrite, on a fresh table."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import EqualTo
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    def rows(ids: list[int], ds: str, v: int) -> pa.Table:
        return pa.table({"id": pa.array(ids, pa.int64()), "ds": [ds] * len(ids), "v": pa.array([v] * len(ids), pa.int64())})

    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ds", StringType(), required=False),
                    NestedField(3, "v", LongType(), required=False))
    cat = SqlCatalog("lake", **catalog)
    try:
        cat.create_namespace_if_not_exists("serial")
        t = cat.create_table("serial.events", schema, partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "ds")))
        for data in (rows([1, 2], "a", 0), rows([3], "b", 0), rows([5], "a", 1)):
            t.append(data)
        t.overwrite(rows([7, 8], "a", 7), overwrite_filter=EqualTo("ds", "a"))
    finally:
        cat.engine.dispose()
    return _rows(catalog, "serial.events")


#: A short fixed wait between in-task retries (the default waits 2 s and more: CI time).
RETRY_FAST = '''
RETRY_FAST = {"validation_conflict": {"action": "retry", "wait": {"type": "fixed", "wait": 0.1},
                                      "stop": {"type": "after_attempt", "attempts": 3}}}
'''

OVERWRITE_DAG = '''
def source(context, snapshot):
    competitor_once()
    return rows([7, 8], "a", 7)

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    overwrite = PyIcebergWriteOperator(
        task_id="overwrite", table="db.events", operation="insert_overwrite", partitions={{"ds": "a"}},
        data=source, catalog_name="lake", policy_overrides=RETRY_FAST, {where_catalog},
    )
    setup >> overwrite
'''

#: The same race, then a decorated job deleting partition b, and beside them a write that fails
#: for a reason that is no conflict: one dag.test() run for the three (CI time).
SQLITE_TASKS = '''
    from airflow.sdk import task

    @task.occflow_write(engine="pyiceberg", table="db.events", operation="delete", partitions={"ds": "b"},
                        catalog=CATALOG, catalog_name="lake")
    def drop_b(table, snapshot, commit, context):
        return table.delete({"ds": "b"}, snapshot=snapshot, commit=commit)

    bad = PyIcebergWriteOperator(
        task_id="bad_append", table="db.events", operation="insert_into", catalog=CATALOG, catalog_name="lake",
        data=pa.table({"zz": pa.array([1], pa.int64())}),
    )
    overwrite >> drop_b()
    setup >> bad
'''


def _snapshots(catalog: dict[str, str]) -> list[dict[str, Any]]:
    from pyiceberg.catalog.sql import SqlCatalog

    second = SqlCatalog("lake", **catalog)
    try:
        return [dict(s, summary=dict(s["summary"])) for s in second.load_table("db.events").inspect.snapshots().to_pylist()]
    finally:
        second.engine.dispose()


def _assert_retried(run: Any, catalog: dict[str, str]) -> None:
    """The overwrite lost once, was classified, retried, and committed; the winner it names is
    the competitor's append as the table's own snapshot log records it."""
    assert run.task("overwrite").state == "success", run.task("overwrite")
    report = run.task("overwrite").xcom["return_value"]
    assert report["committed"] is True and report["attempts"] == 2
    assert report["profile"] == "pyiceberg-serializable"
    assert [c["kind"] for c in report["conflicts"]] == ["validation_conflict"]
    assert report["decisions"][0]["action"] == "retry"
    snapshots = _snapshots(catalog)
    appended = [s for s in snapshots if s["summary"].get("added-records") == "1" and s["operation"] == "append"]
    assert report["conflicts"][0]["winning_commit"]["snapshot_id"] == appended[-1]["snapshot_id"]
    mine = [s["snapshot_id"] for s in snapshots if s["summary"].get("occflow.task-id") == "overwrite"]
    assert report["snapshot_id"] == mine[-1]


def test_races_on_a_sqlite_catalog_are_retried_to_the_serial_result_and_non_conflicts_fail(run_dag, tmp_path: Path) -> None:
    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": (tmp_path / "wh").as_uri()}
    source = (
        COMMON.format(catalog=catalog, mark=str(tmp_path / "raced"))
        + RETRY_FAST
        + OVERWRITE_DAG.format(dag_id="pyiceberg_race_sqlite", where_catalog="catalog=CATALOG")
        + SQLITE_TASKS
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyiceberg's "Commit failed due to a concurrent update, retrying"
        run = run_dag(source)
    _assert_retried(run, catalog)
    # The decorated job ran on pyiceberg after it, its commit tagged with its task.
    dropped = run.task("drop_b").xcom["return_value"]
    assert dropped["committed"] is True and dropped["profile"] == "pyiceberg-serializable"
    last = _snapshots(catalog)[-1]
    assert last["snapshot_id"] == dropped["snapshot_id"]
    assert (last["summary"]["occflow.task-id"], last["summary"]["occflow.write-operation"]) == ("drop_b", "delete")
    # Serial oracle: append, overwrite of a, delete of b, with pyiceberg alone on a fresh table.
    assert _rows(catalog) == [r for r in _serial(catalog) if r[1] != "b"] == [(7, "a", 7), (8, "a", 7)]
    # A schema mismatch is no conflict: failed at once, no retry, nothing written by it.
    bad = run.task("bad_append")
    assert bad.state == "failed" and len(bad.tries) == 1
    report = bad.xcom["occflow_report"]
    assert report["status"] == "failed" and report["attempts"] == 1 and report["conflicts"] == []
    assert not any(s["summary"].get("occflow.task-id") == "bad_append" for s in _snapshots(catalog))


@pytest.mark.postgres
def test_a_race_on_a_postgresql_catalog_from_a_connection_is_retried_to_the_serial_result(
    run_dag, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog comes from an Airflow connection of the ``iceberg`` type (host: the catalog's
    SQLAlchemy URL, extra: the warehouse), the shape of apache-airflow-providers-apache-iceberg's."""
    # The connection names the server as users write it; the oracle's own catalog names the driver.
    catalog = {"uri": pg_url.replace("postgresql://", "postgresql+psycopg2://"), "warehouse": (tmp_path / "wh").as_uri()}
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_PG",
        json.dumps({"conn_type": "iceberg", "host": pg_url, "extra": {"warehouse": catalog["warehouse"]}}),
    )
    source = (
        COMMON.format(catalog=catalog, mark=str(tmp_path / "raced"))
        + RETRY_FAST
        + OVERWRITE_DAG.format(dag_id="pyiceberg_race_pg", where_catalog="iceberg_conn_id='iceberg_pg'")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = run_dag(source)
    assert run.state == "success"
    _assert_retried(run, catalog)
    assert _rows(catalog) == _serial(catalog) == [(3, "b", 0), (7, "a", 7), (8, "a", 7)]


def test_an_expire_below_the_retention_floor_fails_the_dag_import_naming_the_minimum(tmp_path: Path) -> None:
    from occflow.core.errors import InvalidDeclarationError
    from occflow.operators.pyiceberg import PyIcebergWriteOperator

    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": (tmp_path / "wh").as_uri()}
    with pytest.raises(InvalidDeclarationError, match=r"nightly: expire_snapshots older_than_hours=24 is below the safe minimum of 120"):
        PyIcebergWriteOperator(task_id="nightly", table="db.events", operation="expire_snapshots", catalog=catalog,
                               older_than_hours=24)
    with pytest.raises(InvalidDeclarationError, match=r"nightly: retain_last=0"):
        PyIcebergWriteOperator(task_id="nightly", table="db.events", operation="expire_snapshots", catalog=catalog,
                               retain_last=0)
    allowed = PyIcebergWriteOperator(task_id="nightly", table="db.events", operation="expire_snapshots", catalog=catalog,
                                     older_than_hours=1, allow_unsafe_retention=True)
    assert allowed.occflow_write.profile.name == "pyiceberg-serializable"


def test_the_nightly_maintenance_example_keeps_every_hour_and_the_expire_commits_after_admission(
    run_dag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dags_example/nightly_maintenance.py under dag.test() (no preparation wait): every hour's
    rows as a serial run writes them, each hourly snapshot kept by the expire (younger than its
    retention), the expire committed; the table read back with pyiceberg alone."""
    from pyiceberg.catalog.sql import SqlCatalog

    monkeypatch.setenv("OCCFLOW_HOME", str(tmp_path / "home"))
    source = (Path(__file__).resolve().parents[2] / "dags_example" / "nightly_maintenance.py").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = run_dag(source, filename="example_nightly_maintenance.py", run_conf={"prepare_seconds": 0})
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] == 4 * 50
    expired = run.task("nightly_expire_snapshots").xcom["return_value"]
    assert expired["committed"] and expired["operation"] == "expire_snapshots" and expired["expired_snapshots"] == []
    # Nothing on the fresh table is older than the retention: the expire commits nothing at all.
    assert expired["metadata_commit"] is None and expired["snapshot_id"] is None
    root = tmp_path / "home" / "pyiceberg"
    own = SqlCatalog("occflow_examples", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "warehouse").as_uri())
    try:
        current = own.load_table("ops.hourly_metrics")
        hours = sorted({r["hour"] for r in current.scan().to_arrow().to_pylist()})
        tagged = {s.summary["occflow.task-id"] for s in current.snapshots() if s.summary is not None}
    finally:
        own.engine.dispose()
    assert hours == ["00", "01", "02", "03"] and tagged == {"hourly_write"}


EXPIRE_DAG = '''
with DAG("pyiceberg_expire", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    more = PythonOperator(task_id="more", python_callable=lambda: table().append(rows([4], "b", 0)))
    expire = PyIcebergWriteOperator(
        task_id="expire", table="db.events", operation="expire_snapshots", catalog=CATALOG, catalog_name="lake",
        older_than_hours=0, retain_last=2, allow_unsafe_retention=True,
    )
    setup >> more >> expire
'''


def test_the_operator_expires_beyond_the_newest_kept_and_tags_the_commit_with_its_task(run_dag, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": (tmp_path / "wh").as_uri()}
    run = run_dag(COMMON.format(catalog=catalog, mark=str(tmp_path / "unused")) + EXPIRE_DAG)
    assert run.state == "success"
    report = run.task("expire").xcom["return_value"]
    own = SqlCatalog("lake", **catalog)
    try:
        current = own.load_table("db.events")
        kept = [entry.snapshot_id for entry in current.metadata.snapshot_log]
        props = dict(current.properties)
        metadata = current.metadata_location
    finally:
        own.engine.dispose()
    # Three appends, the two newest kept: the first one expired, as the table's own log shows.
    assert len(kept) == 2 and len(report["expired_snapshots"]) == 1 and report["expired_snapshots"][0] not in kept
    assert report["committed"] and report["metadata_commit"]["location"] == metadata
    # The commit carries the task's labels and its exactly-once tag, in the table's properties.
    assert props["occflow.expire-snapshots.occflow.task-id"] == "expire"
    assert props["occflow.expire-snapshots.occflow.operation"] == "expire_snapshots"

"""Airflow assets of occflow's writes (docs/assets.md), on real delta-rs tables run by real
Airflow (``dag.test()``).

The oracles are Airflow's and delta-rs's own records: the asset events are read back from
Airflow's metadata DB (``AssetEvent`` rows, as the scheduler and the UI read them), and the
version an event names is checked against the table's ``_delta_log``: the log file whose
``commitInfo`` carries this task's tag must be that version. The partition key format is checked
with Airflow's own partition mappers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

COMMON = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG, Asset
from airflow.providers.standard.operators.python import PythonOperator
from occflow.engines.deltars import DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

PATH = {path!r}
MARK = {mark!r}

def create():
    DeltaRsTable(PATH).create(
        pa.table({{"id": [1, 2, 3, 4], "ds": ["a", "a", "b", "b"], "v": [0, 0, 0, 0]}}), partition_by=["ds"]
    )

def competitor_once():
    """A second writer that commits into partition a once, after the operator took its snapshot."""
    mark = pathlib.Path(MARK)
    if not mark.exists():
        mark.write_text("raced")
        assert DeltaRsTable(PATH).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}})).committed

def rows_for_a(context, snapshot):
    return pa.table({{"id": [100], "ds": ["a"], "v": [7]}})
'''


def _uri(path: Path | str) -> str:
    return Path(path).resolve().as_uri()


def _events(uri: str, dag_id: str) -> list[Any]:
    """The asset events Airflow recorded for the asset ``uri`` from DAG ``dag_id``."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri, AssetEvent.source_dag_id == dag_id)
            .order_by(AssetEvent.id)
        ).all()
        for row in rows:
            session.expunge(row)
        return list(rows)


def _log_versions_of_task(path: Path | str, dag_id: str, task_id: str) -> list[int]:
    """The versions in the table's ``_delta_log`` whose ``commitInfo`` carries this task's tag
    (delta-rs's own record of which commit the task made)."""
    from occflow.engines.tags import KEYS

    found = []
    for entry in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info is None:
                continue
            flat = json.dumps(info)
            if f'"{KEYS["dag_id"]}": "{dag_id}"' in flat and f'"{KEYS["task_id"]}": "{task_id}"' in flat:
                found.append(int(entry.stem))
    return found


def _commit_info(path: Path | str, version: int) -> dict[str, Any]:
    for line in (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        info = json.loads(line).get("commitInfo")
        if info is not None:
            return dict(info)
    raise AssertionError(f"no commitInfo in version {version} of {path}")


def _latest_version(path: Path | str) -> int:
    return max(int(p.stem) for p in (Path(path) / "_delta_log").glob("*.json"))


# ---------------------------------------------------------------------- outlets at parse time


def test_each_write_declares_its_table_as_an_outlet_and_a_users_own_is_not_duplicated(tmp_path):
    from airflow.sdk import DAG, Asset

    from occflow.operators.delta import DeltaWriteOperator

    path = tmp_path / "events"
    with DAG("assets_outlets", schedule=None):
        plain = DeltaWriteOperator(task_id="plain", table="events", path=str(path) + "/", operation="insert_into",
                                   data=lambda c, s: None)
        own = DeltaWriteOperator(task_id="own", table="events", path=str(path), operation="insert_into",
                                 data=lambda c, s: None, outlets=[Asset(uri=_uri(path), name="orders")])
        other = Asset(uri="s3://bucket/elsewhere")
        more = DeltaWriteOperator(task_id="more", table="events", path=str(path), operation="insert_into",
                                  data=lambda c, s: None, outlets=[other])
        templated = DeltaWriteOperator(task_id="templated", table="events", path="{{ params.p }}",
                                       operation="insert_into", data=lambda c, s: None)
    # One table, one asset: the trailing slash is the same location (OpenLineage's naming).
    assert [a.uri for a in plain.outlets] == [_uri(path)]
    assert plain.outlets[0].name == _uri(path)
    assert own.outlets == [Asset(uri=_uri(path), name="orders")]  # the user's, once
    assert [a.uri for a in more.outlets] == [other.uri, _uri(path)]
    assert templated.outlets == []  # a location known only at run time: outlets= is the user's


def test_spark_and_maxcompute_tables_get_occflow_schemes_normalised_by_airflow():
    """The URI goes through Airflow's own ``Asset`` normalisation, which calls occflow's handler
    as the providers manager registered it from provider info: identifiers are case-insensitive."""
    from airflow.sdk import DAG, Asset

    from occflow.operators.maxcompute import MaxComputeWriteOperator
    from occflow.operators.spark import SparkWriteOperator
    from occflow.operators.spark_submit import SparkSubmitWriteOperator

    config = {"table_format": "iceberg", "catalog": {"name": "lake", "type": "hadoop", "warehouse": "s3a://bkt/wh"}}
    with DAG("assets_schemes", schedule=None):
        upper = SparkWriteOperator(task_id="upper", table="DB.Events", table_format="iceberg",
                                   operation="insert_into", job=lambda s, j: None, spark_config=config)
        lower = SparkWriteOperator(task_id="lower", table="lake.db.events", table_format="iceberg",
                                   operation="insert_into", job=lambda s, j: None, spark_config=config)
        odps = MaxComputeWriteOperator(task_id="odps", table="proj.Sales", sql="INSERT INTO proj.Sales SELECT 1")
        delta = SparkWriteOperator(task_id="delta", table="db.events", table_format="delta",
                                   operation="insert_into", job=lambda s, j: None, spark_config={"table_format": "delta"})
        submitted = SparkSubmitWriteOperator(task_id="submitted", table="lake.db.Events", table_format="iceberg",
                                             operation="insert_into",
                                             job="INSERT INTO lake.db.events SELECT 1", spark_config=config)
    # The same table written in-process and through spark-submit is one asset.
    assert upper.outlets == lower.outlets == submitted.outlets == [Asset(uri="iceberg://bkt/wh/lake.db.events")]
    # Spark's default warehouse hangs off the working directory: one name, wherever the DAG is parsed.
    assert [a.uri for a in delta.outlets] == ["delta://spark-warehouse/spark_catalog.db.events"]
    assert odps.outlets[0].uri == "maxcompute://proj/sales"
    # Airflow itself normalises a hand-written URI of occflow's scheme the same way.
    assert Asset(uri="iceberg://bkt/wh/LAKE.DB.EVENTS").uri == "iceberg://bkt/wh/lake.db.events"
    with pytest.raises(ValueError, match="names no table"):
        Asset(uri="iceberg://bkt/")


# ---------------------------------------------------------------------- events of real writes


def test_committed_write_emits_one_event_naming_the_version_in_the_delta_log(run_dag, tmp_path):
    path, mark = tmp_path / "events", tmp_path / "raced"
    run = run_dag(
        COMMON.format(path=str(path), mark=str(mark))
        + '''
with DAG("assets_commit", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    write = DeltaWriteOperator(task_id="write", table="events", path=PATH, operation="insert_into",
                               partitions={"ds": "a"}, data=rows_for_a)
    setup >> write
'''
    )
    assert run.task("write").state == "success"
    events = _events(_uri(path), "assets_commit")
    assert len(events) == 1
    event = events[0]
    assert _log_versions_of_task(path, "assets_commit", "write") == [event.extra["version"]] == [1]
    assert event.extra["operation"] == "insert_into"
    assert event.extra["partitions"] == [{"ds": "a"}]
    assert event.extra["attempts_lost"] == 0
    assert event.partition_key == "a"
    assert event.source_task_id == "write" and event.source_run_id == run.run_id
    # The commit tag in the event is the one delta-rs recorded with the commit, key for key.
    from occflow.engines.tags import WRITE_ID

    recorded = _commit_info(path, event.extra["version"])
    assert WRITE_ID in event.extra["commit_tag"]
    assert {k: recorded.get(k) for k in event.extra["commit_tag"]} == event.extra["commit_tag"]


def test_write_retried_in_the_task_emits_one_event_for_its_one_commit(run_dag, tmp_path):
    path, mark = tmp_path / "events", tmp_path / "raced"
    run = run_dag(
        COMMON.format(path=str(path), mark=str(mark))
        + '''
def source(context, snapshot):
    competitor_once()
    return pa.table({"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]})

with DAG("assets_retry_in_task", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = DeltaWriteOperator(task_id="merge", table="events", path=PATH, operation="merge",
                               partitions={"ds": "a"}, data=source, merge_keys=["id"])
    setup >> merge
'''
    )
    assert run.task("merge").xcom["return_value"]["attempts"] == 2
    events = _events(_uri(path), "assets_retry_in_task")
    assert len(events) == 1
    # create = v0, the competitor = v1, the merge = v2: the event names the merge's own commit.
    assert _log_versions_of_task(path, "assets_retry_in_task", "merge") == [events[0].extra["version"]] == [2]
    assert events[0].extra["attempts_lost"] == 1
    assert events[0].extra["conflicts"] == ["concurrent_append"]


def test_write_retried_by_airflow_emits_one_event_from_the_try_that_committed(run_dag, tmp_path):
    path, mark = tmp_path / "events", tmp_path / "failed-once"
    run = run_dag(
        COMMON.format(path=str(path), mark=str(mark))
        + '''
def flaky(table, snapshot, partition, commit, context):
    mark = pathlib.Path(MARK)
    if not mark.exists():
        mark.write_text("failed")
        raise RuntimeError("the source was not ready (not a conflict)")
    return table.append(pa.table({"id": [100], "ds": ["a"], "v": [7]}), snapshot=snapshot, commit=commit)

with DAG("assets_retry_by_airflow", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    write = DeltaWriteOperator(task_id="write", table="events", path=PATH, operation="insert_into",
                               partitions={"ds": "a"}, job=flaky, retries=1)
    setup >> write
'''
    )
    task = run.task("write")
    assert task.state == "success" and task.try_number == 2
    events = _events(_uri(path), "assets_retry_by_airflow")
    assert len(events) == 1
    assert _log_versions_of_task(path, "assets_retry_by_airflow", "write") == [events[0].extra["version"]]


def test_failed_write_emits_no_event(run_dag, tmp_path):
    path, mark = tmp_path / "events", tmp_path / "unused"
    run = run_dag(
        COMMON.format(path=str(path), mark=str(mark))
        + '''
def broken(table, snapshot, partition, commit, context):
    raise RuntimeError("the job is broken (not a conflict)")

with DAG("assets_failed", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    write = DeltaWriteOperator(task_id="write", table="events", path=PATH, operation="insert_into",
                               partitions={"ds": "a"}, job=broken, retries=0)
    setup >> write
'''
    )
    assert run.task("write").state == "failed"
    assert _events(_uri(path), "assets_failed") == []
    assert _latest_version(path) == 0


def test_skipped_compaction_emits_no_event(run_dag, tmp_path):
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    path = tmp_path / "events"
    table = DeltaRsTable(str(path))
    assert table.create(pa.table({"id": [1], "ds": ["a"], "v": [0]}), partition_by=["ds"]).committed
    for ids in ([2], [3], [4]):
        assert table.append(pa.table({"id": ids, "ds": ["a"], "v": [0]})).committed
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.engines.deltars import DeltaRsTable, Where
from occflow.operators.delta import DeltaWriteOperator

PATH = {str(path)!r}

def compact_after_a_delete(table, snapshot, partition, commit, context):
    assert DeltaRsTable(PATH).delete(Where.equals({{"id": 2}}), partition={{"ds": "a"}}).committed
    return table.optimize(partition=partition, snapshot=snapshot, commit=commit)

with DAG("assets_skipped", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact", table="events", path=PATH, operation="optimize",
                       partitions={{"ds": "a"}}, job=compact_after_a_delete, retries=2)
'''
    )
    assert run.task("compact").state == "skipped"
    assert _events(_uri(path), "assets_skipped") == []
    assert _log_versions_of_task(path, "assets_skipped", "compact") == []


def test_write_found_committed_by_an_earlier_try_emits_no_second_event(run_dag, tmp_path):
    """Try 1 commits, then its job fails (the commit is in the table, the try is not a
    success: Airflow emits nothing for it); try 2 finds try 1's commit and writes nothing: the
    table did not change in try 2, and its success emits no event either."""
    path, mark = tmp_path / "events", tmp_path / "committed-once"
    run = run_dag(
        COMMON.format(path=str(path), mark=str(mark))
        + '''
def commit_then_crash(table, snapshot, partition, commit, context):
    outcome = table.append(pa.table({"id": [100], "ds": ["a"], "v": [7]}), snapshot=snapshot, commit=commit)
    mark = pathlib.Path(MARK)
    if not mark.exists():
        mark.write_text("committed")
        raise RuntimeError("the worker lost its connection after the commit")
    return outcome

with DAG("assets_found", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    write = DeltaWriteOperator(task_id="write", table="events", path=PATH, operation="insert_into",
                               partitions={"ds": "a"}, job=commit_then_crash, retries=1)
    setup >> write
'''
    )
    task = run.task("write")
    assert task.state == "success" and task.try_number == 2
    assert task.xcom["return_value"]["committed_by"] == "try 1"
    assert len(_log_versions_of_task(path, "assets_found", "write")) == 1  # landed once
    assert _events(_uri(path), "assets_found") == []


# ---------------------------------------------------------------------- the run's partition key


def _run_with_partition_key(run_dag: Any, source: str, key: str) -> Any:
    """``dag.test()`` with the DAG run carrying ``partition_key`` (as ``CronPartitionTimetable``
    or ``PartitionedAssetTimetable`` would create it; ``dag.test`` takes no key of its own)."""
    from unittest import mock

    import airflow.models.dagrun as dagrun_module

    real = dagrun_module.get_or_create_dagrun

    def with_key(*args: Any, **kwargs: Any) -> Any:
        dr = real(*args, **kwargs)
        dr.partition_key = key
        kwargs["session"].merge(dr)
        kwargs["session"].commit()
        return dr

    with mock.patch.object(dagrun_module, "get_or_create_dagrun", with_key):
        return run_dag(source)


PARTITIONED = COMMON + '''
def rows(context, snapshot, declaration):
    part = declaration.partitions[0]
    return pa.table({{"id": [100], "ds": [part["ds"]], "v": [7]}})

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    write = DeltaWriteOperator(task_id="write", table="events", path=PATH, operation="insert_overwrite",
                               partition_key_columns=["ds"], data=rows)
    setup >> write
'''


def test_partition_key_of_the_run_is_the_partition_admitted_written_and_reported(run_dag, tmp_path):
    path = tmp_path / "events"
    run = _run_with_partition_key(
        run_dag, PARTITIONED.format(path=str(path), mark="", dag_id="assets_run_key"), "b"
    )
    assert run.task("write").state == "success"
    report = run.task("write").xcom["return_value"]
    assert report["partitions"] == [{"ds": "b"}]
    from deltalake import DeltaTable

    data = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    # Partition b overwritten with the one row, partition a untouched.
    assert sorted((r["ds"], r["id"]) for r in data) == [("a", 1), ("a", 2), ("b", 100)]
    events = _events(_uri(path), "assets_run_key")
    assert [(e.partition_key, e.extra["version"]) for e in events] == [("b", 1)]


def test_a_partition_key_that_does_not_parse_for_the_columns_fails_before_any_write(run_dag, tmp_path):
    path = tmp_path / "events"
    run = _run_with_partition_key(
        run_dag, PARTITIONED.format(path=str(path), mark="", dag_id="assets_bad_key"), "b|eu"
    )
    task = run.task("write")
    assert task.state == "failed" and len(task.tries) == 1
    error = task.xcom["occflow_report"]["error"]
    assert "partition key 'b|eu' does not parse for the columns ['ds']" in error
    assert _latest_version(path) == 0  # nothing written
    assert _events(_uri(path), "assets_bad_key") == []


def test_partitions_and_partition_key_columns_together_fail_the_dag_import():
    from airflow.sdk import DAG

    from occflow.core.errors import InvalidDeclarationError
    from occflow.operators.delta import DeltaWriteOperator

    with DAG("assets_both", schedule=None), pytest.raises(InvalidDeclarationError, match="not both"):
        DeltaWriteOperator(task_id="w", table="events", path="/tmp/x", operation="insert_into",
                           data=lambda c, s: None, partitions={"ds": "a"}, partition_key_columns=["ds"])


# ---------------------------------------------------------------------- the key format


def test_partition_keys_are_what_airflows_own_partition_mappers_read():
    """The scheduler's ``ProductMapper`` splits occflow's multi-column key into one segment per
    column and maps each with its own mapper; a date column maps with a temporal mapper whose
    ``input_format`` is the ISO date; and ``partitions_from_key`` reads back what the mapper wrote."""
    import datetime

    from airflow.partition_mappers.identity import IdentityMapper
    from airflow.partition_mappers.product import ProductMapper
    from airflow.partition_mappers.temporal import StartOfMonthMapper

    from occflow.core.errors import InvalidDeclarationError
    from occflow.operators.assets import partition_key, partitions_from_key

    spec = {"ds": datetime.date(2024, 3, 17), "region": "eu"}
    key = partition_key(spec)
    assert key == "2024-03-17|eu"
    monthly = ProductMapper(StartOfMonthMapper(input_format="%Y-%m-%d", output_format="%Y-%m"), IdentityMapper())
    assert monthly.to_downstream(key) == "2024-03|eu"
    same = ProductMapper(IdentityMapper(), IdentityMapper())
    assert partitions_from_key(same.to_downstream(key), ["ds", "region"]) == {"ds": "2024-03-17", "region": "eu"}
    # Column order is the key's: partition_key_columns decides it, not the mapping's order.
    assert partition_key({"region": "eu", "ds": "2024-03-17"}, ["ds", "region"]) == key
    with pytest.raises(InvalidDeclarationError, match=r"expected <ds>\|<region>"):
        partitions_from_key("2024-03-17", ["ds", "region"])
    with pytest.raises(InvalidDeclarationError, match="holds '\\|'"):
        partition_key({"name": "a|b"})


def test_taskflow_writes_and_mapped_writes_declare_the_table_too(tmp_path):
    """``@task.occflow_write`` builds the engine's operator (outlet declared in ``__init__``); a
    mapped task is built without ``__init__`` at parse time, so ``partial`` declares it."""
    from airflow.sdk import DAG

    from occflow.decorators.occflow_write import occflow_write

    path = str(tmp_path / "events")

    @occflow_write(engine="delta-rs", table="events", path=path, operation="insert_into")
    def append(table, snapshot, partition, commit, context):
        raise NotImplementedError

    with DAG("assets_taskflow", schedule=None):
        one = append()
        mapped = append.override(task_id="append_days").expand(partitions=[{"ds": "a"}, {"ds": "b"}])
    assert [a.uri for a in one.outlets] == [_uri(path)]
    assert [a.uri for a in mapped.outlets] == [_uri(path)]

"""DeltaWriteOperator on real delta-rs tables, run by real Airflow (``dag.test()``).

The races are real: a second writer commits on the same partition after the operator loaded
its snapshot and before it commits, so delta-rs's conflict checker rejects the operator's
commit. What is checked is what occflow promises: the conflict is classified, the policy acts
(retry from a fresh snapshot, skip a compaction, fail a non-conflict without calling it one), and
the table ends exactly as a serial run would leave it.
"""

from __future__ import annotations

import pytest

from occflow.core.errors import InvalidDeclarationError

pytestmark = pytest.mark.airflow

COMMON = '''
import pathlib
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
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
        outcome = DeltaRsTable(PATH).append(pa.table({{"id": [5], "ds": ["a"], "v": [1]}}))
        assert outcome.committed, outcome
'''


def _rows(path: str) -> dict[int, int]:
    from deltalake import DeltaTable

    data = DeltaTable(path).to_pyarrow_table().to_pylist()
    ids = [r["id"] for r in data]
    assert len(ids) == len(set(ids)), f"duplicate rows: {sorted(ids)}"
    return {r["id"]: r["v"] for r in data}


def test_merge_that_loses_to_a_concurrent_append_is_retried_from_a_fresh_snapshot(run_dag, tmp_path):
    path, mark = str(tmp_path / "events"), str(tmp_path / "raced")
    run = run_dag(
        COMMON.format(path=path, mark=mark)
        + '''
def source(context, snapshot):
    competitor_once()
    return pa.table({"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]})

with DAG("delta_merge_race", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = DeltaWriteOperator(
        task_id="merge", table="events", path=PATH, operation="MERGE INTO",
        partitions={"ds": "a"}, data=source, merge_keys=["id"],
    )
    setup >> merge
'''
    )
    assert run.state == "success"
    report = run.task("merge").xcom["return_value"]
    assert report["committed"] is True
    assert report["attempts"] == 2
    assert [c["kind"] for c in report["conflicts"]] == ["concurrent_append"]
    # The winner is named: the competitor's append, version 1 in the log.
    winner = report["conflicts"][0]["winning_commit"]
    assert winner["version"] == 1 and winner["operation"] == "WRITE"
    assert report["decisions"][0]["action"] == "retry"
    assert report["wasted_seconds"] > 0
    # create = v0, competitor append = v1, the retried merge = v2
    assert report["version"] == 2
    # Serial result: the append, then the merge (updates id 1, inserts id 9).
    assert _rows(path) == {1: 7, 2: 0, 3: 0, 4: 0, 5: 1, 9: 7}


def _seed_small_files(path: str) -> None:
    """Partition a in three files (something to compact), partition b in one."""
    import pyarrow as pa

    from occflow.engines.deltars import DeltaRsTable

    table = DeltaRsTable(path)
    assert table.create(pa.table({"id": [1], "ds": ["a"], "v": [0]}), partition_by=["ds"]).committed
    for ids in ([2], [3], [4]):
        assert table.append(pa.table({"id": ids, "ds": ["a"], "v": [0]})).committed
    assert table.append(pa.table({"id": [10], "ds": ["b"], "v": [0]})).committed


def test_compaction_that_loses_to_a_concurrent_delete_is_skipped(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.engines.deltars import DeltaRsTable, Where
from occflow.operators.delta import DeltaWriteOperator

PATH = {path!r}

def compact_after_a_delete(table, snapshot, partition, commit, context):
    # A second writer deletes a file of partition a after the compaction read its snapshot.
    assert DeltaRsTable(PATH).delete(Where.equals({{"id": 2}}), partition={{"ds": "a"}}).committed
    return table.optimize(partition=partition, snapshot=snapshot, commit=commit)

with DAG("delta_compaction_race", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(
        task_id="compact", table="events", path=PATH, operation="optimize",
        partitions={{"ds": "a"}}, job=compact_after_a_delete, retries=2,
    )
'''
    )
    task = run.task("compact")
    assert task.state == "skipped"
    assert task.try_number == 1  # skipped, not retried by Airflow
    # The delete is the only change: no row lost to the compaction, none resurrected.
    assert _rows(path) == {1: 0, 3: 0, 4: 0, 10: 0}


def test_error_that_is_not_a_conflict_is_left_to_airflow_and_never_retried_as_one(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    run = run_dag(
        f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

def wrong_schema(context, snapshot):
    return pa.table({{"id": [99], "ds": ["a"], "v": ["not a number"], "extra": [1]}})

with DAG("delta_not_a_conflict", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(
        task_id="append", table="events", path={path!r}, operation="insert_into", data=wrong_schema,
    )
'''
    )
    task = run.task("append")
    assert run.state == "failed"
    assert task.state == "failed"
    assert len(task.tries) == 1
    assert _rows(path) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}


def test_duplicated_transaction_id_fails_fast_without_airflow_retries(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    run = run_dag(
        f'''
import pendulum
import pyarrow as pa
from airflow.sdk import DAG
from occflow.engines.deltars import CommitOptions, DeltaRsTable
from occflow.operators.delta import DeltaWriteOperator

PATH = {path!r}

def append_as_stream(table, snapshot, partition, commit, context):
    # Another writer shares this job's application transaction id and commits first.
    other = DeltaRsTable(PATH).append(
        pa.table({{"id": [50], "ds": ["b"], "v": [5]}}), commit=CommitOptions(app_id="stream-1", app_version=7)
    )
    assert other.committed, other
    mine = CommitOptions(metadata=commit.metadata, app_id="stream-1", app_version=7)
    return table.append(pa.table({{"id": [60], "ds": ["b"], "v": [6]}}), snapshot=snapshot, commit=mine)

with DAG("delta_duplicate_txn", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(
        task_id="stream_append", table="events", path=PATH, operation="insert_into",
        job=append_as_stream, retries=3,
    )
'''
    )
    task = run.task("stream_append")
    assert task.state == "failed"
    assert len(task.tries) == 1  # AirflowFailException: the 3 retries were not used
    rows = _rows(path)
    assert 50 in rows and 60 not in rows


def test_conflict_policy_override_reschedules_the_task_and_keeps_its_history(run_dag, tmp_path):
    path, mark = str(tmp_path / "events"), str(tmp_path / "raced")
    run = run_dag(
        COMMON.format(path=path, mark=mark)
        + '''
def source(context, snapshot):
    competitor_once()
    return pa.table({"id": [1, 9], "ds": ["a", "a"], "v": [7, 7]})

RESCHEDULE = {
    "action": "reschedule",
    "wait": {"type": "fixed", "wait": 1},
    "stop": {"type": "after_attempt", "attempts": 3},
}

with DAG("delta_merge_reschedule", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    setup = PythonOperator(task_id="create", python_callable=create)
    merge = DeltaWriteOperator(
        task_id="merge", table="events", path=PATH, operation="merge", partitions={"ds": "a"},
        data=source, merge_keys=["id"], policy_overrides={"concurrent_append": RESCHEDULE},
    )
    setup >> merge
'''
    )
    assert run.state == "success"
    report = run.task("merge").xcom["return_value"]
    assert [d["action"] for d in report["decisions"]] == ["reschedule"]
    assert report["attempts"] == 2  # counted across the reschedule
    assert _rows(path) == {1: 7, 2: 0, 3: 0, 4: 0, 5: 1, 9: 7}


def test_sql_injection_in_a_table_name_fails_the_dag_import(run_dag, tmp_path):
    with pytest.raises(AssertionError, match="invalid table identifier"):
        run_dag(
            f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_bad_table", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="t", table="events; DROP TABLE x", path={str(tmp_path)!r},
                       operation="delete")
'''
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ('operation="upsert"', "unknown operation 'upsert'"),
        ('operation="delete", partitions={"ds day": "a"}', "invalid partition column"),
        ('operation="delete", partitions="ds=a"', "partitions must be a mapping"),
        ('operation="delete", table_format="hudi"', "unknown table_format 'hudi'"),
        ('operation="merge", data=[1]', "merge needs merge_keys"),
        ('operation="delete", policy_overrides={"protocol_changed": "retry"}', "not retry-safe"),
    ],
)
def test_bad_declaration_fails_the_dag_import_naming_what_is_wrong(run_dag, tmp_path, kwargs, message):
    with pytest.raises(AssertionError, match=message):
        run_dag(
            f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_bad_declaration", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="t", table="events", path={str(tmp_path)!r}, {kwargs})
'''
        )


def test_rendered_partition_value_is_checked_before_any_write(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_bad_rendered_partition", schedule=None, start_date=pendulum.datetime(2024, 1, 1),
         params={{"day": ""}}):
    DeltaWriteOperator(task_id="delete_day", table="events", path={path!r}, operation="delete",
                       partitions={{"ds": "{{{{ params.day }}}}"}}, retries=2)
'''
    )
    task = run.task("delete_day")
    assert task.state == "failed" and len(task.tries) == 1
    assert _rows(path) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}


def test_partition_value_that_looks_like_sql_stays_a_literal(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_literal_partition", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="delete_day", table="events", path={path!r}, operation="delete",
                       partitions={{"ds": "a' OR '1'='1"}})
'''
    )
    assert run.task("delete_day").state == "success"
    assert _rows(path) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}  # no partition has that value


def test_mapped_write_with_a_bad_fixed_declaration_fails_the_dag_import(run_dag, tmp_path):
    with pytest.raises(AssertionError, match="unknown operation 'upsert'"):
        run_dag(
            f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_bad_mapped", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator.partial(task_id="t", table="events", path={str(tmp_path)!r}, operation="upsert",
                               data=[1]).expand(partitions=[{{"ds": "a"}}, {{"ds": "b"}}])
'''
        )


# -- issue 11: the right matrix, identifiers, unknown columns ------------------------------------


def test_the_default_profile_is_the_matrix_delta_rs_implements(tmp_path):
    from occflow.core.declaration import EngineProfileWarning
    from occflow.operators.delta import DeltaWriteOperator

    common = {"table": "db.events", "path": str(tmp_path), "operation": "update", "set_values": {"v": 1}}
    for extra in ({}, {"table_format": "delta"}):
        write = DeltaWriteOperator(task_id="t", **common, **extra).occflow_write
        assert (write.profile.name, write.engine_profile) == ("delta-rs", "delta-rs")
        # delta-rs fails an append beside an UPDATE of its partition; the Databricks matrix does not.
        assert write.profile.conflicts("update", "insert_into")
    with pytest.warns(EngineProfileWarning, match="does not describe delta-rs"):
        write = DeltaWriteOperator(task_id="t", profile="delta-write-serializable", **common).occflow_write
    # Admission reads the engine's profile from the declaration, whatever the task declares.
    assert (write.profile.name, write.engine_profile) == ("delta-write-serializable", "delta-rs")
    with pytest.raises(InvalidDeclarationError, match="describes iceberg tables"):
        DeltaWriteOperator(task_id="t", profile="iceberg-serializable", **common)


def test_compaction_without_admission_needs_an_explicit_opt_in(run_dag, tmp_path):
    dag = f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_unsafe_compaction", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="compact", table="events", path={str(tmp_path)!r}, operation="optimize",
                       admission=False{{opt_in}})
'''
    with pytest.raises(AssertionError, match=r"optimize then optimize -> both commit, duplicates_rows.*"
                                             r"allow_unsafe_concurrency=True"):
        run_dag(dag.format(opt_in=""))
    with pytest.raises(AssertionError, match="allow_unsafe_concurrency=True"):
        run_dag(dag.format(opt_in="").replace('DeltaWriteOperator(task_id="compact", table="events", ',
                                             'DeltaWriteOperator.partial(task_id="compact", table="events", ')
                .replace("admission=False)", "admission=False).expand(partitions=[{'ds': 'a'}])"))
    # With the opt-in the DAG imports (the run fails only because there is no table at the path).
    run = run_dag(dag.format(opt_in=", allow_unsafe_concurrency=True"))
    assert run.task("compact").state == "failed"


def test_a_path_as_table_name_fails_the_dag_import(run_dag, tmp_path):
    victim = tmp_path / "victim"
    _seed_small_files(str(victim))
    with pytest.raises(AssertionError, match="a path is not a table name"):
        run_dag(
            f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_path_as_table", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="t", table="`{victim}`", operation="truncate")
'''
        )
    assert _rows(str(victim)) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}


def test_a_derived_location_that_a_symlink_leads_out_of_the_warehouse_is_refused(run_dag, tmp_path, monkeypatch):
    home, outside = tmp_path / "home", tmp_path / "outside"
    monkeypatch.setenv("OCCFLOW_HOME", str(home))
    _seed_small_files(str(outside / "events"))
    (home / "delta").mkdir(parents=True)
    dag = '''
import pathlib
import pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.python import PythonOperator
from occflow.operators.delta import DeltaWriteOperator

def plant_symlink():
    # After the DAG was parsed: the warehouse's "db" now leads outside it.
    pathlib.Path({db!r}).symlink_to({outside!r}, target_is_directory=True)

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    plant = PythonOperator(task_id="plant", python_callable=plant_symlink)
    wipe = DeltaWriteOperator(task_id="wipe", table="db.events", operation="truncate", retries=2)
    plant >> wipe
'''
    run = run_dag(dag.format(db=str(home / "delta" / "db"), outside=str(outside), dag_id="delta_symlink_run"))
    wipe = run.task("wipe")
    assert wipe.state == "failed" and len(wipe.tries) == 1  # AirflowFailException: no retries
    assert _rows(str(outside / "events")) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}
    # With the symlink in place, the same DAG no longer imports.
    with pytest.raises(AssertionError, match="outside the warehouse root"):
        run_dag(dag.format(db=str(home / "delta" / "db"), outside=str(outside), dag_id="delta_symlink_parse"))


def test_an_update_of_an_unknown_column_fails_before_writing(run_dag, tmp_path):
    path = str(tmp_path / "events")
    _seed_small_files(path)
    from deltalake import DeltaTable

    before = DeltaTable(path).version()
    run = run_dag(
        f'''
import pendulum
from airflow.sdk import DAG
from occflow.operators.delta import DeltaWriteOperator

with DAG("delta_unknown_column", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    DeltaWriteOperator(task_id="update", table="events", path={path!r}, operation="update",
                       partitions={{"ds": "a"}}, set_values={{"no_such_column": 1}}, retries=2)
'''
    )
    task = run.task("update")
    assert task.state == "failed" and len(task.tries) == 1
    assert DeltaTable(path).version() == before
    assert _rows(path) == {1: 0, 2: 0, 3: 0, 4: 0, 10: 0}

"""The operators' write flow with real Airflow: a try whose commit landed is not written again
(delta-rs and Spark + Iceberg), and a stale overwrite is reported instead of applied.

Each DAG runs with ``dag.test()`` in a subprocess of its own (``airflow_dag_run.py``) that uses
tests/airflow's Airflow environment, with its own Airflow home.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
RUNNER = Path(__file__).with_name("airflow_dag_run.py")


def _run(tmp: Path, sources: dict[str, str]) -> dict[str, Any]:
    files = []
    for name, source in sources.items():
        files.append(tmp / f"{name}.py")
        files[-1].write_text(textwrap.dedent(source))
    home = tmp / "airflow-home"
    home.mkdir()
    done = subprocess.run([sys.executable, str(RUNNER), str(home), *map(str, files)],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("OCCFLOW-RESULT "))
    result: dict[str, Any] = json.loads(line[len("OCCFLOW-RESULT "):])
    return result


def _rows(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: (r["ds"], r["id"]))


def _committed_then_failed(path: str) -> str:
    return f'''
        from datetime import timedelta
        import pyarrow as pa
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.engines.deltars import DeltaRsTable
        from occflow.operators.delta import DeltaWriteOperator

        PATH = {path!r}

        def create():
            DeltaRsTable(PATH).create(pa.table({{"id": [0], "ds": ["b"]}}), partition_by=["ds"])

        def append_then_time_out(table, snapshot, partition, commit, context):
            outcome = table.append(pa.table({{"id": [1, 2, 3], "ds": ["a", "a", "a"]}}), snapshot=snapshot, commit=commit)
            if context["ti"].try_number == 1:
                raise TimeoutError("injected: the commit call timed out after the commit landed")
            return outcome

        with DAG("eo_committed_then_failed", schedule=None):
            setup = PythonOperator(task_id="create", python_callable=create)
            write = DeltaWriteOperator(
                task_id="append", table="events", path=PATH, operation="insert_into", partitions={{"ds": "a"}},
                job=append_then_time_out, retries=2, retry_delay=timedelta(seconds=1), admission=False,
            )
            setup >> write
    '''


def _stale_overwrite(path: str) -> str:
    return f'''
        import pyarrow as pa
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.engines.deltars import DeltaRsLedger, DeltaRsTable
        from occflow.engines.tags import CommitTag
        from occflow.operators.exactly_once import ExactlyOnce
        from occflow.operators.delta import DeltaWriteOperator

        PATH = {path!r}

        def create_and_overwrite_for_a_later_date():
            table = DeltaRsTable(PATH)
            table.create(pa.table({{"id": [0], "ds": ["a"]}}), partition_by=["ds"])
            newer = CommitTag.create("daily_snapshot", "overwrite", "scheduled__2099-01-01", "insert_overwrite",
                                     logical_date="2099-01-01T00:00:00+00:00", partitions={{"ds": "a"}})
            ExactlyOnce(DeltaRsLedger(table), newer).run(
                lambda: table.overwrite(pa.table({{"id": [99], "ds": ["a"]}}), partition={{"ds": "a"}}),
                verify_first=True)

        with DAG("eo_stale_overwrite", schedule=None):
            setup = PythonOperator(task_id="newer", python_callable=create_and_overwrite_for_a_later_date)
            backfill = DeltaWriteOperator(
                task_id="backfill", table="snapshot", path=PATH, operation="insert_overwrite",
                partitions={{"ds": "a"}}, data=pa.table({{"id": [1], "ds": ["a"]}}), retries=2, admission=False,
            )
            setup >> backfill
    '''


def _spark_iceberg(home: str, mark: str) -> str:
    return f'''
        from datetime import timedelta
        from pathlib import Path
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.operators.spark import SparkWriteOperator, spark_engine

        CONFIG = {{"home": {home!r}, "app_name": "occflow-eo-operator"}}
        MARK = Path({mark!r})

        def create():
            spark = spark_engine(CONFIG).session()
            spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
            spark.sql("CREATE TABLE lake.db.events (id BIGINT, ds STRING) USING iceberg PARTITIONED BY (ds)")

        def insert_then_time_out(spark, job):
            spark.sql("INSERT INTO lake.db.events VALUES (1, 'a'), (2, 'a')")
            if not MARK.exists():
                MARK.write_text("first try")
                raise TimeoutError("injected: the job timed out after its commit landed")

        def inspect():
            spark = spark_engine(CONFIG).session()
            rows = [[r[0], r[1]] for r in spark.sql("SELECT id, ds FROM lake.db.events ORDER BY id").collect()]
            tags = [r[0] for r in spark.sql(
                "SELECT summary['occflow.task-id'] FROM lake.db.events.snapshots").collect()]
            return {{"rows": rows, "snapshot_tags": tags}}

        with DAG("eo_spark_iceberg", schedule=None):
            setup = PythonOperator(task_id="create", python_callable=create)
            write = SparkWriteOperator(
                task_id="insert", table="lake.db.events", operation="insert_into", table_format="iceberg",
                partitions={{"ds": "a"}},
                job=insert_then_time_out, spark_config=CONFIG, retries=2, retry_delay=timedelta(seconds=1),
                admission=False,
            )
            check = PythonOperator(task_id="inspect", python_callable=inspect)
            setup >> write >> check
    '''


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """Both DAGs in one Airflow process (one ``airflow db migrate``): results and table root."""
    tmp = tmp_path_factory.mktemp("eo-airflow")
    sources = {
        "eo_committed_then_failed": _committed_then_failed(str(tmp / "events")),
        "eo_stale_overwrite": _stale_overwrite(str(tmp / "snapshot")),
        "eo_spark_iceberg": _spark_iceberg(str(tmp / "spark"), str(tmp / "first-try")),
    }
    return _run(tmp, sources), tmp


def test_a_try_that_committed_but_failed_is_found_by_airflows_retry_and_not_written_again(
    runs: tuple[dict[str, Any], Path],
) -> None:
    results, tmp = runs
    result, path = results["eo_committed_then_failed"], str(tmp / "events")
    task = result["tasks"]["append"]
    assert result["state"] == "success", result
    assert task["tries"] == 2  # the first try failed (timeout), the second verified
    report = task["xcom"]
    assert report["committed"] and report["version"] == 1
    assert report["committed_by"] == "try 1"  # found in the table: try 1's commit, not this try's
    assert _rows(path) == [{"id": 1, "ds": "a"}, {"id": 2, "ds": "a"}, {"id": 3, "ds": "a"}, {"id": 0, "ds": "b"}]
    from deltalake import DeltaTable

    history = DeltaTable(path).history()
    assert [h["version"] for h in history] == [1, 0]  # one append, not two
    assert history[0]["occflow.write-id"] == report["tag"]["write_id"]
    assert history[0]["occflow.task-id"] == "append"


def test_an_overwrite_older_than_the_partitions_last_overwrite_is_reported_not_applied(
    runs: tuple[dict[str, Any], Path],
) -> None:
    results, tmp = runs
    result, path = results["eo_stale_overwrite"], str(tmp / "snapshot")
    task = result["tasks"]["backfill"]
    assert task["state"] == "failed" and task["tries"] == 1, result  # reported, not retried
    assert _rows(path) == [{"id": 99, "ds": "a"}]  # the newer overwrite survives


def test_a_spark_iceberg_try_that_committed_but_failed_is_found_by_the_next_try(
    runs: tuple[dict[str, Any], Path],
) -> None:
    results, _ = runs
    result = results["eo_spark_iceberg"]
    task = result["tasks"]["insert"]
    assert result["state"] == "success", result
    assert task["tries"] == 2
    report = task["xcom"]
    assert report["committed"] and report["snapshot_id"] is not None
    assert report["committed_by"] == "try 1"  # found in the table: try 1's commit, not this try's
    seen = result["tasks"]["inspect"]["xcom"]
    assert [tuple(r) for r in seen["rows"]] == [(1, "a"), (2, "a")]  # written once
    assert seen["snapshot_tags"] == ["insert"]  # one snapshot, tagged with the task

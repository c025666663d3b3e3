"""SparkSubmitWriteOperator on real delta-spark, run by ``dag.test()`` (issue 34): a spark-submit
driver loses a real Delta race to a writer in another process, the loss is classified from what
the spark-submit path sees (the driver's outcome file), and the derived policy is applied.

- A driver's UPDATE loses to a concurrent UPDATE of its partition: Delta's
  ``ConcurrentAppendException`` (``DELTA_CONCURRENT_APPEND``), ``concurrent_append``; the write
  flow submits a new driver, which reads a fresh snapshot and commits: the table ends as the
  serial run would.
- A driver's INSERT loses to a writer that reuses its Delta transaction id:
  ``ConcurrentTransactionException``, ``concurrent_transaction``, not retry-safe: the task fails
  fast, no second driver, its Airflow retries unused.
- Bad input: a table whose protocol needs a writer feature delta-spark 3.3.3 lacks (a protocol
  action written by hand into the log) is refused by delta-spark in the driver; the task fails on
  its first try, naming the feature.
- ``TableCommitSensor`` on a delta-spark table: it finds the write's commit by version and
  partition; by the write's tag (``upstream_task_id``) it does not yet (an expected failure: the
  log reader does not read ``commitInfo.userMetadata``, where delta-spark keeps the tag).

The race is deterministic: the driver's statement holds in a Python UDF after Delta has read its
snapshot (``delta_spark_submit_jobs.py``); the competitor, a thread of the process running
``dag.test()``, commits from its own Delta session and then lets the driver go. The oracles are
Delta's own record (``DESCRIBE HISTORY``, the rows) and the outcome files the drivers wrote,
classified again here from their error alone.

``dag.test()`` runs in a ``spawn`` worker holding a Delta session (the competitor's, and the one
the caller-side ledger reads the history with): this test process's JVM is the Iceberg one.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from occflow.engines.spark.submit import outcome_from_dict

sys.path.insert(0, str(Path(__file__).parent))  # the worker imports delta_spark_dags from here
import delta_spark_dags  # noqa: E402
import delta_spark_submit_jobs  # noqa: E402

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.slow,
]

DAG = '''
import os
import pendulum
from airflow.sdk import DAG, task
from occflow.operators.spark import spark_engine
from occflow.operators.spark_submit import SparkSubmitWriteOperator
import delta_spark_submit_jobs as jobs

CONFIG = {config!r}
GATE = {gate!r}
LOCATION = GATE + "/table"
T = "default.{table}"


def outcomes_here(context):
    # Set when the task runs, not when the file is parsed: dag.test() parses the whole DAG folder,
    # and another DAG file may set the variable at its import.
    os.environ["OCCFLOW_SUBMIT_DIR"] = GATE + "/outcomes"


@task
def create_table():
    jobs.prepare(CONFIG, T, GATE, LOCATION, {scenario!r})


@task(trigger_rule="all_done")
def table_content():
    spark = spark_engine(CONFIG).session()
    history = spark.sql(f"DESCRIBE HISTORY {{T}}").collect()
    return {{
        "rows": sorted([r["id"], r["ds"], r["amount"]] for r in spark.sql(f"SELECT * FROM {{T}}").collect()),
        "history": sorted([r["version"], r["operation"], r["userMetadata"]] for r in history),
        "pid": os.getpid(),
    }}


with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    write = SparkSubmitWriteOperator(
        task_id={task_id!r}, table=T, table_format="delta", spark_config=CONFIG, operation={operation!r},
        partitions={{"ds": {ds!r}}}, job="delta_spark_submit_jobs:{job}", py_files=[jobs.__file__],
        job_params={{"gate": GATE, "location": LOCATION}}, poll_interval=0.5, retries=3,
        pre_execute=outcomes_here,
    )
    create_table() >> write >> table_content()
'''


@pytest.fixture(scope="module")
def delta_dags(airflow_home: Path, dag_folder: Path) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        pool.submit(delta_spark_dags.start).result(timeout=300)
        config = pool.submit(delta_spark_dags.delta_config).result(timeout=60)

        def run(template: str, gate: Path, **fields: str) -> dict[str, Any]:
            source = template.format(config=config, gate=str(gate), **fields)
            return pool.submit(delta_spark_dags.run_dag, source, str(dag_folder)).result(timeout=900)

        yield run
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _outcomes(gate: Path) -> list[dict[str, Any]]:
    """The outcome files the drivers wrote, in the order they were submitted."""
    paths = [p for p in (gate / "outcomes").rglob("*.json") if not p.name.endswith((".job.json", ".app.json"))]
    paths = [p for p in paths if ".lease" not in p.name]
    assert paths, f"no outcome file under {gate / 'outcomes'}"
    return [json.loads(p.read_text()) for p in sorted(paths, key=lambda p: p.stat().st_mtime)]


def _competitor_ok(gate: Path) -> None:
    error = gate / "competitor.error"
    assert not error.exists(), error.read_text()
    assert (gate / "competitor.done").exists(), "the competitor never committed"


def _assert_lost_in_the_driver(outcome: dict[str, Any], java_class: str, error_class: str, kind: str,
                               worker_pid: int) -> None:
    """The driver's own outcome file: another process lost, with Delta's exception through Py4J,
    and its error alone (the classification dropped) classifies to the same kind here."""
    assert outcome["driver"]["pid"] not in (os.getpid(), worker_pid)
    assert not outcome["committed"], outcome
    assert outcome["error"]["exception_class"] == f"io.delta.exceptions.{java_class}", outcome["error"]
    assert outcome["error"]["error_class"] == error_class
    assert outcome["classification"]["kind"] == kind
    again = outcome_from_dict({**outcome, "classification": None})
    assert again.classification is not None and again.classification.kind.value == kind


def test_a_driver_that_loses_a_delta_race_is_resubmitted_from_a_fresh_snapshot(delta_dags, tmp_path) -> None:
    run = delta_dags(DAG, tmp_path, dag_id="delta_submit_retry", table="submit_retried", scenario="update",
                     task_id="update_day", operation="update", ds="2024-01-01", job="update_day")
    _competitor_ok(tmp_path)
    assert run["state"] == "success", run
    task = run["tasks"]["update_day"]
    assert task["tries"] == 1  # retried inside the task by the policy, not by Airflow
    report = task["xcom"]["return_value"]
    assert report["attempts"] == 2, report
    conflict = report["conflicts"][0]
    assert conflict["kind"] == "concurrent_append"
    assert "io.delta.exceptions.ConcurrentAppendException" in str(conflict["error"]), conflict
    assert [d["action"] for d in report["decisions"]] == ["retry"]

    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    lost, retried = _outcomes(tmp_path)  # two drivers, one per attempt
    _assert_lost_in_the_driver(lost, "ConcurrentAppendException", "DELTA_CONCURRENT_APPEND", "concurrent_append",
                               content["pid"])
    assert retried["committed"] and retried["driver"]["pid"] != lost["driver"]["pid"], retried
    # Serial: the competitor's amount * 10, then the job's + 100, on 2024-01-01 only.
    assert content["rows"] == [[1, "2024-01-01", 110], [2, "2024-01-01", 120], [3, "2024-01-02", 3]]
    versions = {v: (op, meta) for v, op, meta in content["history"]}
    # Delta's record: CREATE, INSERT, the competitor's UPDATE (untagged: the winner by version),
    # then the second driver's UPDATE carrying occflow's tag; nothing from the first driver.
    assert sorted(versions) == [0, 1, 2, 3], versions
    winner = conflict["winning_commit"]
    assert winner["version"] == 2 and versions[2] == ("UPDATE", None) and not winner["tagged"]
    assert report["version"] == retried["version"] == 3 and versions[3][0] == "UPDATE"
    assert '"update_day"' in (versions[3][1] or "")


def test_a_driver_whose_delta_transaction_id_is_reused_fails_fast(delta_dags, tmp_path) -> None:
    run = delta_dags(DAG, tmp_path, dag_id="delta_submit_fail_fast", table="submit_failed",
                     scenario="same_transaction_id", task_id="append_day", operation="insert_into",
                     ds="2024-01-02", job="append_day")
    _competitor_ok(tmp_path)
    task = run["tasks"]["append_day"]
    assert task["state"] == "failed" and task["tries"] == 1, run  # the 3 Airflow retries were not used
    report = task["xcom"].get("occflow_report")
    assert report is not None, task["xcom"]
    assert report["attempts"] == 1
    conflict = report["conflicts"][0]
    assert conflict["kind"] == "concurrent_transaction"
    assert "io.delta.exceptions.ConcurrentTransactionException" in str(conflict["error"]), conflict
    assert [d["action"] for d in report["decisions"]] == ["fail"]

    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    (lost,) = _outcomes(tmp_path)  # one driver: no second submission
    _assert_lost_in_the_driver(lost, "ConcurrentTransactionException", "DELTA_CONCURRENT_TRANSACTION",
                               "concurrent_transaction", content["pid"])
    assert [50, "2024-01-02", 5] in content["rows"]
    assert not any(r[0] >= 60 for r in content["rows"])  # the driver's rows never landed
    # Delta's record: CREATE, INSERT, the competitor's WRITE; no commit by the driver.
    assert [(v, op) for v, op, _ in content["history"]] == [(0, "CREATE TABLE"), (1, "WRITE"), (2, "WRITE")]


def test_a_table_whose_protocol_needs_a_feature_the_jar_lacks_fails_fast_naming_it(delta_dags, tmp_path) -> None:
    """Bad input: the table's protocol lists a writer feature delta-spark 3.3.3 does not have. The
    driver's write is refused by delta-spark itself (``DELTA_UNSUPPORTED_FEATURES_FOR_WRITE``), the
    task fails on its first try without a second driver or an Airflow retry, and says which
    feature; nothing is added to the table's log."""
    feature = delta_spark_submit_jobs.FUTURE_FEATURE
    run = delta_dags(DAG, tmp_path, dag_id="delta_submit_future_feature", table="submit_future", scenario="future_feature",
                     task_id="append_day", operation="insert_into", ds="2024-01-02", job="append_rows")
    task = run["tasks"]["append_day"]
    assert task["state"] == "failed" and task["tries"] == 1, run
    report = task["xcom"].get("occflow_report")
    assert report is not None, task["xcom"]
    assert report["attempts"] == 1 and not report["conflicts"], report
    assert feature in report["error"] and "writer table feature" in report["error"], report["error"]
    assert "a retry cannot change that" in report["error"]

    (refused,) = _outcomes(tmp_path)  # one driver
    assert refused["error"]["error_class"] == "DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", refused["error"]
    assert feature in refused["error"]["messages"][0]
    content = run["tasks"]["table_content"]["xcom"]["return_value"]
    # Delta's record: CREATE, INSERT and the protocol upgrade written by hand; no write after it.
    assert [(v, op) for v, op, _ in content["history"]] == [(0, "CREATE TABLE"), (1, "WRITE"),
                                                             (2, "UPGRADE PROTOCOL")]
    assert [r[0] for r in content["rows"]] == [1, 2, 3]


SENSOR_DAG = '''
import pendulum
from airflow.sdk import DAG, task
from occflow.operators.spark import SparkWriteOperator, spark_engine
from occflow.sensors.commit import TableCommitSensor

CONFIG = {config!r}
LOCATION = {gate!r} + "/table"
T = "default.sensed"


@task
def create_table():
    spark = spark_engine(CONFIG).session()
    spark.sql(f"CREATE TABLE {{T}} (id BIGINT, ds STRING) USING delta PARTITIONED BY (ds) LOCATION '{{LOCATION}}'")
    spark.sql(f"INSERT INTO {{T}} VALUES (1, '2024-01-01')")


with DAG("delta_spark_commit_sensor", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
    write = SparkWriteOperator(
        task_id="append_day", table=T, table_format="delta", spark_config=CONFIG, operation="insert_into",
        partitions={{"ds": "2024-01-02"}}, job=f"INSERT INTO {{T}} VALUES (2, '2024-01-02'), (3, '2024-01-02')",
    )
    by_version = TableCommitSensor(
        task_id="wait_by_version", table_format="delta", table=T, location=LOCATION, min_version=2,
        partition={{"ds": "2024-01-02"}}, poll_interval=1,
    )
    # Poked, with a timeout: deferred, a sensor that never matches would wait forever.
    by_tag = TableCommitSensor(
        task_id="wait_by_tag", table_format="delta", table=T, location=LOCATION,
        upstream_task_id="append_day", partition={{"ds": "2024-01-02"}},
        deferrable=False, mode="poke", poke_interval=1, timeout=20,
    )
    create_table() >> write >> [by_version, by_tag]
'''


@pytest.fixture(scope="module")
def sensed(delta_dags, tmp_path_factory) -> dict[str, Any]:
    """One run of the sensor DAG: a delta-spark write, then a sensor on its version and one on its tag."""
    run: dict[str, Any] = delta_dags(SENSOR_DAG, tmp_path_factory.mktemp("sensed"))
    return run


def test_table_commit_sensor_sees_a_delta_spark_commit_by_its_version_and_partition(sensed) -> None:
    written = sensed["tasks"]["append_day"]["xcom"]["return_value"]
    assert written["version"] == 2, written  # CREATE, INSERT, this write
    wait = sensed["tasks"]["wait_by_version"]
    assert wait["state"] == "success", sensed
    found = wait["xcom"]["return_value"]
    assert found["version"] == written["version"] and found["operation"] == "WRITE", found
    assert found["partitions"] == ["ds=2024-01-02"]


def test_table_commit_sensor_finds_the_commit_a_delta_spark_write_made_by_its_tag(sensed) -> None:
    written = sensed["tasks"]["append_day"]["xcom"]["return_value"]
    assert written["version"] == 2, written
    # The sensor's condition is the tag the write put in its commit (dag, task, run): met only
    # when the log reader finds it in the commit delta-spark wrote.
    assert sensed["tasks"]["wait_by_tag"]["state"] == "success", sensed["tasks"]["wait_by_tag"]

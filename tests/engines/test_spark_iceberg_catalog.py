"""The embedded Iceberg catalog (JDBC on SQLite) stays correct when several Spark driver
processes commit to one table at the same time: no commit is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.engines.spark import ApplicationJob, SparkConfig, SparkEngine
from occflow.engines.spark.iceberg import set_commit_retries
from occflow.engines.spark.submit import submit_job

pytestmark = pytest.mark.spark

INSERTS_PER_DRIVER = 6
ROWS_PER_INSERT = 3

# Each driver warms its catalog up, then waits until the other's JVM is up too, and then the two
# go in lockstep: insert i starts only once the other driver has committed insert i-1. A cold
# driver's first INSERT can take longer than the other's six, so without the lockstep the two
# could commit one after the other; with it every round races and the commits interleave.
APP = '''
import sys, time
from pathlib import Path
from pyspark.sql import SparkSession

table, me, other, inserts, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
spark = SparkSession.builder.getOrCreate()
spark.sql(f"SELECT count(*) FROM {table}").collect()
Path(me).touch()


def wait_for(path):
    deadline = time.time() + 600
    while not Path(path).exists() and time.time() < deadline:
        time.sleep(0.1)


wait_for(other)
base = 1000 if me.endswith("a") else 2000
for i in range(inserts):
    if i > 0:
        wait_for(f"{other}.{i - 1}")
    values = ", ".join(f"({base + i * rows + r}, 'x', {i})" for r in range(rows))
    spark.sql(f"INSERT INTO {table} VALUES {values}")
    Path(f"{me}.{i}").touch()
'''


def test_two_driver_processes_committing_to_one_table_lose_no_commit(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    spark = iceberg_engine.session()
    # Lost races are retried by Iceberg after re-reading the catalog; give it room to do so.
    set_commit_retries(spark, iceberg_table, 50)
    before = spark.sql(f"SELECT count(*) FROM {iceberg_table}").collect()[0][0]
    app = tmp_path / "appender.py"
    app.write_text(APP)
    config = SparkConfig(home=str(spark_home), app_name="occflow-cross-process", conf={"spark.driver.memory": "768m"})
    ready = [str(tmp_path / "ready_a"), str(tmp_path / "ready_b")]
    jobs = [
        submit_job(
            ApplicationJob(str(app), (iceberg_table, ready[i], ready[1 - i], str(INSERTS_PER_DRIVER), str(ROWS_PER_INSERT))),
            iceberg_table,
            tmp_path / f"outcome_{i}.json",
            "insert_into",
            config,
        )
        for i in range(2)
    ]
    outcomes = [job.wait(timeout=900) for job in jobs]
    for job, outcome in zip(jobs, outcomes, strict=True):
        assert outcome.committed, (outcome.error, job.log_tail())

    after = spark.sql(f"SELECT count(*) FROM {iceberg_table}").collect()[0][0]
    assert after == before + 2 * INSERTS_PER_DRIVER * ROWS_PER_INSERT

    # Every append of both drivers is in the table's one linear history ...
    rows = spark.sql(
        f"SELECT s.snapshot_id, s.parent_id, s.summary['spark.app.id'] AS app FROM {iceberg_table}.snapshots s "
        "WHERE s.operation = 'append'"
    ).collect()
    by_app: dict[str, int] = {}
    for r in rows:
        by_app[r["app"]] = by_app.get(r["app"], 0) + 1
    driver_apps = [a for a in by_app if a != spark.sparkContext.applicationId]
    assert sorted(by_app[a] for a in driver_apps) == [INSERTS_PER_DRIVER, INSERTS_PER_DRIVER]
    history = spark.sql(f"SELECT snapshot_id, parent_id FROM {iceberg_table}.history ORDER BY made_current_at").collect()
    for prev, cur in zip(history, history[1:], strict=False):
        assert cur["parent_id"] == prev["snapshot_id"], "history is not one chain: a commit was lost or forked"

    # ... and the drivers really committed concurrently: their commits interleave.
    app_of = {r["snapshot_id"]: r["app"] for r in rows}
    order = [app_of[h["snapshot_id"]] for h in history if app_of.get(h["snapshot_id"]) in driver_apps]
    switches = sum(1 for a, b in zip(order, order[1:], strict=False) if a != b)
    assert switches >= 2, f"the two drivers did not overlap (commit order {order})"

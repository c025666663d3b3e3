"""Delta Lake through delta-spark: the same job shapes as Iceberg.

The jars are the manifest's delta-spark_2.12 and delta-storage 3.3.3 (scripts/jvm/pom.xml, resolved
by the bootstrap), or the user's in ``OCCFLOW_DELTA_SPARK_JARS``; the tests are skipped only where
neither is there. Each job runs in its own driver process: this test process's session is the
Iceberg one, and SQL extensions cannot change in a running JVM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.core.kinds import ConflictKind
from occflow.engines.spark import ApplicationJob, SparkConfig
from occflow.engines.spark.delta_spark import JARS_ENV, DeltaFormat
from occflow.engines.spark.settings import SparkConfigError
from occflow.engines.spark.submit import submit_job


def _delta_jars() -> bool:
    try:
        return bool(DeltaFormat().jars())
    except SparkConfigError:
        return False


pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        not _delta_jars(),
        reason=f"delta-spark jars not available: run bash scripts/bootstrap.sh or set {JARS_ENV}",
    ),
]

TIMEOUT = 900


def _config(tmp_path: Path) -> SparkConfig:
    return SparkConfig(table_format="delta", home=str(tmp_path), conf={
        "spark.driver.memory": "768m", "spark.sql.warehouse.dir": str(tmp_path / "warehouse")})


def _table(tmp_path: Path) -> str:
    # A named table (a path is not a table name: identifiers.py), in the driver's own warehouse.
    return "default.events"


def test_sql_job_creates_and_appends_and_reports_the_delta_version(tmp_path: Path) -> None:
    table = _table(tmp_path)
    job = submit_job(
        f"CREATE TABLE IF NOT EXISTS {table} (id BIGINT, ds STRING) USING delta PARTITIONED BY (ds);"
        f" INSERT INTO {table} VALUES (1, 'a'), (2, 'a')",
        table,
        tmp_path / "o1.json",
        config=_config(tmp_path),
    )
    outcome = job.wait(timeout=TIMEOUT)
    assert outcome.committed, job.log_tail()
    assert outcome.engine == "spark-delta"
    assert outcome.version == 1  # version 0 is the CREATE
    assert outcome.rows == 2


def test_concurrent_delete_and_update_in_one_partition_fail_with_a_delta_conflict(tmp_path: Path) -> None:
    table = _table(tmp_path)
    app = tmp_path / "race.py"
    app.write_text(
        "import sys, threading\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "t = sys.argv[1]\n"
        "spark.sql(f\"CREATE TABLE {t} (id BIGINT, ds STRING, v INT) USING delta PARTITIONED BY (ds)\")\n"
        "errors = []\n"
        "for round_ in range(6):\n"
        "    spark.sql(f\"INSERT INTO {t} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'a', 3)\")\n"
        "    barrier = threading.Barrier(2)\n"
        "    def run(sql):\n"
        "        barrier.wait()\n"
        "        try:\n"
        "            spark.sql(sql)\n"
        "        except Exception as exc:\n"
        "            errors.append(exc)\n"
        "    threads = [threading.Thread(target=run, args=(s,)) for s in (\n"
        "        f\"UPDATE {t} SET v = v + 1 WHERE ds = 'a'\", f\"DELETE FROM {t} WHERE ds = 'a' AND v % 2 = 0\")]\n"
        "    [th.start() for th in threads]\n"
        "    [th.join() for th in threads]\n"
        "    if errors:\n"
        "        raise errors[0]\n"
    )
    job = submit_job(ApplicationJob(str(app), (table,)), table, tmp_path / "o2.json", "delete", _config(tmp_path))
    outcome = job.wait(timeout=TIMEOUT)
    assert not outcome.committed, "no conflict in 6 rounds of overlapping UPDATE and DELETE"
    assert outcome.error is not None and "io.delta.exceptions" in outcome.error.text
    assert outcome.classification is not None
    assert outcome.classification.kind in (ConflictKind.CONCURRENT_DELETE_READ, ConflictKind.CONCURRENT_APPEND)

"""Real Iceberg commit failures raised by Iceberg's own Java engine, reached through a real py4j bridge.

A JVM is started with PySpark's launcher and the Iceberg runtime jar from the PyPI package in
requirements (no SparkSession, so no Spark configuration is shared with other tests). Two
``Table`` objects load the same table version from a Hadoop catalog directory; one commits, the
other's commit fails in ``MergingSnapshotProducer`` / ``ManifestFilterManager`` /
``HadoopTableOperations`` exactly as in a Spark job. Data files are metadata-only entries: commit
validation never reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind

pytestmark = pytest.mark.spark

py4j_protocol = pytest.importorskip("py4j.protocol")
Py4JJavaError = py4j_protocol.Py4JJavaError


def _iceberg_jar() -> Path:
    # The manifest's Iceberg runtime (scripts/jvm/pom.xml), resolved by the bootstrap with Maven.
    from occflow.engines.spark.jvm_artifacts import ICEBERG_SPARK_RUNTIME, jar

    return Path(jar(ICEBERG_SPARK_RUNTIME))


@pytest.fixture(scope="module")
def jvm() -> Iterator[Any]:
    from pyspark.java_gateway import launch_gateway

    saved = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory 512m --jars {_iceberg_jar()} pyspark-shell"
    try:
        gateway = launch_gateway()
    finally:
        if saved is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = saved
    try:
        yield gateway.jvm
    finally:
        gateway.shutdown()


class _Iceberg:
    def __init__(self, jvm: Any, location: Path) -> None:
        self.jvm = jvm
        types = jvm.org.apache.iceberg.types
        columns = jvm.java.util.ArrayList()
        columns.add(getattr(types, "Types$NestedField").required(1, "id", getattr(types, "Types$LongType").get()))
        self.spec = jvm.org.apache.iceberg.PartitionSpec.unpartitioned()
        self.tables = jvm.org.apache.iceberg.hadoop.HadoopTables(jvm.org.apache.hadoop.conf.Configuration())
        self.location = str(location)
        self.tables.create(jvm.org.apache.iceberg.Schema(columns), self.spec, self.location)
        self.expressions = jvm.org.apache.iceberg.expressions.Expressions

    def data_file(self, name: str) -> Any:
        return (
            self.jvm.org.apache.iceberg.DataFiles.builder(self.spec)
            .withPath(f"{self.location}/data/{name}.parquet")
            .withFileSizeInBytes(100)
            .withRecordCount(1)
            .withFormat("PARQUET")
            .build()
        )

    def load(self) -> Any:
        return self.tables.load(self.location)


def _raised(action: Any) -> Any:
    with pytest.raises(Py4JJavaError) as info:
        action()
    return info.value


def test_real_conflicting_append_fails_overwrite_validation(jvm: Any, tmp_path: Path) -> None:
    ice = _Iceberg(jvm, tmp_path / "t")
    ice.load().newAppend().appendFile(ice.data_file("a")).commit()
    earlier, later = ice.load(), ice.load()
    start = later.currentSnapshot().snapshotId()
    earlier.newAppend().appendFile(ice.data_file("b")).commit()
    always = ice.expressions.alwaysTrue()
    error = _raised(
        lambda: later.newOverwrite()
        .overwriteByRowFilter(always)
        .validateFromSnapshot(start)
        .conflictDetectionFilter(always)
        .validateNoConflictingData()
        .commit()
    )
    assert error.java_exception.getClass().getName() == "org.apache.iceberg.exceptions.ValidationException"
    result = classify(error)
    assert result.kind is ConflictKind.VALIDATION_CONFLICT, result.reason
    assert result.engine == "iceberg"
    # The same error as text (what a driver log or the Py4J message shows) classifies the same.
    assert classify(str(error)).kind is ConflictKind.VALIDATION_CONFLICT


def test_real_concurrent_delete_of_the_same_file_is_a_validation_conflict(jvm: Any, tmp_path: Path) -> None:
    ice = _Iceberg(jvm, tmp_path / "t")
    file_a = ice.data_file("a")
    ice.load().newAppend().appendFile(file_a).commit()
    earlier, later = ice.load(), ice.load()
    start = later.currentSnapshot().snapshotId()
    earlier.newDelete().deleteFile(file_a).commit()
    error = _raised(
        lambda: later.newOverwrite().deleteFile(file_a).validateFromSnapshot(start).validateNoConflictingDeletes().commit()
    )
    assert "Missing required files to delete" in error.java_exception.getMessage()
    assert classify(error).kind is ConflictKind.VALIDATION_CONFLICT


def test_real_stale_metadata_commit_is_commit_failed_and_retry_safe(jvm: Any, tmp_path: Path) -> None:
    ice = _Iceberg(jvm, tmp_path / "t")
    earlier, later = ice.load(), ice.load()
    ops = later.operations()
    base = ops.current()
    earlier.updateProperties().set("owner", "earlier").commit()
    properties = jvm.java.util.HashMap()
    properties.put("owner", "later")
    error = _raised(lambda: ops.commit(base, base.replaceProperties(properties)))
    assert error.java_exception.getClass().getName() == "org.apache.iceberg.exceptions.CommitFailedException"
    result = classify(error)
    assert result.kind is ConflictKind.COMMIT_FAILED
    assert result.retry_safe


def test_real_java_cause_chain_reaches_commit_state_unknown(jvm: Any) -> None:
    unknown = jvm.org.apache.iceberg.exceptions.CommitStateUnknownException(jvm.java.lang.RuntimeException("Unknown failure"))
    error = _raised(lambda: jvm.java.util.concurrent.CompletableFuture.failedFuture(unknown).get())
    assert error.java_exception.getClass().getName() == "java.util.concurrent.ExecutionException"
    result = classify(error)
    assert result.kind is ConflictKind.COMMIT_STATE_UNKNOWN
    assert not result.retry_safe
    assert result.exception_class == "org.apache.iceberg.exceptions.CommitStateUnknownException"


def test_real_java_errors_that_are_not_conflicts(jvm: Any, tmp_path: Path) -> None:
    ice = _Iceberg(jvm, tmp_path / "t")
    ice.load().newAppend().appendFile(ice.data_file("a")).commit()
    unknown_column = ice.expressions.equal("no_such_column", 1)
    user_error = _raised(lambda: ice.load().newScan().filter(unknown_column).planFiles().iterator().hasNext())
    assert user_error.java_exception.getClass().getName() == "org.apache.iceberg.exceptions.ValidationException"
    parse_error = _raised(lambda: jvm.java.lang.Integer.parseInt("not a number"))
    for error in (user_error, parse_error):
        result = classify(error)
        assert result.kind is ConflictKind.NOT_A_CONFLICT, f"{error.java_exception.getMessage()} -> {result.reason}"


# A real Spark job (DataFrameWriterV2 overwrite with Iceberg's validate-from-snapshot-id and
# serializable isolation) that loses to an INSERT committed after its starting snapshot. It runs
# in its own Python process so its SparkSession (Iceberg jar, catalog) cannot clash with sessions
# other test modules configure differently in this process.
_SPARK_JOB = r"""
import json, sys, tempfile
from pyspark.sql import SparkSession
from pyspark.sql.functions import col
from occflow.core.classify import classify

jar, warehouse = sys.argv[1], tempfile.mkdtemp()
spark = (
    SparkSession.builder.master("local[1]").appName("occflow-classify-real-iceberg")
    .config("spark.jars", jar)
    .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
    .config("spark.sql.catalog.local.type", "hadoop")
    .config("spark.sql.catalog.local.warehouse", warehouse)
    .config("spark.sql.shuffle.partitions", "1")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.memory", "768m")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("OFF")
spark.sql("CREATE TABLE local.db.t (id BIGINT, ds STRING) USING iceberg PARTITIONED BY (ds)")
spark.sql("INSERT INTO local.db.t VALUES (1, 'a'), (2, 'b')")
start = spark.sql("SELECT snapshot_id FROM local.db.t.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
spark.sql("INSERT INTO local.db.t VALUES (3, 'a')")  # the earlier job commits after `start`
out = {}
try:
    (
        spark.createDataFrame([(9, "a")], "id BIGINT, ds STRING")
        .writeTo("local.db.t")
        .option("validate-from-snapshot-id", str(start))
        .option("isolation-level", "serializable")
        .overwrite(col("ds") == "a")
    )
except Exception as error:
    java = getattr(error, "java_exception", None)
    out = {
        "python_class": f"{type(error).__module__}.{type(error).__qualname__}",
        "java_class": java.getClass().getName() if java is not None else None,
        "kind": classify(error).kind.value,
        "text_kind": classify(str(error)).kind.value,
    }
try:
    spark.sql("SELECT * FROM local.db.no_such_table").collect()
except Exception as error:
    out["unrelated_kind"] = classify(error).kind.value
    out["unrelated_class"] = f"{type(error).__module__}.{type(error).__qualname__}"
spark.stop()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_real_spark_iceberg_job_conflict_is_classified(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _SPARK_JOB, str(_iceberg_jar())],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["java_class"] == "org.apache.iceberg.exceptions.ValidationException", out
    assert out["kind"] == "validation_conflict"
    assert out["text_kind"] == "validation_conflict"
    # A real PySpark CapturedException that is no conflict (AnalysisException, TABLE_OR_VIEW_NOT_FOUND).
    assert out["unrelated_class"].startswith("pyspark.errors.exceptions"), out
    assert out["unrelated_kind"] == "not_a_conflict"

"""An Iceberg schema change is a commit: a new metadata file, no snapshot (issue 32 item 6).

Through the flow an operator runs (``WriteFlow`` over a ``SparkTarget`` on the run's one Spark
session with Iceberg on a JDBC catalog), ``ALTER TABLE ... ADD COLUMN`` must be reported with the
metadata version it committed, never as "committed nothing: there was nothing to change"; a
data commit is not taken for one. A write that lost while only a schema change
came after its start names that metadata version as its winner.
The oracle is Iceberg's own record, read apart from the code under test: the metadata files on
disk (their JSON: the schema they hold, the ``metadata-log`` that lists their predecessors) and
the ``snapshots`` table.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from occflow.core.classify import classify
from occflow.core.declaration import WriteDeclaration
from occflow.core.operations import Operation
from occflow.core.policy import derive_policy
from occflow.core.report import WriteReport, WriteStatus
from occflow.engines.outcome import ErrorInfo, WriteOutcome
from occflow.engines.spark.iceberg import current_snapshot
from occflow.engines.spark.target import SparkTarget
from occflow.operators.flow import WriteFlow
from occflow.operators.history import WriteHistory

pytestmark = pytest.mark.spark

PROFILE = "iceberg-serializable"
LOG = "occflow.test.schema_change"


def _metadata(location: str) -> dict[str, Any]:
    """A metadata file's JSON as Iceberg wrote it (the local warehouse: a file: URI or a path)."""
    path = Path(urlparse(location).path) if location.startswith("file:") else Path(location)
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _current_file(spark: Any, table: str) -> str:
    rows = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").collect()
    return str(rows[0]["file"])


def _snapshot_ids(spark: Any, table: str) -> list[int]:
    return sorted(int(r["snapshot_id"]) for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect())


def _columns(metadata: dict[str, Any]) -> list[str]:
    current = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    return [f["name"] for f in current["fields"]]


def _flow(spark_home: Path, table: str, operation: str, sql: str) -> WriteFlow:
    """The write as ``SparkWriteOperator.write`` runs it, without admission."""
    config: dict[str, Any] = {"home": str(spark_home), "app_name": "occflow-tests"}
    return WriteFlow(
        declaration=WriteDeclaration.create(table, operation, PROFILE),
        policy=derive_policy(PROFILE, operation, None, replans_from_fresh_snapshot=True, partitions=None),
        target=SparkTarget(config, table, job_for=lambda _: sql),
        context=None,
        log=logging.getLogger(LOG),
        history=WriteHistory(),
    )


def test_an_add_column_through_the_flow_reports_the_metadata_version_it_committed(
    iceberg_engine: Any, iceberg_table: str, spark_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spark, table = iceberg_engine.session(), iceberg_table
    before_file, before_snapshots = _current_file(spark, table), _snapshot_ids(spark, table)

    with caplog.at_level(logging.INFO, logger=LOG):
        report = _flow(spark_home, table, "alter_metadata", f"ALTER TABLE {table} ADD COLUMN note STRING").run()

    # Iceberg's record: a new metadata file holding the column, listing the old one before it,
    # and no new snapshot.
    after_file = _current_file(spark, table)
    written = _metadata(after_file)
    assert after_file != before_file and "note" in _columns(written)
    assert before_file in [e["metadata-file"] for e in written["metadata-log"]]
    assert _snapshot_ids(spark, table) == before_snapshots

    assert report.status is WriteStatus.COMMITTED and report.snapshot_id is None, report
    meta = report.metadata_commit
    assert meta is not None and meta.location == after_file
    # The number the file is named by (00003-<uuid>.metadata.json), counted here from the log:
    # one more file than the metadata-log lists before it, counted from 0.
    assert meta.version == len(written["metadata-log"]), (meta, written["metadata-log"])
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert not any("committed nothing" in line for line in lines), lines
    assert any(f"metadata version {meta.version}" in line and after_file in line for line in lines), lines
    # The XCom form keeps it.
    assert WriteReport.from_dict(report.to_dict()).metadata_commit == meta


def test_a_data_commit_is_not_reported_as_a_metadata_commit(
    iceberg_engine: Any, iceberg_table: str, spark_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spark, table = iceberg_engine.session(), iceberg_table
    before_snapshots = _snapshot_ids(spark, table)
    with caplog.at_level(logging.INFO, logger=LOG):
        # Matches no partition: Iceberg still commits a (delete) snapshot for it.
        report = _flow(spark_home, table, "delete", f"DELETE FROM {table} WHERE ds = 'none'").run()
    (new,) = set(_snapshot_ids(spark, table)) - set(before_snapshots)  # Iceberg's record
    assert report.status is WriteStatus.COMMITTED and report.snapshot_id == new, report
    assert report.metadata_commit is None and "metadata_commit" not in report.engine_details
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert any(f"committed delete on {table}: " in line and f"snapshot {new}" in line for line in lines), lines
    assert not any("metadata version" in line for line in lines), lines


def _lost_on_stale_metadata(table: str) -> WriteOutcome:
    """A write that lost its commit to a newer table version, as the engine reports Iceberg's
    ``CommitFailedException`` (on this Iceberg a stale ALTER rebases and commits, see the
    conformance table, so no write of this suite loses to a schema change by itself)."""
    error = ErrorInfo("Py4JJavaError", ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit "
                                        f"changes based on stale table metadata of {table}",))
    return WriteOutcome(engine="spark-iceberg", table=table, operation=Operation.ALTER_METADATA, committed=False,
                        seconds=0.1, error=error, classification=classify(error.text))


def test_a_schema_change_a_write_lost_to_is_named_as_its_winner(iceberg_engine: Any, iceberg_table: str) -> None:
    engine, table = iceberg_engine, iceberg_table
    spark = engine.session()
    start = current_snapshot(spark, table)  # where the losing write started
    assert start is not None and start.metadata_file is not None
    winner = engine.run(f"ALTER TABLE {table} ADD COLUMN first_note STRING", table, "alter_metadata")
    assert winner.committed and winner.metadata_commit is not None, winner.error
    lost = _lost_on_stale_metadata(table)
    assert lost.classification is not None and lost.classification.is_conflict, lost.classification

    named = engine.format.lost(spark, table, start, lost).classification.winning_commit
    assert named is not None and named.snapshot_id is None, named
    # Iceberg's record: the metadata file right after the one the write started on.
    current = _current_file(spark, table)
    files = [e["metadata-file"] for e in _metadata(current)["metadata-log"]] + [current]
    following = files[files.index(start.metadata_file) + 1]
    assert named.tag["metadata_file"] == following == winner.metadata_commit.location, (named, files)
    assert named.tag["metadata_version"] == str(winner.metadata_commit.version)
    assert named.operation is not None and named.operation.startswith("metadata change"), named
    assert f"metadata version {winner.metadata_commit.version}" in named.describe()


def test_a_snapshot_after_the_start_is_still_the_winner_before_a_schema_change(
    iceberg_engine: Any, iceberg_table: str
) -> None:
    engine, table = iceberg_engine, iceberg_table
    spark = engine.session()
    start = current_snapshot(spark, table)
    assert start is not None
    engine.run(f"ALTER TABLE {table} ADD COLUMN later_note STRING", table, "alter_metadata")
    appended = engine.run(f"INSERT INTO {table} VALUES (9, 'a', 9, 'x')", table, "insert_into")
    assert appended.committed and appended.snapshot_id is not None, appended.error
    named = engine.format.lost(spark, table, start, _lost_on_stale_metadata(table)).classification.winning_commit
    assert named is not None and named.snapshot_id == appended.snapshot_id, named

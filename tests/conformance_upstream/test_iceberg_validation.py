"""Iceberg's own commit-validation tests, replayed on real Spark 3.5 + Iceberg 1.10.2, as the oracle
for the ``iceberg-serializable`` / ``iceberg-snapshot`` profiles.

Sources (apache/iceberg at tag apache-iceberg-1.10.2, ``core/src/test/java/org/apache/iceberg/``):
``TestOverwriteWithValidation``, ``TestReplacePartitions``, ``TestRowDelta``; the DataFrame write
option from ``spark/v3.5/spark/src/main/java/org/apache/iceberg/spark/source/SparkWrite.java``
(``DynamicOverwrite`` / ``OverwriteByFilter`` validate only when the ``isolation-level`` write
option is set, from ``validate-from-snapshot-id``).

Upstream builds ``DataFile`` objects by hand; here they are real files: the target table holds
one file in partition ``ds=a`` (id 1) and one in ``ds=b`` (id 2), and the "new" files a pending
operation adds are real files of a staging table with the same spec. Each case interleaves two
writers deterministically exactly as the Java test does: the pending operation is built through
Iceberg's Java API (py4j: ``Spark3Util.loadIcebergTable``) with ``validateFromSnapshot(base)``,
the concurrent commit lands (Spark SQL, or the Java API), then the pending operation commits.

Each case asserts the real outcome (commits, or the ``ValidationException`` message upstream
expects) and the table's rows, then what the profile cell for the pair says, with the rule that
the profile is never LESS conservative than the engine. Java-API operations map to the Spark
statements that commit through them (SparkWrite): a validated ``OverwriteFiles`` with a
conflict-detection filter is a copy-on-write UPDATE/DELETE/MERGE, a ``RowDelta`` a merge-on-read
one, ``ReplacePartitions`` an INSERT OVERWRITE. The ``isolation-level`` write option turns INSERT
OVERWRITE / overwrite-by-filter into a validated commit (fact c): the ``iceberg-*-validated``
profiles say so (``test_profile_knows_the_isolation_level_write_option``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from occflow.core.classify import classify
from occflow.core.footprint import FileRef, Footprint
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import get_profile

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SERIALIZABLE = get_profile("iceberg-serializable")
SNAPSHOT = get_profile("iceberg-snapshot")
CONFLICTING = "Found conflicting files that can contain records matching"
MISSING = "Missing required files to delete"
_names = itertools.count()


@pytest.fixture(scope="module")
def spark(iceberg_engine: Any) -> Any:
    """The run's one Spark session (tests/conftest.py), quiet: these tests provoke failures."""
    session = iceberg_engine.session()
    session.sparkContext.setLogLevel("OFF")
    return session


class Lake:
    """A target table (ds=a: id 1, ds=b: id 2) and a staging table whose files the pending
    operations add (ds=a: id 10, ds=b: id 20), both loaded as Iceberg Java tables."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        n = next(_names)
        self.name, staging = f"lake.db.up_t{n}", f"lake.db.up_s{n}"
        for name, (a, b) in ((self.name, (1, 2)), (staging, (10, 20))):
            spark.sql(
                f"CREATE TABLE {name} (id BIGINT, ds STRING) USING iceberg PARTITIONED BY (ds) "
                "TBLPROPERTIES ('format-version'='2')"
            )
            spark.sql(f"INSERT INTO {name} VALUES ({a}, 'a')")
            spark.sql(f"INSERT INTO {name} VALUES ({b}, 'b')")
        self.table = self.load(self.name)
        self.base = self.table.currentSnapshot().snapshotId()
        self.old = self.files(self.table)  # {"a": DataFile, "b": DataFile}
        self.new = self.files(self.load(staging))
        self.expr = spark._jvm.org.apache.iceberg.expressions.Expressions

    def load(self, name: str) -> Any:
        jvm = self.spark._jvm
        return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(self.spark._jsparkSession, name)

    def files(self, table: Any) -> dict[str, Any]:
        found = {}
        for snapshot in table.snapshots():
            for f in snapshot.addedDataFiles(table.io()):
                # PartitionData{ds=b}
                found[str(f.partition()).split("ds=", 1)[1].rstrip("}")] = f
        return found

    def ds(self, value: str) -> Any:
        return self.expr.equal("ds", value)

    def insert(self, id_: int, ds: str) -> None:
        self.spark.sql(f"INSERT INTO {self.name} VALUES ({id_}, '{ds}')")

    def rows(self) -> list[tuple[int, str]]:
        return sorted((r.id, r.ds) for r in self.spark.sql(f"SELECT id, ds FROM {self.name}").collect())


def outcome(commit: Callable[[], object]) -> str | None:
    """None when it commits; else the error text, which must classify as a validation conflict."""
    try:
        commit()
    except Exception as exc:  # noqa: BLE001 - the engine's error is the observation
        assert classify(exc).kind is ConflictKind.VALIDATION_CONFLICT, str(exc)[:500]
        return str(exc)
    return None


def fails_with(text: str | None, message: str) -> bool:
    return text is not None and f"ValidationException: {message}" in text


def assert_never_less_conservative(engine_fails: bool, *cells: tuple[Any, Op, Op]) -> None:
    for profile, earlier, later in cells:
        if engine_fails:
            cell = profile.cell(earlier, later)
            assert cell.later_fails, f"{profile.name} {earlier.value}->{later.value} says {cell.effect.value}"


# ---- TestOverwriteWithValidation ------------------------------------------------------------


def test_overwrite_incompatible_addition_validated(spark: Any) -> None:
    """testOverwriteIncompatibleAdditionValidated: a new file in the filter fails the overwrite."""
    lake = Lake(spark)
    pending = (
        lake.table.newOverwrite()
        .addFile(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingData()
    )
    lake.insert(3, "b")
    assert fails_with(outcome(pending.commit), CONFLICTING)
    assert lake.rows() == [(1, "a"), (2, "b"), (3, "b")]
    # a copy-on-write UPDATE/DELETE/MERGE of ds=b after an append to ds=b (serializable)
    assert_never_less_conservative(True, (SERIALIZABLE, Op.INSERT_INTO, Op.UPDATE), (SERIALIZABLE, Op.INSERT_INTO, Op.MERGE))


def test_overwrite_compatible_addition_validated(spark: Any) -> None:
    """testOverwriteCompatibleAdditionValidated: a new file outside the filter does not."""
    lake = Lake(spark)
    pending = (
        lake.table.newOverwrite()
        .deleteFile(lake.old["b"])
        .addFile(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingData()
    )
    lake.insert(3, "a")
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (3, "a"), (20, "b")]
    # different partitions: the profile's footprints do not overlap, nothing to conflict
    append = Footprint(Op.INSERT_INTO, frozenset(), frozenset({"ds=a"}), files_added=frozenset({FileRef("n", "ds=a")}))
    update = Footprint(Op.UPDATE, frozenset({"ds=b"}), frozenset({"ds=b"}))
    assert not append.overlaps(update)
    assert SERIALIZABLE.validator is not None and SERIALIZABLE.validator(update, append) is None


def test_overwrite_compatible_addition_not_validated(spark: Any) -> None:
    """testOverwriteCompatibleAdditionNotValidated: without validation a new file in the same
    partition does not fail the overwrite (Spark's SNAPSHOT isolation checks only deletes)."""
    lake = Lake(spark)
    pending = (
        lake.table.newOverwrite()
        .deleteFile(lake.old["b"])
        .addFile(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingDeletes()
    )
    lake.insert(3, "b")
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (3, "b"), (20, "b")]
    cell = SNAPSHOT.cell(Op.INSERT_INTO, Op.UPDATE)
    assert not cell.later_fails, "iceberg-snapshot: a copy-on-write UPDATE commits after an append"
    assert SERIALIZABLE.cell(Op.INSERT_INTO, Op.UPDATE).later_fails  # the same pair, validated


def test_overwrite_incompatible_deletion_validated(spark: Any) -> None:
    """testOverwriteIncompatibleDeletionValidated: a file it deletes is gone."""
    lake = Lake(spark)
    pending = (
        lake.table.newOverwrite()
        .deleteFile(lake.old["b"])
        .addFile(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingData()
    )
    spark.sql(f"DELETE FROM {lake.name} WHERE ds = 'b'")  # a metadata delete: removes the file
    assert fails_with(outcome(pending.commit), MISSING)
    assert lake.rows() == [(1, "a")]
    assert_never_less_conservative(True, (SERIALIZABLE, Op.TRUNCATE, Op.UPDATE), (SNAPSHOT, Op.TRUNCATE, Op.UPDATE))


def test_a_file_rewritten_into_itself_stays_live(spark: Any) -> None:
    """Iceberg checks that the files an overwrite deletes are live, not that nobody removed them
    (ManifestFilterManager), and validateAddedDataFiles skips ``replace`` snapshots: a rewrite that
    puts a file back as it was fails nothing. The profile's cell says the later job fails (coarser);
    its validator checks liveness as Iceberg does."""
    lake = Lake(spark)
    pending = (
        lake.table.newOverwrite()
        .deleteFile(lake.old["b"])
        .addFile(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingData()
        .validateNoConflictingDeletes()
    )
    lake.load(lake.name).newRewrite().deleteFile(lake.old["b"]).addFile(lake.old["b"]).commit()
    assert lake.load(lake.name).currentSnapshot().operation() == "replace"
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (20, "b")]
    # The cell stays conservative (a compaction that really rewrites the file fails the update);
    # the validator, like Iceberg, checks liveness: the file is still live, no conflict.
    assert SERIALIZABLE.cell(Op.OPTIMIZE, Op.UPDATE).later_fails
    f = FileRef("b1", "ds=b")
    rewrite = Footprint(Op.OPTIMIZE, frozenset({"ds=b"}), frozenset({"ds=b"}), frozenset({f}), frozenset({f}), frozenset({f}), data_change=False)
    update = Footprint(Op.UPDATE, frozenset({"ds=b"}), frozenset({"ds=b"}), frozenset({f}), frozenset({f}))
    assert SERIALIZABLE.validator is not None
    assert SERIALIZABLE.validator(update, rewrite) is None
    # ... and a compaction that replaced the file by another one fails it, as Iceberg does.
    g = FileRef("b2", "ds=b")
    really = Footprint(Op.OPTIMIZE, frozenset({"ds=b"}), frozenset({"ds=b"}), frozenset({f}), frozenset({f}), frozenset({g}), data_change=False)
    found = SERIALIZABLE.validator(update, really)
    assert found is not None and found[0] is ConflictKind.VALIDATION_CONFLICT


# ---- TestReplacePartitions ------------------------------------------------------------------


def _replace_b(lake: Lake, validated: bool) -> Any:
    op = lake.table.newReplacePartitions().addFile(lake.new["b"])
    if validated:
        op = op.validateFromSnapshot(lake.base).validateNoConflictingData().validateNoConflictingDeletes()
    return op


def test_append_replace_conflict(spark: Any) -> None:
    """testAppendReplaceConflict: an append to the partition fails a validated replace."""
    lake = Lake(spark)
    pending = _replace_b(lake, validated=True)
    lake.insert(3, "b")
    assert fails_with(outcome(pending.commit), f"{CONFLICTING} partitions [ds=b]")
    assert lake.rows() == [(1, "a"), (2, "b"), (3, "b")]


def test_append_replace_no_conflict(spark: Any) -> None:
    """testAppendReplaceNoConflict: an append to another partition does not."""
    lake = Lake(spark)
    pending = _replace_b(lake, validated=True)
    lake.insert(3, "a")
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (3, "a"), (20, "b")]


def test_replace_partitions_validation_not_invoked(spark: Any) -> None:
    """testValidationNotInvoked: without validation the replace commits and drops the partition
    as it is at commit, the concurrent append included (what SQL INSERT OVERWRITE does)."""
    lake = Lake(spark)
    pending = _replace_b(lake, validated=False)
    lake.insert(3, "b")
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (20, "b")]
    for profile in (SERIALIZABLE, SNAPSHOT):
        cell = profile.cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE)
        assert not cell.later_fails and cell.effect.value == "overwrite"


# ---- TestRowDelta ---------------------------------------------------------------------------


def _row_delta_b(lake: Lake) -> Any:
    return (
        lake.table.newRowDelta()
        .addRows(lake.new["b"])
        .validateFromSnapshot(lake.base)
        .conflictDetectionFilter(lake.ds("b"))
        .validateNoConflictingDataFiles()
    )


def test_row_delta_validate_no_conflicts(spark: Any) -> None:
    """testValidateNoConflicts: a new file matching the filter fails a merge-on-read commit."""
    lake = Lake(spark)
    pending = _row_delta_b(lake)
    lake.insert(3, "b")
    assert fails_with(outcome(pending.commit), CONFLICTING)
    assert lake.rows() == [(1, "a"), (2, "b"), (3, "b")]
    assert_never_less_conservative(True, (SERIALIZABLE, Op.INSERT_INTO, Op.MERGE), (SERIALIZABLE, Op.INSERT_INTO, Op.UPDATE))


def test_row_delta_non_conflicting(spark: Any) -> None:
    """testConcurrentNonConflictingRowDelta: a new file outside the filter does not."""
    lake = Lake(spark)
    pending = _row_delta_b(lake)
    lake.insert(3, "a")
    assert outcome(pending.commit) is None
    assert lake.rows() == [(1, "a"), (2, "b"), (3, "a"), (20, "b")]


# ---- fact (c): the DataFrame writer's isolation-level option ---------------------------------


def _dataframe_overwrite(lake: Lake, kind: str, isolation: str | None) -> Callable[[], object]:
    df = lake.spark.createDataFrame([(30, "b")], "id BIGINT, ds STRING")
    writer = df.writeTo(lake.name).option("validate-from-snapshot-id", str(lake.base))
    if isolation is not None:
        writer = writer.option("isolation-level", isolation)
    if kind == "partitions":
        return writer.overwritePartitions
    from pyspark.sql.functions import col

    return lambda: writer.overwrite(col("ds") == "b")


@pytest.mark.parametrize("kind", ["partitions", "filter"])
def test_dataframe_overwrite_validates_only_with_the_isolation_level_option(spark: Any, kind: str) -> None:
    """SparkWrite.DynamicOverwrite / OverwriteByFilter: the option makes them validate."""
    validated = Lake(spark)
    pending = _dataframe_overwrite(validated, kind, "serializable")
    validated.insert(3, "b")
    assert fails_with(outcome(pending), CONFLICTING)
    assert validated.rows() == [(1, "a"), (2, "b"), (3, "b")]

    plain = Lake(spark)
    pending = _dataframe_overwrite(plain, kind, None)
    plain.insert(3, "b")
    assert outcome(pending) is None
    assert plain.rows() == [(1, "a"), (30, "b")]  # the concurrent append is overwritten
    assert not SERIALIZABLE.cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE).later_fails  # right without the option


def test_profile_knows_the_isolation_level_write_option() -> None:
    """The engine evidence is test_dataframe_overwrite_validates_only_with_the_isolation_level_option
    and test_append_replace_conflict; here only what the profiles say for that write: the
    ``-validated`` profiles (declared for jobs that set the option) fail it, the others commit."""
    validated = get_profile("iceberg-serializable-validated")
    cell = validated.cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE)
    assert cell.later_fails and cell.exception is ConflictKind.VALIDATION_CONFLICT
    assert CONFLICTING in cell.note  # the ValidationException the engine raised above
    assert validated.validator is not None
    append = Footprint(Op.INSERT_INTO, frozenset(), frozenset({"ds=b"}), files_added=frozenset({FileRef("n", "ds=b")}))
    overwrite = Footprint(Op.INSERT_OVERWRITE, frozenset(), frozenset({"ds=b"}), files_added=frozenset({FileRef("o", "ds=b")}))
    found = validated.validator(overwrite, append)
    assert found is not None and CONFLICTING in found[1]
    # snapshot checks only conflicting deletes: an append does not fail the overwrite
    assert not get_profile("iceberg-snapshot-validated").cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE).later_fails
    for profile in (SERIALIZABLE, SNAPSHOT):  # no write option: the overwrite commits
        assert not profile.cell(Op.INSERT_INTO, Op.INSERT_OVERWRITE).later_fails

"""Every cell of the Iceberg matrices, and the ported validator reproducing each one.

The expectation below restates the matrix from the Iceberg 1.10 source independently of the
module's data (see the docstring of ``occflow.core.profiles.iceberg``): a copy-on-write
UPDATE/DELETE/MERGE fails after any data commit on its partition, except that snapshot
isolation lets it commit beside an append; a compaction fails once its input files are gone;
appends, SQL overwrites, metadata-only deletes and ALTER TABLE never fail validation.
"""

from __future__ import annotations

import re

import pytest

from occflow.core.errors import CommitConflict, UnknownOperationError
from occflow.core.footprint import FileRef, Footprint, PartitionKey
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import Cell, Condition, Effect, OverwriteScope, Profile, RuleKind, get_profile
from occflow.core.profiles.iceberg import ICEBERG_MATRIX, SPARK_CHECKED, snapshot_operation
from occflow.core.reference import ReferenceTable
from occflow.core.render import matrix_markdown, matrix_table

PROFILES = {"serializable": get_profile("iceberg-serializable"), "snapshot": get_profile("iceberg-snapshot")}
OPS = (
    Op.INSERT_OVERWRITE,
    Op.TRUNCATE,
    Op.INSERT_INTO,
    Op.UPDATE,
    Op.DELETE,
    Op.MERGE,
    Op.OPTIMIZE,
    Op.ALTER_METADATA,
)
ROW_LEVEL = (Op.UPDATE, Op.DELETE, Op.MERGE)

# later job -> one mark per earlier job in OPS order: "F" the later job fails, "." it commits.
_EXPECTED = {
    "serializable": {
        Op.INSERT_OVERWRITE: "........",
        Op.TRUNCATE: "........",
        Op.INSERT_INTO: "........",
        Op.UPDATE: "FFFFFFF.",
        Op.DELETE: "FFFFFFF.",
        Op.MERGE: "FFFFFFF.",
        Op.OPTIMIZE: "FF.FFFF.",
        Op.ALTER_METADATA: "........",
    },
    "snapshot": {
        Op.INSERT_OVERWRITE: "........",
        Op.TRUNCATE: "........",
        Op.INSERT_INTO: "........",
        Op.UPDATE: "FF.FFFF.",
        Op.DELETE: "FF.FFFF.",
        Op.MERGE: "FF.FFFF.",
        Op.OPTIMIZE: "FF.FFFF.",
        Op.ALTER_METADATA: "........",
    },
}
# What a later job that commits does to the data, by its operation.
_EFFECT_WHEN_OK = {
    Op.INSERT_INTO: Effect.APPEND,
    Op.INSERT_OVERWRITE: Effect.OVERWRITE,
    Op.TRUNCATE: Effect.OVERWRITE,
    Op.UPDATE: Effect.APPLIED,
    Op.DELETE: Effect.APPLIED,
    Op.MERGE: Effect.APPLIED,
    Op.OPTIMIZE: Effect.COMPACTION_COMPLETES,
    Op.ALTER_METADATA: Effect.APPLIED,
}
_JAVA_CLASS = re.compile(
    r"\b(Base(OverwriteFiles|ReplacePartitions|RewriteFiles|Transaction)|MergeAppend|StreamingDelete)\b"
)


def canonical(
    op: Op,
    partition: PartitionKey,
    live: dict[PartitionKey, frozenset[FileRef]],
    txn: str,
    *,
    whole_table: bool = False,
) -> Footprint:
    """The canonical footprint of ``op`` on ``partition`` (the reference engine's generic rule)."""
    if op is Op.ALTER_METADATA:
        return Footprint(op, frozenset(), frozenset(), data_change=False, metadata_change=True)
    new = frozenset({FileRef(f"{txn}-new", partition)})
    if op is Op.INSERT_INTO:
        return Footprint(op, frozenset(), frozenset({partition}), files_added=new, blind_append=True)
    read = frozenset(f for files in live.values() for f in files) if whole_table else live[partition]
    written = frozenset(live) if whole_table else frozenset({partition})
    return Footprint(
        op,
        None if whole_table else frozenset({partition}),
        written,
        files_read=read,
        files_removed=frozenset(f for f in read if f.partition in written),
        files_added=frozenset() if op is Op.TRUNCATE else new,
        data_change=op is not Op.OPTIMIZE,
    )


LIVE = {
    "ds=1": frozenset({FileRef("a.parquet", "ds=1"), FileRef("b.parquet", "ds=1")}),
    "ds=2": frozenset({FileRef("c.parquet", "ds=2")}),
}


def _short_source(cell: Cell) -> str:
    match = _JAVA_CLASS.search(cell.source)
    assert match, cell.source
    return match.group(0)


def _cell_params() -> list[object]:
    params = []
    for level, profile in PROFILES.items():
        for earlier in OPS:
            for later in OPS:
                cell = profile.cell(earlier, later)
                outcome = "fails" if cell.later_fails else "ok"
                cell_id = f"{level}:{earlier.value}-then-{later.value}:{outcome}:{_short_source(cell)}"
                params.append(pytest.param(level, earlier, later, id=cell_id))
    return params


CELLS = _cell_params()


@pytest.mark.parametrize("level", PROFILES)
def test_matrix_has_the_144_pairs_of_the_eight_iceberg_operations_and_four_maintenance_ones(level: str) -> None:
    profile = PROFILES[level]
    ops = (*OPS, Op.EXPIRE_SNAPSHOTS, Op.REMOVE_ORPHAN_FILES, Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES)
    assert profile.operations == ops
    assert len(profile.cells) == 144
    assert {(c.earlier, c.later) for c in profile.cells} == {(a, b) for a in ops for b in ops}
    assert len(ICEBERG_MATRIX) == 144


@pytest.mark.parametrize("level", PROFILES)
def test_expire_snapshots_is_kept_apart_from_every_job_that_validates_from_its_snapshot(level: str) -> None:
    """Measured pair by pair, every expire_snapshots cell commits; the jobs that read files and
    validate from the snapshot they read are kept apart from it (the rewrite's 'Cannot determine
    history', tests/engines/test_maintenance_iceberg.py), the others run beside it."""
    profile = PROFILES[level]
    expire = Op.EXPIRE_SNAPSHOTS
    for op in profile.operations:
        for cell in (profile.cell(expire, op), profile.cell(op, expire)):
            assert not cell.later_fails, cell
        reads = op in (Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE, Op.REWRITE_POSITION_DELETES, Op.REMOVE_ORPHAN_FILES)
        assert profile.conflicts(expire, op) is reads, op
    assert expire in profile.reads_whole_table


@pytest.mark.parametrize(("level", "earlier", "later"), CELLS)
def test_cell_matches_the_iceberg_source(level: str, earlier: Op, later: Op) -> None:
    cell = PROFILES[level].cell(earlier, later)
    expected_fail = _EXPECTED[level][later][OPS.index(earlier)] == "F"
    assert cell.later_fails is expected_fail
    if expected_fail:
        assert cell.exception is ConflictKind.VALIDATION_CONFLICT
        assert cell.effect is Effect.LATER_FAILS
    else:
        assert cell.exception is None
        assert cell.effect is _EFFECT_WHEN_OK[later]
    assert _JAVA_CLASS.search(cell.source), "every cell cites the Java class whose commit decides it"


@pytest.mark.parametrize(("level", "earlier", "later"), CELLS)
def test_validator_on_canonical_footprints_reproduces_the_cell(level: str, earlier: Op, later: Op) -> None:
    profile = PROFILES[level]
    assert profile.validator is not None
    cell = profile.cell(earlier, later)
    # Both jobs start on the snapshot with files LIVE; the earlier one commits first.
    mine = canonical(later, "ds=1", LIVE, "later")
    theirs = canonical(earlier, "ds=1", LIVE, "earlier")
    verdict = profile.validator(mine, theirs)
    if not cell.later_fails:
        assert verdict is None
        return
    assert verdict is not None
    kind, reason = verdict
    assert kind is cell.exception
    # The validator fails in the same Iceberg check the cell names, first in Iceberg's order.
    method = reason.split(": ", 1)[0]
    assert cell.note.startswith(method + ":")
    assert "ds=1" in reason or "Missing required files" in reason


@pytest.mark.parametrize(("level", "earlier", "later"), CELLS)
def test_reference_engine_with_the_profile_fails_exactly_the_failing_cells(
    level: str, earlier: Op, later: Op
) -> None:
    profile = PROFILES[level]
    table = ReferenceTable(profile, partitions=("ds=1", "ds=2"))
    table.run(Op.INSERT_INTO, ["ds=1"])
    table.run(Op.INSERT_INTO, ["ds=2"])
    later_txn = table.begin(later, ["ds=1"])
    table.run(earlier, ["ds=1"])
    cell = profile.cell(earlier, later)
    if cell.later_fails:
        with pytest.raises(CommitConflict) as raised:
            later_txn.commit()
        assert raised.value.kind is cell.exception
    else:
        commit = later_txn.commit()
        assert commit.operation is later


@pytest.mark.parametrize("level", PROFILES)
def test_jobs_on_disjoint_partitions_never_conflict(level: str) -> None:
    validator = PROFILES[level].validator
    assert validator is not None
    for earlier in OPS:
        for later in OPS:
            if Op.ALTER_METADATA in (earlier, later):
                continue  # table-wide by nature; covered by the same-partition cells (never fail)
            mine = canonical(later, "ds=1", LIVE, "later")
            theirs = canonical(earlier, "ds=2", LIVE, "earlier")
            assert validator(mine, theirs) is None, (earlier.value, later.value)


@pytest.mark.parametrize("level", PROFILES)
@pytest.mark.parametrize("later", ROW_LEVEL, ids=lambda op: op.value)
def test_whole_table_reader_conflicts_with_a_write_in_another_partition(level: str, later: Op) -> None:
    """A MERGE/UPDATE/DELETE with no partition predicate scans with filter ``true``."""
    profile = PROFILES[level]
    assert profile.validator is not None
    mine = canonical(later, "ds=1", LIVE, "later", whole_table=True)
    for earlier in OPS:
        theirs = canonical(earlier, "ds=2", LIVE, "earlier")
        verdict = profile.validator(mine, theirs)
        expected = profile.cell(earlier, later).exception
        assert (None if verdict is None else verdict[0]) is expected, earlier.value
        if verdict is not None and verdict[1].startswith("MergingSnapshotProducer"):
            assert "whole table" in verdict[1]


def test_snapshot_isolation_lets_a_whole_table_merge_commit_beside_an_append_elsewhere() -> None:
    mine = canonical(Op.MERGE, "ds=1", LIVE, "m", whole_table=True)
    append = canonical(Op.INSERT_INTO, "ds=2", LIVE, "a")
    serializable = PROFILES["serializable"].validator
    snapshot = PROFILES["snapshot"].validator
    assert serializable is not None and snapshot is not None
    verdict = serializable(mine, append)
    assert verdict is not None
    assert verdict[1].startswith("MergingSnapshotProducer.validateAddedDataFiles")
    assert "a-new" in verdict[1]
    assert snapshot(mine, append) is None


def test_compaction_is_not_new_data_for_a_serializable_update() -> None:
    """``validateAddedDataFiles`` skips ``replace`` snapshots: the update fails on its lost inputs."""
    validator = PROFILES["serializable"].validator
    assert validator is not None
    compaction = canonical(Op.OPTIMIZE, "ds=1", LIVE, "c")
    assert snapshot_operation(compaction) == "replace"
    verdict = validator(canonical(Op.UPDATE, "ds=1", LIVE, "u"), compaction)
    assert verdict is not None
    assert verdict[1].startswith("ManifestFilterManager.filterManifests (failMissingDeletePaths)")
    assert "a.parquet" in verdict[1] and "b.parquet" in verdict[1]


def test_copy_on_write_delete_of_every_row_is_a_delete_snapshot_that_still_conflicts() -> None:
    emptied = Footprint(
        Op.DELETE,
        frozenset({"ds=1"}),
        frozenset({"ds=1"}),
        files_read=LIVE["ds=1"],
        files_removed=LIVE["ds=1"],
    )
    assert snapshot_operation(emptied) == "delete"
    for level, profile in PROFILES.items():
        assert profile.validator is not None
        verdict = profile.validator(canonical(Op.MERGE, "ds=1", LIVE, "m"), emptied)
        assert verdict is not None, level
        assert "Missing required files to delete" in verdict[1]


def test_compaction_after_compaction_fails_on_missing_files() -> None:
    for profile in PROFILES.values():
        assert profile.validator is not None
        verdict = profile.validator(
            canonical(Op.OPTIMIZE, "ds=1", LIVE, "second"), canonical(Op.OPTIMIZE, "ds=1", LIVE, "first")
        )
        assert verdict == (
            ConflictKind.VALIDATION_CONFLICT,
            "ManifestFilterManager.filterManifests (failMissingDeletePaths): Missing required files to "
            "delete: [a.parquet, b.parquet]",
        )


@pytest.mark.parametrize("level", PROFILES)
def test_validator_rejects_an_operation_iceberg_cannot_commit(level: str) -> None:
    validator = PROFILES[level].validator
    assert validator is not None
    minor = Footprint(Op.MINOR_COMPACT, frozenset({"ds=1"}), frozenset({"ds=1"}), data_change=False)
    with pytest.raises(UnknownOperationError, match="minor_compact.*insert_into"):
        validator(minor, canonical(Op.INSERT_INTO, "ds=1", LIVE, "a"))
    with pytest.raises(UnknownOperationError, match="minor_compact"):
        validator(canonical(Op.UPDATE, "ds=1", LIVE, "u"), minor)


@pytest.mark.parametrize("level", PROFILES)
def test_profile_is_footprint_ruled_with_partition_overwrites_and_iceberg_commit_errors(level: str) -> None:
    profile: Profile = PROFILES[level]
    assert profile.rules is RuleKind.FOOTPRINT
    assert profile.overwrite_scope is OverwriteScope.PARTITION_AT_COMMIT
    assert profile.extra_kinds == (ConflictKind.COMMIT_FAILED, ConflictKind.COMMIT_STATE_UNKNOWN)
    assert profile.table_format == "iceberg"
    assert level in profile.isolation
    document = profile.to_dict()
    assert document["profile"] == f"iceberg-{level}"
    cells = document["cells"]
    assert isinstance(cells, list) and len(cells) == 144


def test_the_levels_differ_only_where_a_row_level_job_follows_an_append() -> None:
    serializable, snapshot = PROFILES["serializable"], PROFILES["snapshot"]
    differing = {
        (a, b) for a in OPS for b in OPS if serializable.later_fails(a, b) != snapshot.later_fails(a, b)
    }
    assert differing == {(Op.INSERT_INTO, later) for later in ROW_LEVEL}
    assert all(not snapshot.later_fails(a, b) for a, b in differing)


def test_cells_run_on_spark_are_cells_of_the_matrix_and_say_so() -> None:
    assert len(SPARK_CHECKED) == 25 + 2 * (17 + 63)  # and the maintenance pairs at both levels
    for level, earlier, later in SPARK_CHECKED:
        cell = PROFILES[level.value].cell(earlier, later)
        assert "Checked on Spark 3.5.9 + Iceberg 1.10.2." in cell.note
        assert "UNSURE" not in cell.note


@pytest.mark.parametrize("name", ["iceberg-serializable", "iceberg-snapshot"])
def test_missing_files_check_is_liveness_a_file_rewritten_into_itself_stays_live(name: str) -> None:
    """ManifestFilterManager fails a delete of a file no longer in the live manifests; a winner
    that removed and re-added the same path left it live, so the later job commits."""
    profile = get_profile(name)
    assert profile.validator is not None
    f = FileRef("p=1/data-0.parquet", "p=1")
    mine = Footprint(
        Op.OPTIMIZE, frozenset({"p=1"}), frozenset({"p=1"}), files_read=frozenset({f}), files_removed=frozenset({f}),
        files_added=frozenset({FileRef("p=1/compacted.parquet", "p=1")}), data_change=False,
    )
    into_itself = Footprint(
        Op.OPTIMIZE, frozenset({"p=1"}), frozenset({"p=1"}), files_read=frozenset({f}), files_removed=frozenset({f}),
        files_added=frozenset({f}), data_change=False,
    )
    gone = Footprint(
        Op.OPTIMIZE, frozenset({"p=1"}), frozenset({"p=1"}), files_read=frozenset({f}), files_removed=frozenset({f}),
        files_added=frozenset({FileRef("p=1/other.parquet", "p=1")}), data_change=False,
    )
    assert profile.validator(mine, into_itself) is None
    verdict = profile.validator(mine, gone)
    assert verdict is not None and verdict[0] is ConflictKind.VALIDATION_CONFLICT


# ---- DataFrame overwrites written with the isolation-level write option ----------------------
#
# Restated from SparkWrite.DynamicOverwrite / OverwriteByFilter (Iceberg 1.10.2) and
# MergingSnapshotProducer: with option("isolation-level", L) and validate-from-snapshot-id the
# overwrite runs validateAddedDataFiles (serializable only: newer 'append'/'overwrite' snapshots
# adding a file to its partitions), then validateDeletedDataFiles (both levels: newer
# 'overwrite'/'replace'/'delete' snapshots removing one). Earlier jobs' snapshots, in OPS order:
# overwrite, delete, append, overwrite, overwrite, overwrite, replace, none.

VALIDATED = {
    "serializable": get_profile("iceberg-serializable-validated"),
    "snapshot": get_profile("iceberg-snapshot-validated"),
}
_ADDED, _DELETED = "MergingSnapshotProducer.validateAddedDataFiles", "MergingSnapshotProducer.validateDeletedDataFiles"
# earlier job -> the check a later validated overwrite fails in ("" : it commits).
_VALIDATED_OVERWRITE = {
    "serializable": dict(zip(OPS, (_ADDED, _DELETED, _ADDED, _ADDED, _ADDED, _ADDED, _DELETED, ""), strict=True)),
    "snapshot": dict(zip(OPS, (_DELETED, _DELETED, "", _DELETED, _DELETED, _DELETED, _DELETED, ""), strict=True)),
}
VALIDATED_CELLS = [
    pytest.param(level, earlier, later, id=f"{level}-validated:{earlier.value}-then-{later.value}")
    for level in VALIDATED
    for earlier in OPS
    for later in OPS
]


def _validated_expectation(level: str, earlier: Op, later: Op) -> str | None:
    """The check the later job fails in; None when the base profile's expectation applies."""
    return _VALIDATED_OVERWRITE[level][earlier] if later is Op.INSERT_OVERWRITE else None


@pytest.mark.parametrize(("level", "earlier", "later"), VALIDATED_CELLS)
def test_validated_cell_matches_the_iceberg_source(level: str, earlier: Op, later: Op) -> None:
    cell = VALIDATED[level].cell(earlier, later)
    check = _validated_expectation(level, earlier, later)
    if check is None:
        assert cell == PROFILES[level].cell(earlier, later), "every other cell is the base profile's"
        return
    assert cell.later_fails is bool(check)
    assert cell.effect is (Effect.LATER_FAILS if check else Effect.OVERWRITE)
    assert cell.exception is (ConflictKind.VALIDATION_CONFLICT if check else None)
    if check:
        assert cell.note.startswith(check + ":")
    assert "SparkWrite.DynamicOverwrite" in cell.source and f"isolation-level={level}" in cell.source
    assert "test_dataframe_overwrite_validates_only_with_the_isolation_level_option" in cell.source


@pytest.mark.parametrize("level", VALIDATED)
def test_validated_profile_differs_from_the_base_only_where_the_overwrite_validates(level: str) -> None:
    base, validated = PROFILES[level], VALIDATED[level]
    assert validated.operations == base.operations
    changed = {(a, b) for a in OPS for b in OPS if validated.cell(a, b) != base.cell(a, b)}
    assert changed == {(a, Op.INSERT_OVERWRITE) for a in OPS}  # new source everywhere in the column
    verdicts = {(a, b) for a, b in changed if validated.later_fails(a, b) != base.later_fails(a, b)}
    assert verdicts == {(a, Op.INSERT_OVERWRITE) for a in OPS if _VALIDATED_OVERWRITE[level][a]}
    assert validated.name == f"{base.name}-validated" and level in validated.isolation
    assert validated.extra_kinds == base.extra_kinds and validated.rules is RuleKind.FOOTPRINT


@pytest.mark.parametrize(("level", "earlier", "later"), VALIDATED_CELLS)
def test_reference_engine_with_the_validated_profile_fails_exactly_its_failing_cells(
    level: str, earlier: Op, later: Op
) -> None:
    profile = VALIDATED[level]
    table = ReferenceTable(profile, partitions=("ds=1", "ds=2"))
    table.run(Op.INSERT_INTO, ["ds=1"])
    table.run(Op.INSERT_INTO, ["ds=2"])
    later_txn = table.begin(later, ["ds=1"])
    table.run(earlier, ["ds=1"])
    cell = profile.cell(earlier, later)
    if not cell.later_fails:
        assert later_txn.commit().operation is later
        return
    with pytest.raises(CommitConflict) as raised:
        later_txn.commit()
    assert raised.value.kind is cell.exception
    method = cell.note.split(":", 1)[0]
    assert method in str(raised.value)


@pytest.mark.parametrize(("level", "earlier", "later"), VALIDATED_CELLS)
def test_validated_validator_on_canonical_footprints_reproduces_the_cell(level: str, earlier: Op, later: Op) -> None:
    profile = VALIDATED[level]
    assert profile.validator is not None
    verdict = profile.validator(canonical(later, "ds=1", LIVE, "later"), canonical(earlier, "ds=1", LIVE, "earlier"))
    cell = profile.cell(earlier, later)
    assert (None if verdict is None else verdict[0]) is cell.exception
    if verdict is not None:
        assert cell.note.startswith(verdict[1].split(": ", 1)[0] + ":")
    # ... and never across partitions (ALTER TABLE aside: it writes no snapshot at all)
    assert profile.validator(canonical(later, "ds=1", LIVE, "later"), canonical(earlier, "ds=2", LIVE, "e")) is None


def _dataframe_overwrite(partitions: frozenset[str] | None) -> Footprint:
    """``df.writeTo(t).overwritePartitions()``: reads nothing, replaces the partitions it writes."""
    return Footprint(
        Op.INSERT_OVERWRITE,
        frozenset(),
        partitions,
        files_added=frozenset({FileRef("new", p) for p in partitions or ("ds=1",)}),
    )


def test_validated_overwrite_is_scoped_by_the_partitions_it_replaces_not_by_what_it_read() -> None:
    append = canonical(Op.INSERT_INTO, "ds=1", LIVE, "a")
    serializable, snapshot = VALIDATED["serializable"].validator, VALIDATED["snapshot"].validator
    assert serializable is not None and snapshot is not None
    verdict = serializable(_dataframe_overwrite(frozenset({"ds=1"})), append)
    assert verdict is not None
    assert verdict[1] == (
        "MergingSnapshotProducer.validateAddedDataFiles: Found conflicting files that can contain records "
        "matching ds=1: [a-new]"
    )
    assert serializable(_dataframe_overwrite(frozenset({"ds=2"})), append) is None
    # an unpartitioned overwrite (the whole table) validates against every partition
    whole = serializable(_dataframe_overwrite(None), canonical(Op.INSERT_INTO, "ds=2", LIVE, "a"))
    assert whole is not None and "true (whole table)" in whole[1]
    assert snapshot(_dataframe_overwrite(frozenset({"ds=1"})), append) is None


def test_validated_overwrite_fails_after_a_rewrite_into_itself_deleted_entries_not_liveness() -> None:
    """validateDeletedDataFiles reads DELETED manifest entries: a 'replace' that removed and
    re-added the same file still has one, unlike the liveness check of a copy-on-write UPDATE."""
    f = FileRef("a.parquet", "ds=1")
    into_itself = Footprint(
        Op.OPTIMIZE, frozenset({"ds=1"}), frozenset({"ds=1"}), files_read=frozenset({f}),
        files_removed=frozenset({f}), files_added=frozenset({f}), data_change=False,
    )
    for level, profile in VALIDATED.items():
        assert profile.validator is not None
        verdict = profile.validator(_dataframe_overwrite(frozenset({"ds=1"})), into_itself)
        assert verdict is not None, level
        assert verdict[1].startswith(_DELETED + ": Found conflicting deleted files") and "a.parquet" in verdict[1]
        assert PROFILES[level].validator is not None
        assert PROFILES[level].validator(_dataframe_overwrite(frozenset({"ds=1"})), into_itself) is None


def test_base_profiles_never_validate_an_overwrite_even_with_the_validated_check_scope() -> None:
    """The SQL INSERT OVERWRITE (no write option) commits after every earlier job."""
    for level, profile in PROFILES.items():
        assert profile.validator is not None
        for earlier in OPS:
            theirs = canonical(earlier, "ds=1", LIVE, "e")
            assert profile.validator(_dataframe_overwrite(frozenset({"ds=1"})), theirs) is None, (level, earlier)


def test_rendered_matrices_mark_same_rows_cells_and_only_them() -> None:
    rlc = get_profile("delta-serializable-rlc")
    same = [c for c in rlc.cells if c.condition is Condition.SAME_ROWS]
    assert same, "delta-serializable-rlc has same-rows cells"
    text, page = matrix_table(rlc), matrix_markdown(rlc)
    for cell in same:
        assert cell.exception is not None
        row = next(line for line in page.splitlines() if line.startswith(f"| `{cell.earlier.value}` | **"))
        grid = row.split(" | ")[1:]
        assert grid[rlc.operations.index(cell.later)].strip(" |") == f"**fails**: `{cell.exception.value}` (same rows)"
    assert text.count("(same rows)") == len(same) + 1  # the cells and the legend
    iceberg = VALIDATED["serializable"]
    assert "(same rows)" not in matrix_table(iceberg) and "(same rows)" not in matrix_markdown(iceberg)

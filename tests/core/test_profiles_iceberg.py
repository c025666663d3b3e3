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
from occflow.core.profiles import Cell, Effect, OverwriteScope, Profile, RuleKind, get_profile
from occflow.core.profiles.iceberg import ICEBERG_MATRIX, SPARK_CHECKED, snapshot_operation
from occflow.core.reference import ReferenceTable

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
def test_matrix_has_all_64_pairs_of_the_eight_iceberg_operations(level: str) -> None:
    profile = PROFILES[level]
    assert profile.operations == OPS
    assert len(profile.cells) == 64
    assert {(c.earlier, c.later) for c in profile.cells} == {(a, b) for a in OPS for b in OPS}
    assert len(ICEBERG_MATRIX) == 64


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
    assert isinstance(cells, list) and len(cells) == 64


def test_the_levels_differ_only_where_a_row_level_job_follows_an_append() -> None:
    serializable, snapshot = PROFILES["serializable"], PROFILES["snapshot"]
    differing = {
        (a, b) for a in OPS for b in OPS if serializable.later_fails(a, b) != snapshot.later_fails(a, b)
    }
    assert differing == {(Op.INSERT_INTO, later) for later in ROW_LEVEL}
    assert all(not snapshot.later_fails(a, b) for a, b in differing)


def test_cells_run_on_spark_are_cells_of_the_matrix_and_say_so() -> None:
    assert len(SPARK_CHECKED) == 25
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

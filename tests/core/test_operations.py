from __future__ import annotations

from datetime import datetime, timezone

import pytest

from occflow.core.errors import InvalidDeclarationError, UnknownOperationError
from occflow.core.operations import (
    RETENTION_FLOORS,
    check_retention,
    parse_operation,
    statement_retention_hours,
)
from occflow.core.operations import Operation as Op
from occflow.core.profiles import PROFILES, Effect, footprint_reach, get_profile


@pytest.mark.parametrize(
    "text, expected",
    [
        ("insert_overwrite", Op.INSERT_OVERWRITE),
        ("INSERT OVERWRITE TABLE sales PARTITION (ds='2024-01-01') SELECT * FROM s", Op.INSERT_OVERWRITE),
        ("dynamic insert overwrite table t", Op.INSERT_OVERWRITE),
        ("TRUNCATE TABLE t", Op.TRUNCATE),
        ("insert into t values (1)", Op.INSERT_INTO),
        ("INSERT INTO TABLE t SELECT 1", Op.INSERT_INTO),
        ("UPDATE t SET x = 1", Op.UPDATE),
        ("delete from t where ds = '1'", Op.DELETE),
        ("MERGE INTO t USING s ON t.id = s.id", Op.MERGE),
        ("WITH s AS (SELECT 1 AS id), q AS (SELECT 2) MERGE INTO t USING s ON t.id = s.id", Op.MERGE),
        ("-- nightly upsert\nMERGE INTO t USING s ON 1=1", Op.MERGE),
        ("ALTER TABLE t MERGE SMALLFILES", Op.SMALL_FILE_MERGE),
        ("ALTER TABLE t COMPACT MINOR", Op.MINOR_COMPACT),
        ("alter table t partition (ds='1') compact major", Op.MAJOR_COMPACT),
        ("OPTIMIZE t ZORDER BY (id)", Op.OPTIMIZE),
        ("REORG TABLE t APPLY (PURGE)", Op.OPTIMIZE),
        ("CALL cat.system.rewrite_data_files(table => 'db.t')", Op.OPTIMIZE),
        ("ALTER TABLE t ADD COLUMNS (c STRING)", Op.ALTER_METADATA),
        ("ALTER TABLE t SET TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')", Op.ALTER_METADATA),
        ("minor-compact", Op.MINOR_COMPACT),
        ("VACUUM sales.orders RETAIN 168 HOURS", Op.VACUUM),
        ("vacuum", Op.VACUUM),
        ("CALL lake.system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2024-01-01')", Op.EXPIRE_SNAPSHOTS),
        ("CALL lake.system.remove_orphan_files(table => 'db.t')", Op.REMOVE_ORPHAN_FILES),
        ("CALL lake.system.rewrite_manifests('db.t')", Op.REWRITE_MANIFESTS),
        ("CALL lake.system.rewrite_position_delete_files(table => 'db.t')", Op.REWRITE_POSITION_DELETES),
        ("expire-snapshots", Op.EXPIRE_SNAPSHOTS),
        (Op.MERGE, Op.MERGE),
    ],
)
def test_sql_spellings_parse_to_canonical_operations(text, expected):
    assert parse_operation(text) is expected


@pytest.mark.parametrize("text", ["SELECT * FROM t", "", "   ", "upsert", "DROP TABLE t", "ALTER TABLE"])
def test_unknown_spelling_names_the_known_ones(text):
    with pytest.raises(UnknownOperationError) as err:
        parse_operation(text)
    message = str(err.value)
    assert "known operations" in message and "insert_overwrite" in message and "MERGE INTO" in message


def test_profile_rejects_an_operation_it_does_not_know():
    with pytest.raises(UnknownOperationError, match="not in profile 'maxcompute-standard'"):
        get_profile("maxcompute-standard").operation("MERGE INTO t USING s ON 1=1")


def test_operation_properties():
    assert Op.OPTIMIZE.is_compaction and not Op.OPTIMIZE.changes_data
    assert Op.INSERT_INTO.is_blind_append and not Op.INSERT_INTO.reads_table
    assert Op.MERGE.reads_table and Op.MERGE.changes_data


def test_maintenance_changes_no_row_and_only_the_file_deleters_reach_the_whole_table():
    maintenance = [op for op in Op if op.is_maintenance]
    assert maintenance == [
        Op.VACUUM, Op.EXPIRE_SNAPSHOTS, Op.REMOVE_ORPHAN_FILES, Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES,
    ]
    assert not any(op.changes_data or op.is_compaction or op.reads_table for op in maintenance)
    assert {op for op in Op if op.deletes_unreferenced_files} == set(RETENTION_FLOORS)
    assert {op for op in Op if op.yields_to_data_writes} == {op for op in Op if op.is_compaction} | set(maintenance)
    rs = get_profile("delta-rs")
    assert footprint_reach(rs, Op.VACUUM, frozenset({"ds=1"})) is None  # whatever it declared


# ------------------------------------------------------------------------------- retention


@pytest.mark.parametrize(
    ("op", "hours", "minimum"),
    [(Op.VACUUM, 0, 168), (Op.VACUUM, 167.5, 168), (Op.EXPIRE_SNAPSHOTS, 1, 120), (Op.REMOVE_ORPHAN_FILES, 24, 72)],
)
def test_a_retention_below_the_floor_is_refused_naming_value_and_minimum(op, hours, minimum):
    with pytest.raises(InvalidDeclarationError) as err:
        check_retention(op, hours, where="task t")
    text = str(err.value)
    assert text.startswith(f"task t: {op.value} {RETENTION_FLOORS[op].parameter}={hours:g} ")
    assert f"below the safe minimum of {minimum} hours" in text and "allow_unsafe_retention=True" in text
    check_retention(op, hours, allow_unsafe_retention=True)  # said in so many words: allowed
    check_retention(op, minimum)  # the floor itself is safe
    check_retention(op, None)  # the engine's default


def test_the_tables_own_setting_raises_the_floor_never_lowers_it():
    with pytest.raises(InvalidDeclarationError, match=r"minimum of 720 hours \(the table's delta.deletedFileRetentionDuration\)"):
        check_retention(Op.VACUUM, 200, table_minimum_hours=720)
    with pytest.raises(InvalidDeclarationError, match="minimum of 168 hours: "):
        check_retention(Op.VACUUM, 100, table_minimum_hours=1)  # a table at 1 h: still 168


@pytest.mark.parametrize("hours", [-1, float("nan"), float("inf"), "168", True])
def test_a_retention_that_is_no_number_of_hours_is_refused(hours):
    with pytest.raises(InvalidDeclarationError, match="a retention is a number of hours >= 0"):
        check_retention(Op.VACUUM, hours, allow_unsafe_retention=True)


def test_a_retention_for_an_operation_without_one_is_refused():
    with pytest.raises(InvalidDeclarationError, match="merge takes no retention"):
        check_retention(Op.MERGE, 200)
    check_retention(Op.MERGE, None)


def test_every_cell_that_deletes_files_in_use_names_a_file_deleting_maintenance():
    """Kept apart (admission), reported by lint, yet not data corruption: no opt-in needed for
    writes without admission (the retention floor is what keeps the files)."""
    assert Effect.DELETES_FILES_IN_USE.keeps_apart and not Effect.DELETES_FILES_IN_USE.corrupts_data
    found = [
        (name, c) for name, p in PROFILES.items() for c in p.cells if c.effect is Effect.DELETES_FILES_IN_USE
    ]
    assert found
    for name, cell in found:
        assert cell.earlier.deletes_unreferenced_files or cell.later.deletes_unreferenced_files, (name, cell)
        assert PROFILES[name].conflicts(cell.earlier, cell.later)
        assert not PROFILES[name].commit_is_clean(cell.earlier, cell.later)


NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("op", "statement", "hours"),
    [
        (Op.VACUUM, "VACUUM db.t RETAIN 0 HOURS", 0.0),
        (Op.VACUUM, "vacuum db.t retain 168 hours", 168.0),
        (Op.VACUUM, "VACUUM db.t", None),
        (Op.EXPIRE_SNAPSHOTS, "CALL c.system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2026-11-27 12:00:00')", 24.0),
        (Op.EXPIRE_SNAPSHOTS, "CALL c.system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '2999-01-01 00:00:00')", 0.0),
        (Op.REMOVE_ORPHAN_FILES, "CALL c.system.remove_orphan_files(table => 'db.t')", None),
        (Op.REWRITE_MANIFESTS, "CALL c.system.rewrite_manifests('db.t')", None),
    ],
)
def test_the_retention_a_statement_asks_for(op, statement, hours):
    assert statement_retention_hours(op, statement, NOW) == hours


def test_an_unreadable_older_than_is_refused_not_guessed():
    with pytest.raises(InvalidDeclarationError, match="is not a timestamp"):
        statement_retention_hours(Op.EXPIRE_SNAPSHOTS, "CALL c.system.expire_snapshots(older_than => TIMESTAMP 'yesterday')", NOW)

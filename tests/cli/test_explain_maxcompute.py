"""``occflow explain`` on MaxCompute's own writes: ``ALTER TABLE t [PARTITION (...)] COMPACT MINOR |
MAJOR`` and ``... MERGE SMALLFILES`` (issue 16), read as ``MaxComputeWriteOperator`` reads them.

No service is involved: explain reads the SQL text and the table facts given on the command line.
The oracles are the specs' cells, written out here: spec 001 (Delta Table matrix: INSERT INTO then
MINOR COMPACT both succeed, INSERT INTO then MAJOR COMPACT the later fails, MINOR COMPACT twice the
later fails) and spec 000 (a small file MERGE after an INSERT OVERWRITE reports an error).
"""

from __future__ import annotations

import pytest
from explain_cli import explain_json, run

from occflow.core.errors import InvalidDeclarationError
from occflow.core.sqlread import read_alter_write
from occflow.engines.maxcompute import read_maxcompute_write

DELTA_TABLE = ["--table-format", "maxcompute-transactional", "--partition-columns", "ds", "--property", "primary_key=id"]
STANDARD_TABLE = ["--table-format", "maxcompute", "--partition-columns", "ds"]


@pytest.mark.parametrize(
    ("sql", "table", "operation", "partitions"),
    [
        ("ALTER TABLE mc.orders PARTITION (ds = '2024-01-01') COMPACT MINOR", "mc.orders", "minor_compact",
         [{"ds": "2024-01-01"}]),
        ("alter table mc.orders partition (ds='2024-01-01') compact major", "mc.orders", "major_compact",
         [{"ds": "2024-01-01"}]),
        ("ALTER TABLE mc.orders COMPACT Major", "mc.orders", "major_compact", None),
        ("ALTER TABLE `mc`.`orders` PARTITION (`ds` = '2024-01-01') MERGE SMALLFILES", "`mc`.`orders`",
         "small_file_merge", [{"ds": "2024-01-01"}]),
        ("-- nightly\nALTER TABLE mc.orders MERGE SMALLFILES;", "mc.orders", "small_file_merge", None),
        ("ALTER TABLE mc.orders PARTITION (ds = 20240101) COMPACT minor", "mc.orders", "minor_compact",
         [{"ds": "20240101"}]),  # canonical: 20240101 and '20240101' are one value
    ],
)
def test_compact_and_merge_smallfiles_are_read_with_their_partition(capsys, sql, table, operation, partitions):
    found = explain_json(capsys, sql, *DELTA_TABLE)
    assert (found["table"], found["operation"], found["partitions"]) == (table, operation, partitions)
    assert found["profile"] == "maxcompute-transactional"
    # The operator reads the same statement the same way (one reader, in core.sqlread).
    derived = read_maxcompute_write(sql, ["ds"])
    assert (derived.operation.value, derived.table) == (operation, table)


def test_text_output_names_the_operation_and_the_partition(capsys):
    code, out, _ = run(capsys, "ALTER TABLE mc.orders PARTITION (ds = '2024-01-01') COMPACT MINOR", *DELTA_TABLE)
    assert code == 0
    assert "operation:    minor_compact" in out and "partitions:   ds=2024-01-01" in out
    assert "profile:      maxcompute-transactional" in out


@pytest.mark.parametrize(
    ("sql", "against", "conflict"),
    [
        # spec 001: INSERT INTO then MINOR COMPACT, and MINOR COMPACT then INSERT INTO: both succeed.
        ("ALTER TABLE mc.orders PARTITION (ds='a') COMPACT MINOR",
         "INSERT INTO mc.orders PARTITION (ds='a') SELECT * FROM mc.s", False),
        # spec 001: INSERT INTO then MAJOR COMPACT: earlier succeeds, later fails.
        ("ALTER TABLE mc.orders PARTITION (ds='a') COMPACT MAJOR",
         "INSERT INTO mc.orders PARTITION (ds='a') SELECT * FROM mc.s", True),
        # spec 001: MINOR COMPACT then MINOR COMPACT: the later fails; on other partitions nothing overlaps.
        ("ALTER TABLE mc.orders PARTITION (ds='a') COMPACT MINOR", "ALTER TABLE mc.orders PARTITION (ds='a') COMPACT MINOR",
         True),
        ("ALTER TABLE mc.orders PARTITION (ds='a') COMPACT MINOR", "ALTER TABLE mc.orders PARTITION (ds='b') COMPACT MINOR",
         False),
        # A compaction of the whole table overlaps every partition.
        ("ALTER TABLE mc.orders COMPACT MINOR", "ALTER TABLE mc.orders PARTITION (ds='b') COMPACT MINOR", True),
    ],
)
def test_compactions_against_other_jobs_follow_spec_001(capsys, sql, against, conflict):
    # Order-blind (no commit gates): any failing commit order of spec 001's cells is a conflict.
    verdict = explain_json(capsys, sql, *DELTA_TABLE, "--against", against, "--no-commit-gate")["against"][0]
    assert verdict["conflict"] is conflict, verdict["reason"]


def test_small_file_merge_after_an_overwrite_conflicts_on_a_standard_table(capsys):
    # spec 000: INSERT OVERWRITE then small file MERGE: the later small file MERGE reports an error.
    found = explain_json(capsys, "ALTER TABLE mc.totals PARTITION (ds='a') MERGE SMALLFILES", *STANDARD_TABLE,
                         "--against", "INSERT OVERWRITE TABLE mc.totals PARTITION (ds='a') SELECT * FROM mc.s",
                         "--against", "INSERT OVERWRITE TABLE mc.totals PARTITION (ds='b') SELECT * FROM mc.s",
                         "--no-commit-gate")
    assert found["profile"] == "maxcompute-standard"
    same, other = found["against"]
    assert (same["overlap"], same["conflict"]) == (True, True)
    assert "insert_overwrite then small_file_merge: the later fails" in same["reason"]
    assert (other["overlap"], other["conflict"]) == (False, False)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        # more than one statement, whichever comes first
        ("ALTER TABLE mc.orders COMPACT MINOR; DROP TABLE mc.orders", "holds 2 statements"),
        ("DROP TABLE mc.orders; ALTER TABLE mc.orders COMPACT MINOR", "holds 2 statements"),
        # a statement hidden in a quoted value ends the PARTITION clause early: two statements
        ("ALTER TABLE mc.orders PARTITION (ds = 'a'); DROP TABLE mc.orders; --') COMPACT MINOR", "statement"),
        # hostile identifiers
        ("ALTER TABLE mc.`orders; DROP TABLE x` COMPACT MINOR", "invalid table identifier"),
        ("ALTER TABLE `/warehouse/mc/orders` COMPACT MINOR", "a path is not a table name"),
        ("ALTER TABLE mc.orders PARTITION (`d s` = 'a') COMPACT MINOR", "invalid partition column 'd s'"),
        ("ALTER TABLE mc.orders PARTITION (ds = 'a', DS = 'b') COMPACT MINOR", "names column 'DS' twice"),
        # partition values are quoted literals, never expressions or names
        ("ALTER TABLE mc.orders PARTITION (ds = x) COMPACT MINOR", "is not a literal (write it quoted"),
        ("ALTER TABLE mc.orders PARTITION (ds = ${day}) COMPACT MINOR", "is not a literal"),
        ("ALTER TABLE mc.orders PARTITION (ds = 2024-01-01) COMPACT MINOR", "with literal values"),
        ("ALTER TABLE mc.orders PARTITION (ds = 'a' OR 1 = 1) COMPACT MINOR", "with literal values"),
        # not one of MaxCompute's ALTER TABLE writes
        ("ALTER TABLE mc.orders COMPACT MINOR NOW", "COMPACT MINOR | MAJOR"),
        ("ALTER TABLE mc.orders ADD COLUMNS (x BIGINT)", "COMPACT MINOR | MAJOR"),
        ("ALTER TABLE mc.orders PARTITION (region = 'eu') COMPACT MINOR", "not partition columns of the table"),
    ],
)
def test_bad_or_hostile_statements_exit_2_naming_what_is_wrong(capsys, sql, message):
    code, out, err = run(capsys, sql, *DELTA_TABLE)
    assert code == 2 and out == ""
    assert message in err, err


def test_a_quoted_value_holding_sql_is_one_value_not_sql():
    found = read_alter_write("ALTER TABLE mc.orders PARTITION (ds = 'a\\'; DROP TABLE mc.x; --') COMPACT MINOR")
    assert dict(found.partition) == {"ds": "a'; DROP TABLE mc.x; --"}
    assert (found.table, found.operation.value) == ("mc.orders", "minor_compact")


def test_a_compaction_on_a_delta_or_iceberg_table_points_at_maxcompute(capsys):
    code, _, err = run(capsys, "ALTER TABLE db.events COMPACT MINOR", "--table-format", "delta")
    assert code == 2 and "is MaxCompute's ALTER TABLE write, not delta SQL" in err
    assert "--table-format maxcompute-transactional" in err


def test_the_core_reader_refuses_what_it_cannot_read():
    with pytest.raises(InvalidDeclarationError, match="is not one statement"):
        read_alter_write("ALTER TABLE mc.t COMPACT MINOR; ALTER TABLE mc.t COMPACT MAJOR")
    with pytest.raises(InvalidDeclarationError, match="is not ALTER TABLE"):
        read_alter_write("ALTER VIEW mc.v COMPACT MINOR")

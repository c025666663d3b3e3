from __future__ import annotations

import pytest

from occflow.core.errors import UnknownOperationError
from occflow.core.operations import Operation as Op
from occflow.core.operations import parse_operation
from occflow.core.profiles import get_profile


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

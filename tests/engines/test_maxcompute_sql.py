"""MaxCompute SQL read into a write declaration, and a table's facts read into its matrix.

The SQL tests need no service. The facts tests read tables through PyODPS's ``get_table``
interface on ``StandInProject``, a stand-in for the remote MaxCompute service that cannot run
here; the expected profiles are spec 000 (standard tables, and transactional ones without a
primary key) and specs 001/002 (Delta Tables: transactional with a primary key).
"""

from __future__ import annotations

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError
from occflow.engines.maxcompute import (
    StandInProject,
    check_maxcompute_sql,
    maxcompute_table_facts,
    read_maxcompute_write,
)


@pytest.mark.parametrize(
    ("sql", "operation", "partitions"),
    [
        ("INSERT INTO TABLE mc.t PARTITION (ds='2024-01-01') SELECT * FROM mc.s", "insert_into", [{"ds": "2024-01-01"}]),
        ("insert overwrite table mc.t partition (ds = '2024-01-01') select * from mc.s", "insert_overwrite",
         [{"ds": "2024-01-01"}]),
        ("UPDATE mc.t SET v = 1 WHERE ds = '2024-01-01' AND id = 4", "update", [{"ds": "2024-01-01"}]),
        ("DELETE FROM mc.t WHERE ds IN ('2024-01-01', '2024-01-02')", "delete",
         [{"ds": "2024-01-01"}, {"ds": "2024-01-02"}]),
        ("TRUNCATE TABLE mc.t PARTITION (ds='2024-01-01')", "truncate", [{"ds": "2024-01-01"}]),
        ("ALTER TABLE mc.t PARTITION (ds='2024-01-01') COMPACT minor", "minor_compact", [{"ds": "2024-01-01"}]),
        ("alter table mc.t partition (ds = '2024-01-01') compact MAJOR", "major_compact", [{"ds": "2024-01-01"}]),
        ("ALTER TABLE mc.t COMPACT major", "major_compact", None),
        ("ALTER TABLE mc.t PARTITION (ds='2024-01-01') MERGE SMALLFILES", "small_file_merge", [{"ds": "2024-01-01"}]),
        ("MERGE INTO mc.t t USING mc.s s ON t.ds = '2024-01-01' AND t.id = s.id "
         "WHEN MATCHED THEN UPDATE SET t.v = s.v", "update", [{"ds": "2024-01-01"}]),
        ("UPDATE mc.t SET v = 1", "update", None),
    ],
)
def test_maxcompute_sql_is_read_as_its_operation_and_partitions(sql, operation, partitions):
    derived = read_maxcompute_write(sql, ["ds"])
    assert derived.table == "mc.t"
    assert derived.operation.value == operation
    assert (None if derived.partitions is None else [dict(p) for p in derived.partitions]) == partitions


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("ALTER TABLE mc.t ADD COLUMNS (x BIGINT)", "COMPACT MINOR | MAJOR"),
        ("ALTER TABLE mc.t PARTITION (ds=x) COMPACT minor", "is not a literal"),
        ("ALTER TABLE mc.t PARTITION (region='eu') COMPACT minor", "not partition columns of the table"),
        ("ALTER TABLE mc.t PARTITION (ds='a') COMPACT minor; DROP TABLE mc.t", "holds 2 statements"),
        ("INSERT INTO mc.t PARTITION (ds='a') SELECT 1; DELETE FROM mc.t", "write statements"),
    ],
)
def test_anything_but_one_maxcompute_write_is_refused_naming_why(sql, message):
    with pytest.raises(InvalidDeclarationError, match=message):
        read_maxcompute_write(sql, ["ds"])


def test_a_declaration_narrower_than_the_sql_is_refused():
    declared = WriteDeclaration.create("mc.t", "update", profile="maxcompute-transactional",
                                       partitions={"ds": "2024-01-02"})
    with pytest.raises(InvalidDeclarationError, match="task_a: .*ds=2024-01-01"):
        check_maxcompute_sql("UPDATE mc.t SET v = 1 WHERE ds = '2024-01-01'", declared, "task_a")


@pytest.mark.parametrize(
    ("transactional", "primary_key", "profile"),
    [(False, None, "maxcompute-standard"), (True, (), "maxcompute-standard"),
     (True, ("id",), "maxcompute-transactional")],
)
def test_the_table_decides_its_matrix(transactional, primary_key, profile):
    project = StandInProject()
    project.create_table("mc.t", partition_columns=["ds"], partitions=[{"ds": "a"}], transactional=transactional,
                         primary_key=primary_key)
    facts = maxcompute_table_facts(project, "mc.t")
    assert facts.partition_columns == ("ds",)
    assert facts.profile_name() == profile

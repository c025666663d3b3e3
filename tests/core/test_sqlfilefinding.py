"""How an engine finds the files a condition-driven write rewrites (``core.sqlfilefinding``):
on delta-rs only the conjuncts delta-kernel translates confine the footprint (measured on real
delta-rs in ``tests/engines/test_derivation_fuzz.py``)."""

from __future__ import annotations

import pytest
import sqlglot

from occflow.core.errors import InvalidDeclarationError
from occflow.core.sqlderive import derive_write
from occflow.core.sqlfilefinding import FILE_FINDING, FileFinding, file_finding, kernel_translates
from occflow.core.tablefacts import ENGINES

COLUMNS = ["ds", "region"]
FOUND = "(ds <> '2024-01-03' AND upper(region) = 'AP') OR ds NOT IN ('2024-01-03', '2024-01-01')"


def test_every_engine_has_a_file_finding_rule() -> None:
    assert set(FILE_FINDING) == set(ENGINES)
    assert file_finding("delta-rs") is FileFinding.KERNEL_CONJUNCTS
    assert file_finding(None) is FileFinding.KERNEL_CONJUNCTS  # not named: the rule that confines least


def test_an_unknown_engine_is_refused_with_the_known_ones() -> None:
    with pytest.raises(InvalidDeclarationError, match="unknown engine 'deltars'.*delta-rs"):
        derive_write("DELETE FROM db.t WHERE ds = 'A'", COLUMNS, "deltars")


@pytest.mark.parametrize("condition", [
    "ds = 'A'", "ds <> 'A'", "NOT ds IN ('A', 'B')", "ds NOT IN ('A', 'B')", "ds BETWEEN 'A' AND 'B'",
    "ds IS NULL", "ds IS NOT NULL", "(ds = 'A' AND v = 3) OR ds > 'C'", "p > -1", "d = DATE '2024-01-01'",
    "t.ds = 'A'", "TRUE",
])
def test_conditions_delta_kernel_translates(condition: str) -> None:
    assert kernel_translates(sqlglot.parse_one(condition, read="spark"))


@pytest.mark.parametrize("condition", [
    "upper(region) = 'AP'", "CASE WHEN ds = 'A' THEN true ELSE false END", "ds LIKE 'A%'", "v + 1 = 3",
    "ds IN ('A', NULL)", "ds = NULL", "ds <=> 'A'", "ds IN (SELECT ds FROM s)", "(ds = 'A' AND abs(v) = 3) OR ds = 'B'",
])
def test_conditions_read_as_not_translated(condition: str) -> None:
    assert not kernel_translates(sqlglot.parse_one(condition, read="spark"))


@pytest.mark.parametrize("sql", [
    f"UPDATE db.fz SET v = v + 1 WHERE {FOUND}",
    f"DELETE FROM db.fz WHERE {FOUND}",
    f"INSERT INTO db.fz REPLACE WHERE {FOUND} SELECT * FROM s",
    "DELETE FROM db.fz WHERE CASE WHEN ds = '2024-01-01' THEN true ELSE false END",
])
def test_on_deltars_a_condition_with_no_translated_conjunct_is_the_whole_table(sql: str) -> None:
    derived = derive_write(sql, COLUMNS, "delta-rs")
    assert derived.partitions is None, derived.to_json()
    assert any("delta-kernel" in why for why in derived.why)


def test_on_deltars_the_translated_conjuncts_still_confine() -> None:
    sql = f"UPDATE db.fz SET v = 0 WHERE ds = '2024-01-01' AND ({FOUND})"
    derived = derive_write(sql, COLUMNS, "delta-rs")
    assert derived.partitions == ({"ds": "2024-01-01"},)
    assert any("delta-kernel" in why for why in derived.why)


def test_spark_reads_the_whole_condition() -> None:
    derived = derive_write(f"UPDATE db.fz SET v = v + 1 WHERE {FOUND}", COLUMNS, "spark-iceberg")
    assert derived.partitions is not None
    assert not any("delta-kernel" in why for why in derived.why)


def test_a_condition_that_pins_no_partition_says_so_not_delta_kernel() -> None:
    derived = derive_write("DELETE FROM db.fz WHERE abs(v) = 3", COLUMNS, "delta-rs")
    assert derived.partitions is None
    assert not any("delta-kernel" in why for why in derived.why)


def test_merge_and_optimize_conditions_are_not_file_finding_conditions() -> None:
    merge = "MERGE INTO db.fz t USING s ON t.id = s.id AND upper(t.region) = 'AP' AND t.ds = 'A' WHEN MATCHED THEN DELETE"
    assert derive_write(merge, COLUMNS, "delta-rs").partitions == ({"ds": "A"},)

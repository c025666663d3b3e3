"""Why a range open below may stand for a column's NULL partition (issue 33; the typed fuzzer's
finding on Iceberg: ``DELETE ... WHERE p < '08'`` rewrote the files of ``p = NULL``, because Iceberg
orders NULL below every value when it finds files, ``tests/engines/test_derivation_fuzz.py``).

A partition key names no NULL value. Reading ``p<8`` as holding ``p``'s NULL partition on Iceberg
is sound for admission only if every other write that reaches that NULL partition overlaps it:
writes that put rows there or select them by NULL derive as the whole table, a static PARTITION
with ``p = NULL`` leaves ``p`` unconfined, and another range open below overlaps by its range. The
oracle here is ``footprints_overlap`` over every way the derivation lets a write reach NULL, and
a write that does not (``p > 8``, ``p = 5``) staying apart."""

from __future__ import annotations

import pytest

from occflow.core.footprint import footprints_overlap
from occflow.core.sqlderive import derive_write

TYPES = {"p": "int", "d": "date"}
COLUMNS = ["p", "d"]

REACHES_NULL_P = [
    "UPDATE db.t SET p = NULL WHERE p = 10",
    "DELETE FROM db.t WHERE p IS NULL",
    "INSERT INTO db.t VALUES (1, NULL, DATE '2024-01-01')",
    "MERGE INTO db.t t USING s ON t.id = s.id AND t.p = 10 WHEN MATCHED THEN UPDATE SET t.p = NULL",
    "INSERT INTO db.t PARTITION (p = NULL, d = '2024-01-01') SELECT 1",
    "DELETE FROM db.t WHERE p <= 2",
    "DELETE FROM db.t WHERE p NOT BETWEEN 3 AND 4",
    "DELETE FROM db.t WHERE NOT (p = 3)",
    "DELETE FROM db.t WHERE d < '2024-01-01'",
]


@pytest.mark.parametrize("other", REACHES_NULL_P)
def test_every_write_that_reaches_the_null_partition_overlaps_a_range_open_below(other: str) -> None:
    below = derive_write("DELETE FROM db.t WHERE p < '08'", COLUMNS, "spark-iceberg", column_types=TYPES)
    assert below.partition_keys() == {"p<8"}
    derived = derive_write(other, COLUMNS, "spark-iceberg", column_types=TYPES)
    assert footprints_overlap(below.partition_keys(), derived.partition_keys()), derived.to_json()


@pytest.mark.parametrize("other", ["DELETE FROM db.t WHERE p > 8", "UPDATE db.t SET d = '2024-01-02' WHERE p = 9"])
def test_a_write_that_does_not_reach_the_null_partition_stays_apart(other: str) -> None:
    below = derive_write("DELETE FROM db.t WHERE p < '08'", COLUMNS, "spark-iceberg", column_types=TYPES)
    derived = derive_write(other, COLUMNS, "spark-iceberg", column_types=TYPES)
    assert not footprints_overlap(below.partition_keys(), derived.partition_keys()), derived.to_json()
